"""Table: git and its subcommands, read from the Git 2.39 manual pages (git-<subcommand>(1)),
checked against each subcommand's `-h` option list and parser (Git 2.39.5).

Global options come before the subcommand (git(1) OPTIONS); each subcommand is an entry of its
own, and subcommands with subcommands of their own (`git stash list`, `git remote add`) nest.
Long options may be negated (`--no-X`) as git's parse-options allows. Options not listed are
unknown: a family never covers them. Abbreviated long options, which parse-options accepts, are
unknown too.

How option values are read follows git's parsers: parse-options and revision.c's
`parse_long_opt` take a required value attached or as the next word; an optional value
(`--abbrev[=<n>]`, `-C[<score>]`) and revision.c's `--format=`-style options are attached only.
Where unsure, a value is modelled as attached: the next word is then read as an option or an
operand, never silently swallowed.

A mode switch that turns off what a subcommand does (`git config --get`,
`git format-patch --stdout`, `fetch --dry-run`) has its negation listed explicitly with the
subcommand's effect (the reader also treats turning any mode off as unknown). Dry runs of
subcommands that write are not modes: they still take locks.

What the table assumes of git's configuration: callgate binds `.git/config`, `.git/hooks`,
`.git/info/attributes` and `.gitmodules` read-only inside the sandbox and sets
GIT_CONFIG_GLOBAL=/dev/null, so the programs configuration makes git run (core.pager,
core.fsmonitor, diff and merge drivers, textconv, clean and smudge filters, hooks, the editor,
gpg.program) are the human's. Options that only let git use them read (`--textconv`,
`cat-file --filters`); `--ext-diff` is marked as running code all the same, since the external
diff is a whole program handed both files. Options that name another repository directory
(`--git-dir`, `--bare`) run code: that directory's `config` is not bound read-only. Git's own
discovery of a directory made to look like a bare repository is refused: every command runs
with `safe.bareRepository=explicit` (command-line scope, `command_spec.command_env`). A `.git`
*file* (`gitdir: …`) points git at another directory's config: WriteFile on a file named
`.git` needs a human, and no read-only family can create one. Subcommands that refresh the
index's cached file stat data when they can lock it (`status`, `diff`, `describe --dirty`)
count as reading: what the index records does not change (`git --no-optional-locks` turns
the refresh off).

Options that run a program of their own (`grep -O`, `rebase -x`, `--upload-pack`, `--exec`,
`-c`) or that explicitly open the editor (`-e`, `-i`, hunk editing with `-p`) run code. The
editor git opens when no message is given (`git commit` without `-m`) is the human's
configured one and is not flagged; nor are the hooks commit, merge or rebase run. Signing and
verifying run gpg: `--show-signature`, `-S`, `--verify-signatures`, `verify-commit`, and the
`%G` placeholders of a `--format`, which `pretty_format` finds.

Deny equivalence (`build.DELETE`): what removes work-tree files or saved changes (`git rm`,
`git clean`, `git reset --hard`, `checkout -f`, `worktree remove`, `submodule deinit`,
`stash drop` and `stash clear`). Deleting refs (`branch -D`, `tag -d`, `reflog expire`) and
pruning unreachable objects (`gc`, `prune`, `repack -d`) is `Effect.DELETE` without that action.
"""

from __future__ import annotations

from dataclasses import replace

from .build import DELETE, attached, does, flags, mode, values
from .model import EVERYTHING, Effect, Operands, Option, Program, ScriptReader, Style, Takes

_MANUAL = "Git 2.39"

# ---------------------------------------------------------------- shared readers and options


def pretty_format(text: str) -> tuple[tuple[Effect, str], ...]:
    """Reads a pretty format (`--format=`, `--pretty=`; git-log(1), Git 2.39, PRETTY FORMATS):
    the `%G` placeholders (`%G?`, `%GS`, `%GK`, ...) check the commit's signature with gpg.
    `%%` is a literal percent; `%+x`, `%-x` and `% x` are placeholder `x` with a modifier."""
    i = 0
    while i < len(text) - 1:
        if text[i] != "%":
            i += 1
            continue
        placeholder = text[i + 1]
        if placeholder in "+- " and i + 2 < len(text):
            placeholder = text[i + 2]
        if placeholder == "G":
            return ((Effect.CODE, "format placeholder %G (runs gpg to check signatures)"),)
        i += 3 if text[i + 1] in "+- " else 2
    return ()


_PULL_REBASE_READ = frozenset(
    {"", "true", "false", "yes", "no", "on", "off", "1", "0", "merges", "m"}
)


def pull_rebase(text: str) -> tuple[tuple[Effect, str], ...]:
    """Reads `git pull --rebase=<mode>` (git-pull(1), Git 2.39, OPTIONS): `interactive` opens
    the editor on the todo list; other values are booleans or `merges`."""
    if text in ("i", "interactive"):
        return ((Effect.CODE, "--rebase=interactive (opens the editor on the todo list)"),)
    if text.lower() in _PULL_REBASE_READ:
        return ()
    return ((Effect.UNKNOWN, f"--rebase value {text[:20]!r}"),)


def _format(spec: str) -> Option:
    """A pretty-format option, attached only (`--pretty[=<f>]`, revision.c's `--format=<f>`):
    its value is read by `pretty_format`."""
    return Option(tuple(spec.split()), Takes.ATTACHED, example="%H", script=True)


def _undo(spec: str, effect: Effect, what: str, actions: frozenset[str] = frozenset()) -> Option:
    """The negation of a mode switch: it gives back the effect the mode took away."""
    return does(spec, effect, what, actions=actions)


_EXT_DIFF = does(
    "--ext-diff", Effect.CODE, "runs the external diff program (GIT_EXTERNAL_DIFF or diff.external)"
)
_OUTPUT = does(
    "--output",
    Effect.WRITE,
    "writes the output to the named file",
    takes=Takes.VALUE,
    example="out.txt",
)
_GPG_SIGN = does("-S --gpg-sign", Effect.CODE, "runs gpg to sign the commit", takes=Takes.ATTACHED)
_SHOW_SIGNATURE = does("--show-signature", Effect.CODE, "runs gpg to check signatures")
_EDIT = does("-e --edit", Effect.CODE, "opens the editor")
_PATCH = does("-p --patch", Effect.CODE, "selects hunks interactively (its `e` opens the editor)")
_PATHSPEC_FILE = (
    *values("--pathspec-from-file", example="paths.txt"),
    *flags("--pathspec-file-nul"),
)

# git-diff(1), Git 2.39, OPTIONS (Documentation/diff-options.txt), as `git diff -h` lists them.
_DIFF = (
    *flags(
        "-p --patch",
        "-u",
        "-s --no-patch",
        "-W --function-context",
        "--raw",
        "--patch-with-raw",
        "--patch-with-stat",
        "--numstat",
        "--shortstat",
        "--cumulative",
        "--check",
        "--summary",
        "--name-only",
        "--name-status",
        "--compact-summary",
        "--binary",
        "--full-index",
        "-z",
        "--no-prefix",
        "-D --irreversible-delete",
        "--find-copies-harder",
        "--no-renames",
        "--rename-empty",
        "--follow",
        "--minimal",
        "-w --ignore-all-space",
        "-b --ignore-space-change",
        "--ignore-space-at-eol",
        "--ignore-cr-at-eol",
        "--ignore-blank-lines",
        "--indent-heuristic",
        "--patience",
        "--histogram",
        "-a --text",
        "-R",
        "--exit-code",
        "--quiet",
        "--textconv",
        "--no-textconv",
        "--no-ext-diff",
        "--ita-invisible-in-index",
        "--ita-visible-in-index",
        "--pickaxe-all",
        "--pickaxe-regex",
        "--no-color",
        "--no-relative",
    ),
    *attached(
        "-U --unified",
        "-X --dirstat",
        "--dirstat-by-file",
        "--stat",
        "-B --break-rewrites",
        "-M --find-renames",
        "-C --find-copies",
        "--abbrev",
        example="3",
    ),
    *attached(
        "--color",
        "--word-diff",
        "--color-words",
        "--color-moved",
        "--relative",
        "--ignore-submodules",
        "--submodule",
        example="",
    ),
    *values(
        "--stat-width",
        "--stat-name-width",
        "--stat-graph-width",
        "--stat-count",
        "--inter-hunk-context",
        "-l",
        example="3",
    ),
    *values(
        "--src-prefix",
        "--dst-prefix",
        "--line-prefix",
        "--output-indicator-new",
        "--output-indicator-old",
        "--output-indicator-context",
        "-I --ignore-matching-lines",
        "--anchored",
        "--word-diff-regex",
        "-S",
        "-G",
        "--diff-filter",
        example="x",
    ),
    # Values git accepts, so the ground-truth check runs these options for real.
    *values("--ws-error-highlight", example="new"),
    *values("--diff-algorithm", example="patience"),
    *values("--color-moved-ws", example="no"),
    *values("--find-object", example="HEAD"),
    *values("-O", "--rotate-to", "--skip-to", example="notes.txt"),
    _EXT_DIFF,
    _OUTPUT,
)

# git-log(1) and git-rev-list(1), Git 2.39, Commit Limiting, History Simplification, Commit
# Ordering, Object Traversal, Commit Formatting (revision.c, diff-merges.c).
_REVISIONS = (
    # Measured in bubblewrap: it writes temporary objects into .git/objects (and removes them).
    does("--remerge-diff", Effect.WRITE, "writes temporary objects into the repository"),
    *flags(
        "--all",
        "--reflog",
        "--alternate-refs",
        "--single-worktree",
        "--not",
        "--do-walk",
        "--bisect",
        "--indexed-objects",
        "--first-parent",
        "--exclude-first-parent-only",
        "-g --walk-reflogs",
        "--merge",
        "--topo-order",
        "--date-order",
        "--author-date-order",
        "--reverse",
        "--simplify-merges",
        "--simplify-by-decoration",
        "--show-pulls",
        "--full-history",
        "--dense",
        "--sparse",
        "--remove-empty",
        "--in-commit-order",
        "--parents",
        "--children",
        "--merges",
        "--no-merges",
        "--no-min-parents",
        "--no-max-parents",
        "--boundary",
        "--left-right",
        "--left-only",
        "--right-only",
        "--cherry",
        "--cherry-mark",
        "--cherry-pick",
        "--ignore-missing",
        "--stdin",
        "-r",
        "-t",
        "-v",
        "-m",
        "-c",
        "--cc",
        "--no-diff-merges",
        "--combined-all-paths",
        "--root",
        "--no-commit-id",
        "--always",
        "--oneline",
        "--graph",
        "--abbrev-commit",
        "--no-abbrev-commit",
        "--no-abbrev",
        "--full-diff",
        "--relative-date",
        "--log-size",
        "--no-notes",
        "--standard-notes",
        "--encode-email-headers",
        "--all-match",
        "--invert-grep",
        "-i --regexp-ignore-case",
        "--basic-regexp",
        "-E --extended-regexp",
        "-F --fixed-strings",
        "-P --perl-regexp",
    ),
    *values(
        "-n --max-count",
        "--skip",
        "--max-age",
        "--min-age",
        example="3",
    ),
    *values(
        "--since --after",
        "--since-as-filter",
        "--until --before",
        example="2020-01-01",
    ),
    *values("--date", example="iso"),
    *values(
        "--author",
        "--committer",
        "--grep",
        "--grep-reflog",
        "--encoding",
        "--glob",
        "--exclude",
        "--exclude-hidden",
        example="x",
    ),
    *values("--diff-merges", example="off"),
    *attached(
        "--branches",
        "--tags",
        "--remotes",
        "--no-walk",
        "--ancestry-path",
        "--min-parents",
        "--max-parents",
        "--expand-tabs",
        "--notes --show-notes",
        "--show-linear-break",
        "--early-output",
        example="",
    ),
    _format("--pretty"),
    _format("--format"),
    _SHOW_SIGNATURE,
)

# git-log(1), Git 2.39, OPTIONS: the options builtin/log.c parses before the revision options.
_LOG_OWN = (
    *flags(
        "-q --quiet",
        "--source",
        "--use-mailmap --mailmap",
        "--clear-decorations",
    ),
    *values("--decorate-refs", "--decorate-refs-exclude", example="refs/heads/*"),
    *attached("--decorate", example="short"),
    *values("-L", example="1,2:notes.txt"),
)

_LOG_OPTIONS = (*_REVISIONS, *_DIFF, *_LOG_OWN)


def _log_like(name: str, manual: str) -> Program:
    """A subcommand that walks history with the log machinery (log, show, whatchanged)."""
    return Program(
        name,
        manual=manual,
        negatable=True,
        numeric_flags=True,
        script=pretty_format,
        options=_LOG_OPTIONS,
    )


# ---------------------------------------------------------------- read-only subcommands

LOG = _log_like(
    "log",
    f"git-log(1), {_MANUAL}, OPTIONS, Commit Limiting, History Simplification, Commit "
    "Ordering, Object Traversal, Commit Formatting, PRETTY FORMATS, Diff Formatting",
)
SHOW = _log_like("show", f"git-show(1), {_MANUAL}, OPTIONS, PRETTY FORMATS, DIFF FORMATTING")
WHATCHANGED = _log_like("whatchanged", f"git-whatchanged(1), {_MANUAL}, DESCRIPTION")

DIFF = Program(
    "diff",
    manual=f"git-diff(1), {_MANUAL}, DESCRIPTION, OPTIONS",
    negatable=True,
    options=(
        *_DIFF,
        *flags(
            "--cached --staged",
            "--merge-base",
            "--no-index",
            "-0",
            "-1 --base",
            "-2 --ours",
            "-3 --theirs",
            "-c",
            "--cc",
            "-q",
        ),
    ),
)

DIFF_TREE = Program(
    "diff-tree",
    manual=f"git-diff-tree(1), {_MANUAL}, OPTIONS",
    negatable=True,
    script=pretty_format,
    options=(
        *_DIFF,
        *flags(
            "-r",
            "-t",
            "-m",
            "-c",
            "--cc",
            "--combined-all-paths",
            "--root",
            "--merge-base",
            "--stdin",
            "-v",
            "--no-commit-id",
            "--always",
        ),
        _format("--pretty"),
        _format("--format"),
    ),
)

DIFF_FILES = Program(
    "diff-files",
    manual=f"git-diff-files(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *_DIFF,
        *flags("-0", "-1 --base", "-2 --ours", "-3 --theirs", "-c", "--cc", "-q", "-r"),
    ),
)

DIFF_INDEX = Program(
    "diff-index",
    manual=f"git-diff-index(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(*_DIFF, *flags("--cached", "-m", "--merge-base", "-r")),
)

_BLAME_OPTIONS = (
    *flags(
        "--incremental",
        "-b",
        "--root",
        "--show-stats",
        "--progress",
        "--score-debug",
        "-f --show-name",
        "-n --show-number",
        "-p --porcelain",
        "--line-porcelain",
        "-c",
        "-t",
        "-l",
        "-s",
        "-e --show-email",
        "-w",
        "--color-lines",
        "--color-by-age",
        "--minimal",
        "--reverse",
        "--first-parent",
    ),
    *values("--ignore-rev", "--encoding", example="x"),
    *values("--date", example="iso"),
    *values("--ignore-revs-file", "-S", "--contents", example="notes.txt"),
    *values("-L", example="1,2"),
    *attached("-C", "-M", "--abbrev", example="3"),
)

BLAME = Program(
    "blame",
    manual=f"git-blame(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=_BLAME_OPTIONS,
)
ANNOTATE = replace(BLAME, name="annotate", manual=f"git-annotate(1), {_MANUAL}, OPTIONS")

GREP = Program(
    "grep",
    manual=f"git-grep(1), {_MANUAL}, OPTIONS",
    negatable=True,
    numeric_flags=True,
    options=(
        *flags(
            "--cached",
            "--no-index",
            "--untracked",
            "--exclude-standard",
            "--recurse-submodules",
            "-v --invert-match",
            "-i --ignore-case",
            "-w --word-regexp",
            "-a --text",
            "-I",
            "--textconv",
            "--no-textconv",
            "-r --recursive",
            "-E --extended-regexp",
            "-G --basic-regexp",
            "-F --fixed-strings",
            "-P --perl-regexp",
            "-n --line-number",
            "--column",
            "-h",
            "-H",
            "--full-name",
            "-l --files-with-matches --name-only",
            "-L --files-without-match",
            "-z --null",
            "-o --only-matching",
            "-c --count",
            "--break",
            "--heading",
            "-p --show-function",
            "-W --function-context",
            "--and",
            "--or",
            "--not",
            "-q --quiet",
            "--all-match",
            "--ext-grep",
        ),
        *values(
            "--max-depth",
            "-C --context",
            "-B --before-context",
            "-A --after-context",
            "--threads",
            "-m --max-count",
            example="2",
        ),
        *values("-e", example="x"),
        *values("-f", example="patterns.txt"),
        *attached("--color", example="always"),
        does(
            "-O --open-files-in-pager",
            Effect.CODE,
            "runs the named pager (or the configured one) on the matching files",
            takes=Takes.ATTACHED,
            example="less",
        ),
    ),
)

LS_FILES = Program(
    "ls-files",
    manual=f"git-ls-files(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "-z",
            "-t",
            "-v",
            "-f",
            "-c --cached",
            "-d --deleted",
            "-m --modified",
            "-o --others",
            "-i --ignored",
            "-s --stage",
            "-k --killed",
            "--directory",
            "--eol",
            "--empty-directory",
            "-u --unmerged",
            "--resolve-undo",
            "--exclude-standard",
            "--full-name",
            "--recurse-submodules",
            "--error-unmatch",
            "--debug",
            "--deduplicate",
            "--sparse",
        ),
        *values("-x --exclude", "--with-tree", "--format", example="x"),
        *values("-X --exclude-from", "--exclude-per-directory", example=".gitignore"),
        *attached("--abbrev", example="8"),
    ),
)

LS_TREE = Program(
    "ls-tree",
    manual=f"git-ls-tree(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "-d",
            "-r",
            "-t",
            "-z",
            "-l --long",
            "--name-only --name-status",
            "--object-only",
            "--full-name",
            "--full-tree",
        ),
        *values("--format", example="%(path)"),
        *attached("--abbrev", example="8"),
    ),
)

REV_PARSE = Program(
    "rev-parse",
    manual=f"git-rev-parse(1), {_MANUAL}, OPTIONS (Operation Modes, Options for --parseopt, "
    "Options for Filtering, Options for Output, Options for Objects, Options for Files, Other "
    "Options)",
    options=(
        *flags(
            "--parseopt",
            "--sq-quote",
            "--keep-dashdash",
            "--stop-at-non-option",
            "--stuck-long",
            "--revs-only",
            "--no-revs",
            "--flags",
            "--no-flags",
            "--verify",
            "-q --quiet",
            "--sq",
            "--not",
            "--symbolic",
            "--symbolic-full-name",
            "--all",
            "--bisect",
            "--local-env-vars",
            "--git-dir",
            "--absolute-git-dir",
            "--git-common-dir",
            "--is-inside-git-dir",
            "--is-inside-work-tree",
            "--is-bare-repository",
            "--is-shallow-repository",
            "--shared-index-path",
            "--show-toplevel",
            "--show-superproject-working-tree",
            "--show-prefix",
            "--show-cdup",
        ),
        *values("-n", example="3"),
        *values("--default", "--prefix", "--git-path", "--resolve-git-dir", example="x"),
        *attached(
            "--short",
            "--abbrev-ref",
            "--branches",
            "--tags",
            "--remotes",
            "--glob",
            "--exclude",
            "--exclude-hidden",
            "--disambiguate",
            "--path-format",
            "--show-object-format",
            "--since --after",
            "--until --before",
            example="",
        ),
    ),
)

REV_LIST = Program(
    "rev-list",
    manual=f"git-rev-list(1), {_MANUAL}, OPTIONS",
    negatable=True,
    numeric_flags=True,
    script=pretty_format,
    options=(
        *_REVISIONS,
        *_DIFF,
        *flags(
            "--count",
            "--objects",
            "--objects-edge",
            "--objects-edge-aggressive",
            "--unpacked",
            "--object-names",
            "--no-object-names",
            "--no-filter",
            "--filter-provided-objects",
            "--filter-print-omitted",
            "--exclude-promisor-objects",
            "--header",
            "--commit-header",
            "--no-commit-header",
            "--timestamp",
            "--bisect-vars",
            "--bisect-all",
            "--use-bitmap-index",
        ),
        *attached("--filter", "--missing", "--progress", "--disk-usage", example=""),
    ),
)

DESCRIBE = Program(
    "describe",
    manual=f"git-describe(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "--contains",
            "--debug",
            "--all",
            "--tags",
            "--long",
            "--first-parent",
            "--exact-match",
            "--always",
        ),
        *values("--candidates", example="3"),
        *values("--match", "--exclude", example="v*"),
        *attached("--abbrev", "--dirty", "--broken", example=""),
    ),
)

SHORTLOG = Program(
    "shortlog",
    manual=f"git-shortlog(1), {_MANUAL}, OPTIONS",
    negatable=True,
    numeric_flags=True,
    script=pretty_format,
    options=(
        # shortlog's own `-c/--committer` is a flag; rev-list's `--committer=<pattern>` is not
        # an option of shortlog (the same name twice made `--committer=x` unreadable).
        *(option for option in _REVISIONS if "--committer" not in option.names),
        *flags("-c --committer", "-n --numbered", "-s --summary", "-e --email"),
        *values("--group", example="author"),
        *attached("-w", example="76"),
    ),
)

CAT_FILE = Program(
    "cat-file",
    manual=f"git-cat-file(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "-e",
            "-p",
            "-t",
            "-s",
            "--allow-unknown-type",
            "--use-mailmap --mailmap",
            "-z",
            "--batch-all-objects",
            "--buffer",
            "--follow-symlinks",
            "--unordered",
            "--textconv",
            "--filters",
        ),
        *attached("--batch", "--batch-check", "--batch-command", example=""),
        *values("--path", example="notes.txt"),
    ),
)

SHOW_REF = Program(
    "show-ref",
    manual=f"git-show-ref(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags("--tags", "--heads", "--verify", "--head", "-d --dereference", "-q --quiet"),
        *attached("-s --hash", "--abbrev", "--exclude-existing", example=""),
    ),
)

FOR_EACH_REF = Program(
    "for-each-ref",
    manual=f"git-for-each-ref(1), {_MANUAL}, OPTIONS, FIELD NAMES",
    negatable=True,
    options=(
        *flags("-s --shell", "-p --perl", "--python", "--tcl", "--ignore-case"),
        *values("--count", example="3"),
        *values(
            "--format",
            "--sort",
            "--points-at",
            "--merged",
            "--no-merged",
            "--contains",
            "--no-contains",
            example="x",
        ),
        *attached("--color", example="always"),
    ),
)

MERGE_BASE = Program(
    "merge-base",
    manual=f"git-merge-base(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=flags("-a --all", "--octopus", "--independent", "--is-ancestor", "--fork-point"),
)

NAME_REV = Program(
    "name-rev",
    manual=f"git-name-rev(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "--name-only",
            "--tags",
            "--all",
            "--stdin",
            "--annotate-stdin",
            "--undefined",
            "--always",
        ),
        *values("--refs", "--exclude", example="x"),
    ),
)

COUNT_OBJECTS = Program(
    "count-objects",
    manual=f"git-count-objects(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=flags("-v --verbose", "-H --human-readable"),
)

CHECK_IGNORE = Program(
    "check-ignore",
    manual=f"git-check-ignore(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=flags("-q --quiet", "-v --verbose", "--stdin", "-z", "-n --non-matching", "--no-index"),
)

CHECK_ATTR = Program(
    "check-attr",
    manual=f"git-check-attr(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=flags("-a --all", "--cached", "--stdin", "-z"),
)

VAR = Program(
    "var",
    manual=f"git-var(1), {_MANUAL}, OPTIONS",
    options=flags("-l"),
)

VERSION = Program(
    "version",
    manual=f"git-version(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=flags("--build-options"),
)

HELP = Program(
    "help",
    manual=f"git-help(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "-a --all",
            "--external-commands",
            "--aliases",
            "-m --man",
            "-v --verbose",
            "-g --guides",
            "--user-interfaces",
            "--developer-interfaces",
            "-c --config",
        ),
        does("-w --web", Effect.CODE, "opens the manual in a web browser"),
        does("-i --info", Effect.CODE, "runs the info program"),
    ),
)

RANGE_DIFF = Program(
    "range-diff",
    manual=f"git-range-diff(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *_DIFF,
        *flags("--no-dual-color", "--left-only", "--right-only"),
        *values("--creation-factor", example="60"),
        *attached("--notes", example=""),
    ),
)

CHERRY = Program(
    "cherry",
    manual=f"git-cherry(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(*flags("-v --verbose"), *attached("--abbrev", example="8")),
)

ARCHIVE = Program(
    "archive",
    manual=f"git-archive(1), {_MANUAL}, OPTIONS",
    negatable=True,
    numeric_flags=True,
    options=(
        *flags("-l --list", "-v --verbose", "--worktree-attributes"),
        *values("--format", example="tar"),
        *values("--prefix", example="x/"),
        *values("--add-file", example="notes.txt"),
        *values("--add-virtual-file", example="x.txt:x"),
        does(
            "-o --output",
            Effect.WRITE,
            "writes the archive to the named file",
            takes=Takes.VALUE,
            example="out.tar",
        ),
        does(
            "--remote",
            Effect.NETWORK,
            "fetches the archive from the named repository",
            takes=Takes.VALUE,
            example="origin",
        ),
        does(
            "--exec",
            Effect.CODE,
            "runs the named git-upload-archive program (locally, for a local repository)",
            takes=Takes.VALUE,
            example="git-upload-archive",
        ),
    ),
)

VERIFY_COMMIT = Program(
    "verify-commit",
    manual=f"git-verify-commit(1), {_MANUAL}, OPTIONS",
    effects=frozenset({Effect.CODE}),
    negatable=True,
    options=flags("-v --verbose", "--raw"),
)

VERIFY_TAG = Program(
    "verify-tag",
    manual=f"git-verify-tag(1), {_MANUAL}, OPTIONS",
    effects=frozenset({Effect.CODE}),
    negatable=True,
    options=(*flags("-v --verbose", "--raw"), *values("--format", example="%(refname)")),
)

STATUS = Program(
    "status",
    manual=f"git-status(1), {_MANUAL}, OPTIONS",
    negatable=True,
    options=(
        *flags(
            "-s --short",
            "-b --branch",
            "--show-stash",
            "--long",
            "-v --verbose",
            "-z --null",
            "--ahead-behind",
            "--renames",
            "--no-renames",
        ),
        *attached(
            "--porcelain",
            "-u --untracked-files",
            "--ignore-submodules",
            "--ignored",
            "--column",
            "-M --find-renames",
            example="",
        ),
    ),
)

# ---------------------------------------------------------------- branch, tag, config

BRANCH = Program(
    "branch",
    manual=f"git-branch(1), {_MANUAL}, DESCRIPTION, OPTIONS",
    operand_effect=Effect.WRITE,
    negatable=True,
    options=(
        *flags(
            "-v --verbose",
            "-q --quiet",
            "-r --remotes",
            "-a --all",
            "-l --list",
            "--show-current",
            "-i --ignore-case",
        ),
        *values(
            "--contains",
            "--no-contains",
            "--merged",
            "--no-merged",
            "--points-at",
            "--sort",
            "--format",
            example="x",
        ),
        *attached("--color", "--column", "--abbrev", example=""),
        does("-d --delete", Effect.DELETE, "deletes the named branches"),
        does("-D", Effect.DELETE, "deletes the named branches, even unmerged"),
        does("-m --move", Effect.WRITE, "renames a branch"),
        does("-M", Effect.WRITE, "renames a branch, even over an existing one"),
        does("-c --copy", Effect.WRITE, "copies a branch"),
        does("-C", Effect.WRITE, "copies a branch, even over an existing one"),
        does("-f --force", Effect.WRITE, "resets, moves or deletes a branch by force"),
        does(
            "-u --set-upstream-to",
            Effect.WRITE,
            "sets the branch's upstream",
            takes=Takes.VALUE,
            example="origin/main",
        ),
        does("--unset-upstream", Effect.WRITE, "removes the branch's upstream"),
        does(
            "-t --track",
            Effect.WRITE,
            "sets the tracking configuration of a new branch",
            takes=Takes.ATTACHED,
        ),
        does("--create-reflog", Effect.WRITE, "creates the branch's reflog"),
        does("--recurse-submodules", Effect.WRITE, "creates the branch in submodules too"),
        does("--edit-description", Effect.CODE, "opens the editor on the branch's description"),
    ),
)

TAG = Program(
    "tag",
    manual=f"git-tag(1), {_MANUAL}, DESCRIPTION, OPTIONS",
    operand_effect=Effect.WRITE,
    negatable=True,
    options=(
        *flags("-l --list", "-i --ignore-case", "-a --annotate"),
        *attached("-n", example="3"),
        *attached("--column", "--color", example=""),
        *values(
            "--contains",
            "--no-contains",
            "--merged",
            "--no-merged",
            "--points-at",
            "--sort",
            "--format",
            "-m --message",
            "--cleanup",
            example="x",
        ),
        *values("-F --file", example="notes.txt"),
        does("-d --delete", Effect.DELETE, "deletes the named tags"),
        does("-v --verify", Effect.CODE, "runs gpg to check the tags' signatures"),
        does("-s --sign", Effect.CODE, "runs gpg to sign the tag"),
        does(
            "-u --local-user",
            Effect.CODE,
            "runs gpg to sign the tag with the named key",
            takes=Takes.VALUE,
            example="x",
        ),
        _EDIT,
        does("-f --force", Effect.WRITE, "replaces an existing tag"),
        does("--create-reflog", Effect.WRITE, "creates the tag's reflog"),
    ),
)

_CONFIG_READ_MODES = ("--get", "--get-all", "--get-regexp", "--get-urlmatch", "--get-color")
CONFIG = Program(
    "config",
    manual=f"git-config(1), {_MANUAL}, DESCRIPTION, OPTIONS",
    # `git config <name> <value>` (and every action but the --get* and --list ones) writes.
    effects=frozenset({Effect.WRITE}),
    negatable=True,
    options=(
        *(mode(spec, Effect.READ) for spec in (*_CONFIG_READ_MODES, "--get-colorbool")),
        mode("-l --list", Effect.READ),
        *(
            _undo(f"--no-{spec[2:]}", Effect.WRITE, f"turns {spec} off")
            for spec in (*_CONFIG_READ_MODES, "--get-colorbool", "--list")
        ),
        *flags(
            "--global",
            "--system",
            "--local",
            "--worktree",
            "--fixed-value",
            "--bool",
            "--int",
            "--bool-or-int",
            "--bool-or-str",
            "--path",
            "--expiry-date",
            "-z --null",
            "--name-only",
            "--includes",
            "--show-origin",
            "--show-scope",
        ),
        *values("-f --file", example="notes.txt"),
        *values("--blob", "-t --type", "--default", example="x"),
        *(
            does(spec, Effect.WRITE, "changes the configuration")
            for spec in (
                "--replace-all",
                "--add",
                "--unset",
                "--unset-all",
                "--rename-section",
                "--remove-section",
            )
        ),
        _EDIT,
    ),
)

# ---------------------------------------------------------------- nested subcommands


def _sub(
    name: str,
    page: str,
    effects: frozenset[Effect],
    *options: Option,
    numeric_flags: bool = False,
    script: ScriptReader | None = None,
    actions: frozenset[str] = frozenset(),
) -> Program:
    """A nested subcommand (`git stash list`): its manual section is its name under COMMANDS."""
    return Program(
        name,
        manual=f"{page}, {_MANUAL}, COMMANDS ({name})",
        effects=effects,
        negatable=True,
        options=options,
        numeric_flags=numeric_flags,
        script=script,
        actions=actions,
    )


_READ = frozenset({Effect.READ})
_WRITE = frozenset({Effect.WRITE})
_DELETE = frozenset({Effect.DELETE})
_CODE = frozenset({Effect.CODE})
_NETWORK = frozenset({Effect.NETWORK})
_FETCHES = frozenset({Effect.NETWORK, Effect.WRITE})

_STASH_PUSH = (
    *flags(
        "-k --keep-index",
        "-S --staged",
        "-q --quiet",
        "-u --include-untracked",
        "-a --all",
    ),
    *values("-m --message", example="x"),
    *_PATHSPEC_FILE,
    _PATCH,
)

STASH = Program(
    "stash",
    manual=f"git-stash(1), {_MANUAL}, DESCRIPTION, COMMANDS, OPTIONS",
    # `git stash` alone, or with options first, is `git stash push`.
    effects=_WRITE,
    operands=Operands.SUBCOMMAND,
    negatable=True,
    options=_STASH_PUSH,
    subcommands={
        "list": _sub(
            "list",
            "git-stash(1)",
            _READ,
            *_LOG_OPTIONS,
            numeric_flags=True,
            script=pretty_format,
        ),
        "show": _sub(
            "show",
            "git-stash(1)",
            _READ,
            *_DIFF,
            *flags("-u --include-untracked", "--only-untracked"),
        ),
        "push": _sub("push", "git-stash(1)", _WRITE, *_STASH_PUSH),
        "save": _sub("save", "git-stash(1)", _WRITE, *_STASH_PUSH),
        "pop": _sub("pop", "git-stash(1)", _WRITE, *flags("-q --quiet", "--index")),
        "apply": _sub("apply", "git-stash(1)", _WRITE, *flags("-q --quiet", "--index")),
        "branch": _sub("branch", "git-stash(1)", _WRITE),
        "create": _sub("create", "git-stash(1)", _WRITE),
        "store": _sub(
            "store",
            "git-stash(1)",
            _WRITE,
            *flags("-q --quiet"),
            *values("-m --message", example="x"),
        ),
        "drop": _sub("drop", "git-stash(1)", _DELETE, *flags("-q --quiet"), actions=DELETE),
        "clear": _sub("clear", "git-stash(1)", _DELETE, actions=DELETE),
    },
)

# Measured in bubblewrap (tests/security/test_readonly_ground_truth.py): add/rm/mv -n and
# commit/reflog --dry-run still take index or ref locks (a lock file created and removed) and
# commit --dry-run freshens objects, so a dry run is not a read-only mode: a plain flag, and
# turning it off (`--no-dry-run`) changes nothing the subcommand's own effects do not cover.
_DRY_RUN = Option(("-n", "--dry-run"))
_DRY_RUN_LONG = Option(("--dry-run",))

WORKTREE = Program(
    "worktree",
    manual=f"git-worktree(1), {_MANUAL}, COMMANDS, OPTIONS",
    operands=Operands.SUBCOMMAND,
    negatable=True,
    subcommands={
        "list": _sub(
            "list",
            "git-worktree(1)",
            _READ,
            *flags("--porcelain", "-v --verbose", "-z"),
            *values("--expire", example="2.weeks.ago"),
        ),
        "add": _sub(
            "add",
            "git-worktree(1)",
            _WRITE,
            *flags(
                "-f --force",
                "-d --detach",
                "--checkout",
                "--lock",
                "-q --quiet",
                "--track",
                "--guess-remote",
            ),
            *values("-b", "-B", "--reason", example="x"),
        ),
        "lock": _sub("lock", "git-worktree(1)", _WRITE, *values("--reason", example="x")),
        "unlock": _sub("unlock", "git-worktree(1)", _WRITE),
        "move": _sub("move", "git-worktree(1)", _WRITE, *flags("-f --force")),
        "prune": _sub(
            "prune",
            "git-worktree(1)",
            _WRITE,
            _DRY_RUN,
            *flags("-v --verbose"),
            *values("--expire", example="2.weeks.ago"),
        ),
        "remove": _sub(
            "remove",
            "git-worktree(1)",
            _DELETE,
            *flags("-f --force"),
            actions=DELETE,
        ),
        "repair": _sub("repair", "git-worktree(1)", _WRITE),
    },
)

_REMOTE_REMOVE = _sub("remove", "git-remote(1)", _WRITE)
REMOTE = Program(
    "remote",
    manual=f"git-remote(1), {_MANUAL}, DESCRIPTION, OPTIONS, COMMANDS",
    # `git remote` with no subcommand lists the configured remotes.
    operands=Operands.SUBCOMMAND,
    negatable=True,
    options=flags("-v --verbose"),
    subcommands={
        "add": _sub(
            "add",
            "git-remote(1)",
            _WRITE,
            *flags("--tags"),
            *values("-t --track", "-m --master", example="main"),
            *attached("--mirror", example="fetch"),
            does("-f --fetch", Effect.NETWORK, "fetches from the new remote"),
        ),
        "rename": _sub("rename", "git-remote(1)", _WRITE, *flags("--progress")),
        "remove": _REMOTE_REMOVE,
        "rm": _REMOTE_REMOVE,
        "set-head": _sub(
            "set-head",
            "git-remote(1)",
            _WRITE,
            *flags("-d --delete"),
            does("-a --auto", Effect.NETWORK, "asks the remote for its HEAD"),
        ),
        "set-branches": _sub("set-branches", "git-remote(1)", _WRITE, *flags("--add")),
        "get-url": _sub("get-url", "git-remote(1)", _READ, *flags("--push", "--all")),
        "set-url": _sub("set-url", "git-remote(1)", _WRITE, *flags("--push", "--add", "--delete")),
        "show": _sub(
            "show",
            "git-remote(1)",
            _NETWORK,
            mode("-n", Effect.READ),
        ),
        "prune": _sub(
            "prune",
            "git-remote(1)",
            _FETCHES,
            mode("-n --dry-run", Effect.NETWORK),
            _undo("--no-dry-run", Effect.WRITE, "turns --dry-run off"),
        ),
        "update": _sub("update", "git-remote(1)", _FETCHES, *flags("-p --prune")),
    },
)

_NOTE_MESSAGE = (
    *values("-m --message", example="x"),
    *values("-F --file", example="notes.txt"),
    *values("-C --reuse-message", example="HEAD"),
    does(
        "-c --reedit-message",
        Effect.CODE,
        "opens the editor on the named note",
        takes=Takes.VALUE,
        example="HEAD",
    ),
    *flags("--allow-empty"),
)

NOTES = Program(
    "notes",
    manual=f"git-notes(1), {_MANUAL}, SUBCOMMANDS, OPTIONS",
    # `git notes` with no subcommand is `git notes list`.
    operands=Operands.SUBCOMMAND,
    negatable=True,
    options=values("--ref", example="commits"),
    subcommands={
        "list": _sub("list", "git-notes(1)", _READ),
        "show": _sub("show", "git-notes(1)", _READ),
        "get-ref": _sub("get-ref", "git-notes(1)", _READ),
        "add": _sub("add", "git-notes(1)", _WRITE, *_NOTE_MESSAGE, *flags("-f --force")),
        "append": _sub("append", "git-notes(1)", _WRITE, *_NOTE_MESSAGE),
        "edit": _sub(
            "edit", "git-notes(1)", frozenset({Effect.WRITE, Effect.CODE}), *_NOTE_MESSAGE
        ),
        "copy": _sub(
            "copy",
            "git-notes(1)",
            _WRITE,
            *flags("-f --force", "--stdin"),
            *values("--for-rewrite", example="amend"),
        ),
        "merge": _sub(
            "merge",
            "git-notes(1)",
            _WRITE,
            *flags("-v --verbose", "-q --quiet", "--commit", "--abort"),
            *values("-s --strategy", example="ours"),
        ),
        "remove": _sub("remove", "git-notes(1)", _WRITE, *flags("--ignore-missing", "--stdin")),
        "prune": _sub(
            "prune",
            "git-notes(1)",
            _WRITE,
            _DRY_RUN,
            *flags("-v --verbose"),
        ),
    },
)

REFLOG = Program(
    "reflog",
    manual=f"git-reflog(1), {_MANUAL}, DESCRIPTION, OPTIONS",
    # `git reflog` with no subcommand, or with options first, is `git reflog show`.
    operands=Operands.SUBCOMMAND,
    negatable=True,
    numeric_flags=True,
    script=pretty_format,
    options=_LOG_OPTIONS,
    subcommands={
        "show": _sub(
            "show",
            "git-reflog(1)",
            _READ,
            *_LOG_OPTIONS,
            numeric_flags=True,
            script=pretty_format,
        ),
        "exists": _sub("exists", "git-reflog(1)", _READ),
        "expire": _sub(
            "expire",
            "git-reflog(1)",
            _DELETE,
            _DRY_RUN_LONG,
            *flags(
                "--rewrite",
                "--updateref",
                "--stale-fix",
                "--verbose",
                "--all",
                "--single-worktree",
            ),
            *values("--expire", "--expire-unreachable", example="90.days.ago"),
        ),
        "delete": _sub(
            "delete",
            "git-reflog(1)",
            _DELETE,
            _DRY_RUN_LONG,
            *flags("--rewrite", "--updateref", "--verbose"),
        ),
    },
)


def _script_sub(
    name: str,
    page: str,
    effects: frozenset[Effect],
    *options: Option,
    script: ScriptReader | None = None,
    actions: frozenset[str] = frozenset(),
) -> Program:
    """A subcommand of a shell-script command (submodule, bisect): options end at the first
    operand, as the script's `while case "$1"` loop reads them."""
    entry = _sub(name, page, effects, *options, script=script, actions=actions)
    return replace(entry, style=Style.POSIX, negatable=False)


SUBMODULE = Program(
    "submodule",
    manual=f"git-submodule(1), {_MANUAL}, COMMANDS, OPTIONS",
    # `git submodule` with no subcommand is `git submodule status`.
    operands=Operands.SUBCOMMAND,
    style=Style.POSIX,
    options=flags("-q --quiet", "--cached"),
    subcommands={
        "status": _script_sub(
            "status", "git-submodule(1)", _READ, *flags("-q --quiet", "--cached", "--recursive")
        ),
        "summary": _script_sub(
            "summary",
            "git-submodule(1)",
            _READ,
            *flags("-q --quiet", "--cached", "--files"),
            *values("-n --summary-limit", example="3"),
        ),
        "init": _script_sub("init", "git-submodule(1)", _WRITE, *flags("-q --quiet")),
        "deinit": _script_sub(
            "deinit",
            "git-submodule(1)",
            frozenset({Effect.WRITE, Effect.DELETE}),
            *flags("-q --quiet", "-f --force", "--all"),
            actions=DELETE,
        ),
        "update": _script_sub(
            "update",
            "git-submodule(1)",
            # A submodule's `update = !command` (from .git/config) runs that command.
            frozenset({Effect.NETWORK, Effect.WRITE, Effect.CODE}),
            *flags(
                "-q --quiet",
                "--init",
                "--remote",
                "-N --no-fetch",
                "-f --force",
                "--checkout",
                "--merge",
                "--rebase",
                "--recommend-shallow",
                "--no-recommend-shallow",
                "--recursive",
                "--single-branch",
                "--no-single-branch",
                "--progress",
            ),
            *values("--reference", "--depth", "-j --jobs", "--filter", example="1"),
        ),
        "add": _script_sub(
            "add",
            "git-submodule(1)",
            _FETCHES,
            *flags("-q --quiet", "-f --force"),
            *values("-b --branch", "--name", "--reference", "--depth", example="x"),
        ),
        "set-branch": _script_sub(
            "set-branch",
            "git-submodule(1)",
            _WRITE,
            *flags("-q --quiet", "-d --default"),
            *values("-b --branch", example="main"),
        ),
        "set-url": _script_sub("set-url", "git-submodule(1)", _WRITE, *flags("-q --quiet")),
        "sync": _script_sub(
            "sync", "git-submodule(1)", _WRITE, *flags("-q --quiet", "--recursive")
        ),
        "absorbgitdirs": _script_sub(
            "absorbgitdirs", "git-submodule(1)", _WRITE, *flags("-q --quiet")
        ),
        "foreach": _script_sub(
            "foreach", "git-submodule(1)", _CODE, *flags("-q --quiet", "--recursive")
        ),
    },
)

_BISECT_MOVES = frozenset({Effect.WRITE})
_BISECT_VIEW = _script_sub("visualize", "git-bisect(1)", _CODE, *_LOG_OPTIONS, script=pretty_format)
BISECT = Program(
    "bisect",
    manual=f"git-bisect(1), {_MANUAL}, DESCRIPTION",
    operands=Operands.SUBCOMMAND,
    style=Style.POSIX,
    subcommands={
        "help": _script_sub("help", "git-bisect(1)", _READ),
        # Reads BISECT_LOG. A BISECT_TERMS file naming `log` or `terms` as a term would make
        # these words mark commits instead; git refuses such terms when it writes the file.
        "log": _script_sub("log", "git-bisect(1)", _READ),
        "terms": _script_sub(
            "terms",
            "git-bisect(1)",
            _READ,
            *flags("--term-good", "--term-bad", "--term-old", "--term-new"),
        ),
        "start": replace(
            _script_sub(
                "start",
                "git-bisect(1)",
                _BISECT_MOVES,
                *flags("--no-checkout", "--first-parent"),
                *values("--term-good --term-old", "--term-bad --term-new", example="fixed"),
            ),
            style=Style.GNU,
        ),
        **{
            word: _script_sub(word, "git-bisect(1)", _BISECT_MOVES)
            for word in ("bad", "good", "new", "old", "skip", "next", "reset", "replay")
        },
        "visualize": _BISECT_VIEW,
        "view": replace(_BISECT_VIEW, name="view"),
        "run": _script_sub("run", "git-bisect(1)", frozenset({Effect.WRITE, Effect.CODE})),
    },
)

# ---------------------------------------------------------------- subcommands that write

ADD = Program(
    "add",
    manual=f"git-add(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        _DRY_RUN,
        *flags(
            "-v --verbose",
            "-f --force",
            "-u --update",
            "--renormalize",
            "-N --intent-to-add",
            "-A --all",
            "--ignore-removal",
            "--refresh",
            "--ignore-errors",
            "--ignore-missing",
            "--sparse",
        ),
        *values("--chmod", example="+x"),
        *_PATHSPEC_FILE,
        does("-i --interactive", Effect.CODE, "adds interactively (hunk editing opens the editor)"),
        _PATCH,
        does("-e --edit", Effect.CODE, "opens the editor on the diff"),
    ),
)

COMMIT = Program(
    "commit",
    manual=f"git-commit(1), {_MANUAL}, OPTIONS, HOOKS",
    # Commit hooks run: they are the human's (see the module docstring). So is the editor git
    # opens when no message is given.
    effects=_WRITE,
    negatable=True,
    options=(
        _DRY_RUN_LONG,
        *flags(
            "-q --quiet",
            "-v --verbose",
            "--reset-author",
            "-s --signoff",
            "--status",
            "-a --all",
            "-i --include",
            "-o --only",
            "-n --no-verify",
            "--short",
            "--branch",
            "--ahead-behind",
            "--porcelain",
            "--long",
            "-z --null",
            "--amend",
            "--no-post-rewrite",
            "--allow-empty",
            "--allow-empty-message",
        ),
        *values(
            "--author",
            "-m --message",
            "-C --reuse-message",
            "--fixup",
            "--squash",
            "--trailer",
            "--cleanup",
            example="x",
        ),
        *values("--date", example="2020-01-01"),
        *values("-F --file", "-t --template", example="notes.txt"),
        *attached("-u --untracked-files", example="no"),
        *_PATHSPEC_FILE,
        does(
            "-c --reedit-message",
            Effect.CODE,
            "opens the editor on the named commit's message",
            takes=Takes.VALUE,
            example="HEAD",
        ),
        _EDIT,
        _GPG_SIGN,
        does("--interactive", Effect.CODE, "adds interactively (hunk editing opens the editor)"),
        _PATCH,
    ),
)

_CHECKOUT_COMMON = (
    *flags(
        "--guess",
        "-q --quiet",
        "--progress",
        "-m --merge",
        "-d --detach",
        "--overwrite-ignore",
        "--ignore-other-worktrees",
    ),
    *values("--conflict", example="diff3"),
    *attached("--recurse-submodules", example=""),
    *attached("-t --track", example="direct"),
)
_THROWS_AWAY = "throws away local changes and deletes untracked files in the way"

CHECKOUT = Program(
    "checkout",
    manual=f"git-checkout(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *_CHECKOUT_COMMON,
        *flags("-l", "--overlay", "-2 --ours", "-3 --theirs", "--ignore-skip-worktree-bits"),
        *values("-b", "-B", "--orphan", example="x"),
        *_PATHSPEC_FILE,
        does("-f --force", Effect.DELETE, _THROWS_AWAY, actions=DELETE),
        _PATCH,
    ),
)

SWITCH = Program(
    "switch",
    manual=f"git-switch(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *_CHECKOUT_COMMON,
        *values("-c --create", "-C --force-create", "--orphan", example="x"),
        does("-f --force --discard-changes", Effect.DELETE, _THROWS_AWAY, actions=DELETE),
    ),
)

RESTORE = Program(
    "restore",
    manual=f"git-restore(1), {_MANUAL}, OPTIONS",
    # Overwrites files with their committed or staged content (what `cp` over them would do).
    effects=_WRITE,
    negatable=True,
    options=(
        *flags(
            "-S --staged",
            "-W --worktree",
            "--ignore-unmerged",
            "--overlay",
            "-q --quiet",
            "--progress",
            "-m --merge",
            "-2 --ours",
            "-3 --theirs",
            "--ignore-skip-worktree-bits",
        ),
        *values("-s --source", example="HEAD"),
        *values("--conflict", example="diff3"),
        *attached("--recurse-submodules", example=""),
        *_PATHSPEC_FILE,
        _PATCH,
    ),
)

RESET = Program(
    "reset",
    manual=f"git-reset(1), {_MANUAL}, DESCRIPTION, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *flags(
            "-q --quiet",
            "--no-refresh",
            "--mixed",
            "--soft",
            "--merge",
            "--keep",
            "-N --intent-to-add",
        ),
        *attached("--recurse-submodules", example=""),
        *_PATHSPEC_FILE,
        does(
            "--hard",
            Effect.DELETE,
            "discards uncommitted changes and deletes untracked files in the way",
            actions=DELETE,
        ),
        _PATCH,
    ),
)

RM = Program(
    "rm",
    manual=f"git-rm(1), {_MANUAL}, OPTIONS",
    effects=_DELETE,
    actions=DELETE,
    negatable=True,
    options=(
        _DRY_RUN,
        # Only from the index: the files stay.
        mode("--cached", Effect.WRITE),
        _undo("--no-cached", Effect.DELETE, "turns --cached off", DELETE),
        *flags("-q --quiet", "-f --force", "-r", "--ignore-unmatch", "--sparse"),
        *_PATHSPEC_FILE,
    ),
)

MV = Program(
    "mv",
    manual=f"git-mv(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        _DRY_RUN,
        *flags("-v --verbose", "-f --force", "-k", "--sparse"),
    ),
)

CLEAN = Program(
    "clean",
    manual=f"git-clean(1), {_MANUAL}, OPTIONS",
    effects=_DELETE,
    actions=DELETE,
    negatable=True,
    options=(
        *flags("-d", "-f --force", "-i --interactive", "-n --dry-run", "-q --quiet", "-x", "-X"),
        *values("-e --exclude", example="x"),
    ),
)

_STRATEGY_WHAT = (
    "uses the named merge strategy; a name git does not build in runs the program "
    "git-merge-<name> from PATH"
)


def _strategy(spec: str) -> Option:
    return does(spec, Effect.CODE, _STRATEGY_WHAT, takes=Takes.VALUE, example="ort")


_MERGE_OPTIONS = (
    *flags(
        "-n",
        "--stat",
        "--summary",
        "--squash",
        "--commit",
        "--ff",
        "--ff-only",
        "--rerere-autoupdate",
        "-v --verbose",
        "-q --quiet",
        "--allow-unrelated-histories",
        "--progress",
        "--autostash",
        "--overwrite-ignore",
        "--signoff",
        "--no-verify",
    ),
    *attached("--log", example="3"),
    *values("--cleanup", "-X --strategy-option", example="x"),
    does("--verify-signatures", Effect.CODE, "runs gpg to check the merged commits' signatures"),
    _strategy("-s --strategy"),
    _GPG_SIGN,
)

MERGE = Program(
    "merge",
    manual=f"git-merge(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *_MERGE_OPTIONS,
        *flags("--abort", "--quit", "--continue"),
        *values("-m --message", "--into-name", example="x"),
        *values("-F --file", example="notes.txt"),
        _EDIT,
    ),
)

REBASE = Program(
    "rebase",
    manual=f"git-rebase(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *flags(
            "--keep-base",
            "--no-verify",
            "-q --quiet",
            "-v --verbose",
            "-n --no-stat",
            "--signoff",
            "--committer-date-is-author-date",
            "--reset-author-date --ignore-date",
            "--ignore-whitespace",
            "-f --force-rebase",
            "--no-ff",
            "--continue",
            "--skip",
            "--abort",
            "--quit",
            "--show-current-patch",
            "--apply",
            "-m --merge",
            "--rerere-autoupdate",
            "--autosquash",
            "--update-refs",
            "--autostash",
            "--fork-point",
            "--root",
            "--reschedule-failed-exec",
            "--reapply-cherry-picks",
        ),
        *values("--onto", "--whitespace", "--empty", "-X --strategy-option", example="x"),
        *values("-C", example="3"),
        *attached("-r --rebase-merges", example="rebase-cousins"),
        does("-i --interactive", Effect.CODE, "opens the editor on the todo list"),
        does("--edit-todo", Effect.CODE, "opens the editor on the todo list"),
        does(
            "-x --exec",
            Effect.CODE,
            "runs the named shell command after each commit",
            takes=Takes.VALUE,
            example="make",
        ),
        _strategy("-s --strategy"),
        _GPG_SIGN,
    ),
)

_SEQUENCER = (
    *flags(
        "--quit",
        "--continue",
        "--abort",
        "--skip",
        "-n --no-commit",
        "-s --signoff",
        "--rerere-autoupdate",
    ),
    *values("--cleanup", "-X --strategy-option", example="x"),
    *values("-m --mainline", example="1"),
    _strategy("--strategy"),
    _GPG_SIGN,
    _EDIT,
)

CHERRY_PICK = Program(
    "cherry-pick",
    manual=f"git-cherry-pick(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *_SEQUENCER,
        *flags("-x", "--ff", "--allow-empty", "--allow-empty-message", "--keep-redundant-commits"),
    ),
)

REVERT = Program(
    "revert",
    manual=f"git-revert(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(*_SEQUENCER, *flags("--reference")),
)

AM = Program(
    "am",
    manual=f"git-am(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *flags(
            "-3 --3way",
            "-q --quiet",
            "-s --signoff",
            "-u --utf8",
            "-k --keep",
            "--keep-non-patch",
            "-m --message-id",
            "--keep-cr",
            "--no-keep-cr",
            "-c --scissors",
            "--ignore-space-change",
            "--ignore-whitespace",
            "--reject",
            "--continue -r --resolved",
            "--skip",
            "--abort",
            "--quit",
            "--allow-empty",
            "--committer-date-is-author-date",
            "--ignore-date",
            "--rerere-autoupdate",
        ),
        *values(
            "--quoted-cr",
            "--whitespace",
            "--directory",
            "--exclude",
            "--include",
            "--patch-format",
            "--resolvemsg",
            "--empty",
            example="x",
        ),
        *values("-C", "-p", example="1"),
        *attached("--show-current-patch", example="diff"),
        does("-i --interactive", Effect.CODE, "asks about each patch (its `e` opens the editor)"),
        _GPG_SIGN,
    ),
)

_APPLY_READ_MODES = ("--stat", "--numstat", "--summary", "--check")
APPLY = Program(
    "apply",
    manual=f"git-apply(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *(mode(spec, Effect.READ) for spec in _APPLY_READ_MODES),
        *(
            _undo(f"--no-{spec[2:]}", Effect.WRITE, f"turns {spec} off")
            for spec in _APPLY_READ_MODES
        ),
        does("--apply", Effect.WRITE, "applies the patch after --stat, --summary or --check"),
        *flags(
            "--no-add",
            "--index",
            "-N --intent-to-add",
            "--cached",
            "-3 --3way",
            "-z",
            "--ignore-space-change",
            "--ignore-whitespace",
            "-R --reverse",
            "--unidiff-zero",
            "--allow-overlap",
            "-v --verbose",
            "-q --quiet",
            "--inaccurate-eof",
            "--recount",
            "--allow-empty",
        ),
        *values("--exclude", "--include", "--whitespace", "--directory", example="x"),
        *values("-p", "-C", example="1"),
        does("--reject", Effect.WRITE, "writes rejected hunks to .rej files"),
        does(
            "--build-fake-ancestor",
            Effect.WRITE,
            "writes an index file to the named path",
            takes=Takes.VALUE,
            example="out.idx",
        ),
        does("--unsafe-paths", Effect.WRITE, "applies changes to paths outside the work tree"),
    ),
)

_TEMPLATE = does(
    "--template",
    Effect.CODE,
    "copies the named template directory into the new repository (its hooks then run)",
    takes=Takes.VALUE,
    example="templates",
)

INIT = Program(
    "init",
    manual=f"git-init(1), {_MANUAL}, OPTIONS, TEMPLATE DIRECTORY",
    effects=_WRITE,
    negatable=True,
    options=(
        *flags("--bare", "-q --quiet"),
        *attached("--shared", example="group"),
        *values("--separate-git-dir", example="x.git"),
        *values("-b --initial-branch", "--object-format", example="main"),
        _TEMPLATE,
    ),
)

_UPLOAD_PACK = does(
    "--upload-pack",
    Effect.CODE,
    "runs the named program as the remote's git-upload-pack (locally, for a local repository)",
    takes=Takes.VALUE,
    example="git-upload-pack",
)

CLONE = Program(
    "clone",
    manual=f"git-clone(1), {_MANUAL}, OPTIONS",
    effects=_FETCHES,
    negatable=True,
    options=(
        *flags(
            "-v --verbose",
            "-q --quiet",
            "--progress",
            "--reject-shallow",
            "-n --no-checkout",
            "--bare",
            "--mirror",
            "-l --local",
            "--no-hardlinks",
            "-s --shared",
            "--dissociate",
            "--single-branch",
            "--no-tags",
            "--shallow-submodules",
            "-4 --ipv4",
            "-6 --ipv6",
            "--also-filter-submodules",
            "--remote-submodules",
            "--sparse",
        ),
        *attached("--recurse-submodules --recursive", example=""),
        *values("-j --jobs", "--depth", example="1"),
        *values(
            "--reference",
            "--reference-if-able",
            "-o --origin",
            "-b --branch",
            "--shallow-since",
            "--shallow-exclude",
            "--separate-git-dir",
            "--server-option",
            "--filter",
            "--bundle-uri",
            example="x",
        ),
        does(
            "-u --upload-pack",
            Effect.CODE,
            "runs the named program as the remote's git-upload-pack (locally, for a local "
            "repository)",
            takes=Takes.VALUE,
            example="git-upload-pack",
        ),
        _TEMPLATE,
        does(
            "-c --config",
            Effect.CODE,
            "sets configuration in the new repository, which can run programs",
            takes=Takes.VALUE,
            example="core.pager=cat",
        ),
    ),
)

_FETCH_COMMON = (
    *flags(
        "-v --verbose",
        "-q --quiet",
        "--progress",
        "--all",
        "-a --append",
        "-f --force",
        "-t --tags",
        "-p --prune",
        "-k --keep",
        "--unshallow",
        "--update-shallow",
        "-4 --ipv4",
        "-6 --ipv6",
        "--show-forced-updates",
        "--set-upstream",
    ),
    *attached("--recurse-submodules", example="on-demand"),
    *values("--depth", "--deepen", example="1"),
    *values(
        "--shallow-since",
        "--shallow-exclude",
        "--refmap",
        "-o --server-option",
        "--negotiation-tip",
        example="x",
    ),
    _UPLOAD_PACK,
)

FETCH = Program(
    "fetch",
    manual=f"git-fetch(1), {_MANUAL}, OPTIONS",
    effects=_FETCHES,
    negatable=True,
    options=(
        *_FETCH_COMMON,
        mode("--dry-run", Effect.NETWORK),
        _undo("--no-dry-run", Effect.WRITE, "turns --dry-run off"),
        *flags(
            "-m --multiple",
            "-n",
            "--atomic",
            "--prefetch",
            "-P --prune-tags",
            "--write-fetch-head",
            "-u --update-head-ok",
            "--refetch",
            "--negotiate-only",
            "--auto-maintenance --auto-gc",
            "--write-commit-graph",
            "--stdin",
        ),
        *values("-j --jobs", example="1"),
        *values("--filter", example="blob:none"),
    ),
)

PULL = Program(
    "pull",
    manual=f"git-pull(1), {_MANUAL}, OPTIONS (Options related to merging, Options related to "
    "fetching)",
    effects=_FETCHES,
    negatable=True,
    script=pull_rebase,
    options=(
        *_FETCH_COMMON,
        *_MERGE_OPTIONS,
        *flags("--dry-run", "--verify"),
        *attached("-j --jobs", example="1"),
        *attached("--signoff", example=""),
        Option(("-r", "--rebase"), Takes.ATTACHED, example="true", script=True),
        does("--edit", Effect.CODE, "opens the editor on the merge message"),
    ),
)

PUSH = Program(
    "push",
    manual=f"git-push(1), {_MANUAL}, OPTIONS",
    effects=_NETWORK,
    negatable=True,
    options=(
        *flags(
            "--all",
            "--prune",
            "--mirror",
            "-n --dry-run",
            "--porcelain",
            "-d --delete",
            "--tags",
            "--follow-tags",
            "--atomic",
            "-f --force",
            "--force-if-includes",
            "-u --set-upstream",
            "--thin",
            "-q --quiet",
            "-v --verbose",
            "--progress",
            "--no-verify",
            "--verify",
            "-4 --ipv4",
            "-6 --ipv6",
        ),
        *attached("--force-with-lease", "--signed", example=""),
        *values("-o --push-option", "--repo", "--recurse-submodules", example="x"),
        does(
            "--receive-pack --exec",
            Effect.CODE,
            "runs the named program on the remote side (locally, for a local repository)",
            takes=Takes.VALUE,
            example="git-receive-pack",
        ),
    ),
)

LS_REMOTE = Program(
    "ls-remote",
    manual=f"git-ls-remote(1), {_MANUAL}, OPTIONS",
    effects=_NETWORK,
    negatable=True,
    options=(
        *flags(
            "-q --quiet",
            "-t --tags",
            "-h --heads",
            "--refs",
            "--exit-code",
            "--symref",
        ),
        # Prints the remote's URL and exits without talking to it.
        mode("--get-url", Effect.READ),
        _undo("--no-get-url", Effect.NETWORK, "turns --get-url off"),
        *values("--sort", "-o --server-option", example="x"),
        _UPLOAD_PACK,
    ),
)

FORMAT_PATCH = Program(
    "format-patch",
    manual=f"git-format-patch(1), {_MANUAL}, OPTIONS",
    # Writes one file per commit (and a cover letter) in the current or -o directory.
    effects=_WRITE,
    negatable=True,
    numeric_flags=True,
    script=pretty_format,
    options=(
        *_REVISIONS,
        *_DIFF,
        # format-patch's own options are parsed first: they win over the revision and diff
        # options of the same name (-n, -s, -p, -v, --cc).
        mode("--stdout", Effect.READ),
        _undo("--no-stdout", Effect.WRITE, "turns --stdout off"),
        *flags(
            "-n --numbered",
            "-N --no-numbered",
            "-s --signoff",
            "--cover-letter",
            "--numbered-files",
            "--rfc",
            "-k --keep-subject",
            "--no-binary",
            "--zero-commit",
            "--ignore-if-in-upstream",
            "-p --no-stat",
            "-q --quiet",
            "--progress",
            "--force-in-body-from",
        ),
        *values(
            "--start-number",
            "-v --reroll-count",
            "--filename-max-length",
            "--creation-factor",
            example="2",
        ),
        *values(
            "--suffix",
            "--cover-from-description",
            "--subject-prefix",
            "--add-header",
            "--to",
            "--cc",
            "--in-reply-to",
            "--signature",
            "--base",
            "--interdiff",
            "--range-diff",
            example="x",
        ),
        *values("--signature-file", example="notes.txt"),
        *attached("--from", "--attach", "--inline", "--thread", example=""),
        does(
            "-o --output-directory",
            Effect.WRITE,
            "writes the patches into the named directory",
            takes=Takes.VALUE,
            example="out",
        ),
    ),
)

SEND_EMAIL = Program(
    "send-email",
    manual=f"git-send-email(1), {_MANUAL}, OPTIONS (Composing, Sending, Automating, Administering)",
    effects=_NETWORK,
    options=(
        *flags(
            "--xmailer",
            "--no-xmailer",
            "--no-smtp-auth",
            "--smtp-ssl",
            "--no-to",
            "--no-cc",
            "--no-bcc",
            "--no-identity",
            "--chain-reply-to",
            "--no-chain-reply-to",
            "--signed-off-by-cc",
            "--no-signed-off-by-cc",
            "--cc-cover",
            "--no-cc-cover",
            "--to-cover",
            "--no-to-cover",
            "--suppress-from",
            "--no-suppress-from",
            "--thread",
            "--no-thread",
            "--format-patch",
            "--no-format-patch",
            "--quiet",
            "--validate",
            "--no-validate",
            "--force",
        ),
        *values(
            "--bcc",
            "--cc",
            "--from",
            "--reply-to",
            "--in-reply-to",
            "--subject",
            "--to",
            "--8bit-encoding",
            "--compose-encoding",
            "--transfer-encoding",
            "--envelope-sender",
            "--smtp-encryption",
            "--smtp-domain",
            "--smtp-auth",
            "--smtp-server-port",
            "--smtp-server-option",
            "--smtp-ssl-cert-path",
            "--smtp-user",
            "--smtp-debug",
            "--batch-size",
            "--relogin-delay",
            "--identity",
            "--suppress-cc",
            "--confirm",
            example="x",
        ),
        *attached("--smtp-pass", example=""),
        # Prints what would be sent; --to-cmd and --cc-cmd still run.
        _DRY_RUN_LONG,
        mode("--dump-aliases", Effect.READ),
        does("--annotate", Effect.CODE, "opens the editor on each patch"),
        does("--compose", Effect.CODE, "opens the editor on an introductory message"),
        does(
            "--sendmail-cmd",
            Effect.CODE,
            "runs the named command to send the mail",
            takes=Takes.VALUE,
            example="sendmail",
        ),
        does(
            "--smtp-server",
            Effect.CODE,
            "sends through the named server, or runs it when it is a program's path",
            takes=Takes.VALUE,
            example="localhost",
        ),
        does(
            "--to-cmd",
            Effect.CODE,
            "runs the named command to find recipients",
            takes=Takes.VALUE,
            example="x",
        ),
        does(
            "--cc-cmd",
            Effect.CODE,
            "runs the named command to find recipients",
            takes=Takes.VALUE,
            example="x",
        ),
    ),
)

GC = Program(
    "gc",
    manual=f"git-gc(1), {_MANUAL}, OPTIONS",
    # Packs objects and prunes unreachable ones (older than gc.pruneExpire, two weeks).
    effects=frozenset({Effect.WRITE, Effect.DELETE}),
    negatable=True,
    options=(
        *flags("-q --quiet", "--cruft", "--aggressive", "--auto", "--force", "--keep-largest-pack"),
        *attached("--prune", example="now"),
    ),
)

PRUNE = Program(
    "prune",
    manual=f"git-prune(1), {_MANUAL}, OPTIONS",
    effects=_DELETE,
    negatable=True,
    options=(
        _DRY_RUN,
        *flags("-v --verbose", "--progress", "--exclude-promisor-objects"),
        *values("--expire", example="now"),
    ),
)

REPACK = Program(
    "repack",
    manual=f"git-repack(1), {_MANUAL}, OPTIONS",
    effects=_WRITE,
    negatable=True,
    options=(
        *flags(
            "-a",
            "-A",
            "--cruft",
            "-f",
            "-F",
            "-n",
            "-q --quiet",
            "-l --local",
            "-b --write-bitmap-index",
            "-i --delta-islands",
            "-k --keep-unreachable",
            "--pack-kept-objects",
            "-m --write-midx",
        ),
        *values(
            "--window",
            "--window-memory",
            "--depth",
            "--threads",
            "--max-pack-size",
            "-g --geometric",
            example="2",
        ),
        *values("--cruft-expiration", "--unpack-unreachable", example="now"),
        *values("--keep-pack", "--expire-to", example="x"),
        does(
            "-d",
            Effect.DELETE,
            "deletes the packs made redundant (with -a, unreachable objects are dropped)",
        ),
    ),
)

FILTER_BRANCH = Program(
    "filter-branch",
    manual=f"git-filter-branch(1), {_MANUAL}, OPTIONS",
    # Its filters are shell commands it runs on every commit.
    effects=frozenset({Effect.WRITE, Effect.CODE}),
    style=Style.POSIX,
    options=(
        *flags("-f --force", "--prune-empty"),
        *values(
            "--setup",
            "--subdirectory-filter",
            "--env-filter",
            "--tree-filter",
            "--index-filter",
            "--parent-filter",
            "--msg-filter",
            "--commit-filter",
            "--tag-name-filter",
            "--original",
            "-d",
            "--state-branch",
            example="x",
        ),
    ),
)

DIFFTOOL = Program(
    "difftool",
    manual=f"git-difftool(1), {_MANUAL}, OPTIONS",
    # Runs the configured or named diff tool.
    effects=_CODE,
    negatable=True,
    options=(
        *_DIFF,
        *flags(
            "-g --gui",
            "-d --dir-diff",
            "-y --no-prompt",
            "--prompt",
            "--symlinks",
            "--tool-help",
            "--trust-exit-code",
            "--no-index",
        ),
        *values("-t --tool", "-x --extcmd", example="x"),
    ),
)

MERGETOOL = Program(
    "mergetool",
    manual=f"git-mergetool(1), {_MANUAL}, OPTIONS",
    # Runs the configured or named merge tool.
    effects=_CODE,
    options=(
        *flags("--tool-help", "-y --no-prompt", "--prompt", "-g --gui", "--no-gui"),
        *values("-t --tool", example="x"),
        *attached("-O", example="order.txt"),
    ),
)

# ---------------------------------------------------------------- git itself

_SUBCOMMANDS = (
    LOG,
    SHOW,
    WHATCHANGED,
    DIFF,
    DIFF_TREE,
    DIFF_FILES,
    DIFF_INDEX,
    BLAME,
    ANNOTATE,
    GREP,
    LS_FILES,
    LS_TREE,
    REV_PARSE,
    REV_LIST,
    DESCRIBE,
    SHORTLOG,
    CAT_FILE,
    SHOW_REF,
    FOR_EACH_REF,
    MERGE_BASE,
    NAME_REV,
    COUNT_OBJECTS,
    CHECK_IGNORE,
    CHECK_ATTR,
    VAR,
    VERSION,
    HELP,
    RANGE_DIFF,
    CHERRY,
    ARCHIVE,
    VERIFY_COMMIT,
    VERIFY_TAG,
    STATUS,
    BRANCH,
    TAG,
    CONFIG,
    STASH,
    WORKTREE,
    REMOTE,
    NOTES,
    REFLOG,
    SUBMODULE,
    BISECT,
    ADD,
    COMMIT,
    CHECKOUT,
    SWITCH,
    RESTORE,
    RESET,
    RM,
    MV,
    CLEAN,
    MERGE,
    REBASE,
    CHERRY_PICK,
    REVERT,
    AM,
    APPLY,
    INIT,
    CLONE,
    FETCH,
    PULL,
    PUSH,
    LS_REMOTE,
    FORMAT_PATCH,
    SEND_EMAIL,
    GC,
    PRUNE,
    REPACK,
    FILTER_BRANCH,
    DIFFTOOL,
    MERGETOOL,
)

_OTHER_REPOSITORY = (
    "uses the repository at the named path, whose configuration (not bound read-only) can run "
    "programs"
)

GIT = Program(
    "git",
    manual=f"git(1), {_MANUAL}, OPTIONS",
    effects=EVERYTHING,
    operands=Operands.SUBCOMMAND,
    style=Style.POSIX,
    covers="git subcommands with options the table knows",
    subcommands={entry.name: entry for entry in _SUBCOMMANDS},
    options=(
        *flags(
            "-v --version",
            "-h --help",
            "--html-path",
            "--man-path",
            "--info-path",
            "-p --paginate",
            "-P --no-pager",
            "--no-replace-objects",
            "--literal-pathspecs",
            "--no-literal-pathspecs",
            "--glob-pathspecs",
            "--noglob-pathspecs",
            "--icase-pathspecs",
            "--no-optional-locks",
        ),
        # -C is `cd`: git then finds the repository as it would there.
        *values("-C", "--work-tree", "--namespace", example="."),
        does("--git-dir", Effect.CODE, _OTHER_REPOSITORY, takes=Takes.VALUE, example=".git"),
        does(
            "--bare",
            Effect.CODE,
            "uses the current directory as the repository, whose configuration (not bound "
            "read-only) can run programs",
        ),
        does(
            "-c",
            Effect.CODE,
            "sets configuration, which can run programs",
            takes=Takes.VALUE,
            example="core.pager=cat",
        ),
        does(
            "--config-env",
            Effect.CODE,
            "sets configuration, which can run programs",
            takes=Takes.VALUE,
            example="core.pager=PAGER",
        ),
        does(
            "--exec-path",
            Effect.CODE,
            "runs git's programs from the named directory",
            takes=Takes.ATTACHED,
        ),
        does("--super-prefix", Effect.UNKNOWN, "internal", takes=Takes.VALUE),
        *attached("--list-cmds", example="main"),
    ),
)

PROGRAMS: tuple[Program, ...] = (GIT,)
