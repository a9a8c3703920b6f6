"""Table: programs that search, filter, sort and edit text (find, sed, awk, rg, grep, sort, uniq,
cut, jq, …) and the shell's printing and condition commands (echo, printf, test, true, …).

Each entry cites the manual its options were read from. Options not listed are unknown:
a family never covers them (they need an exact rule or a human).
"""

from __future__ import annotations

import dataclasses

from .build import DELETE, attached, does, flags, script, values
from .model import Effect, Operands, Program, Style, Takes
from .scripts import awk_program, sed_script

_XY = "aBcmt"
_FIND_NEWER = tuple(f"-newer{x}{y}" for x in _XY for y in _XY if x != "t")

FIND = Program(
    "find",
    manual="find(1), GNU findutils 4.9.0, sections EXPRESSION (TESTS, ACTIONS, OPERATORS)",
    style=Style.FIND,
    covers="find with read-only tests and actions (never -exec, -execdir, -ok, -okdir, "
    "-delete, -fprint, -fprint0, -fprintf or -fls)",
    options=(
        *flags(
            "-a",
            "-and",
            "-o",
            "-or",
            "-not",
            "-true",
            "-false",
            "-depth",
            "-d",
            "-xdev",
            "-mount",
            "-follow",
            "-noleaf",
            "-ignore_readdir_race",
            "-noignore_readdir_race",
            "-daystart",
            "-warn",
            "-nowarn",
            "-nouser",
            "-nogroup",
            "-empty",
            "-executable",
            "-readable",
            "-writable",
            "-print",
            "-print0",
            "-ls",
            "-prune",
            "-quit",
            "-help",
            "--help",
            "-version",
            "--version",
        ),
        *values(
            "-name",
            "-iname",
            "-path",
            "-ipath",
            "-wholename",
            "-iwholename",
            "-regex",
            "-iregex",
            "-lname",
            "-ilname",
            "-type",
            "-xtype",
            "-fstype",
            "-context",
            "-regextype",
            "-printf",
            "-user",
            "-group",
            "-perm",
            "-newer",
            "-anewer",
            "-cnewer",
            "-samefile",
            example="x",
        ),
        *values(*_FIND_NEWER, example="2020-01-01"),
        *values(
            "-size",
            "-mtime",
            "-mmin",
            "-atime",
            "-amin",
            "-ctime",
            "-cmin",
            "-used",
            "-uid",
            "-gid",
            "-links",
            "-inum",
            "-maxdepth",
            "-mindepth",
            example="1",
        ),
        does("-delete", Effect.DELETE, "deletes the files found", actions=DELETE),
        *(
            does(name, Effect.CODE, "runs a command for the files found", until=(";", "+"))
            for name in ("-exec", "-execdir", "-ok", "-okdir")
        ),
        does("-fprint", Effect.WRITE, "writes the names to a file", takes=Takes.VALUE),
        does("-fprint0", Effect.WRITE, "writes the names to a file", takes=Takes.VALUE),
        does("-fprintf", Effect.WRITE, "writes the names to a file", takes=Takes.VALUE),
        does("-fls", Effect.WRITE, "writes a listing to a file", takes=Takes.VALUE),
    ),
)

SED = Program(
    "sed",
    manual="sed(1), GNU sed 4.9 manual §2.2 Command-Line Options and §3 sed scripts",
    operands=Operands.SCRIPT,
    script=sed_script,
    aliases=("gsed",),
    covers="sed with read-only options and scripts (never -i, and no `e`, `w` or `W` "
    "commands, no `s///e` or `s///w`)",
    options=(
        *flags(
            "-n --quiet --silent",
            "--debug",
            "--posix",
            "-E -r --regexp-extended",
            "-s --separate",
            "--sandbox",
            "-u --unbuffered",
            "-z --null-data",
            "--follow-symlinks",
            "--help",
            "--version",
        ),
        *values("-l --line-length", example="70"),
        script("-e --expression"),
        does(
            "-f --file",
            Effect.UNKNOWN,
            "reads its script from a file",
            takes=Takes.VALUE,
            example="script.sed",
        ),
        does(
            "-i --in-place",
            Effect.WRITE,
            "edits the named files in place",
            takes=Takes.ATTACHED,
            example="",
        ),
        does("-b --binary", Effect.READ, ""),
    ),
)

AWK = Program(
    "awk",
    manual="gawk(1), GNU Awk 5.2 manual §2.2 Command-Line Options; mawk(1); POSIX awk",
    operands=Operands.SCRIPT,
    script=awk_program,
    aliases=("gawk", "mawk", "nawk"),
    covers="awk with read-only options and programs (no system(), pipes, getline, "
    "@load or output redirection)",
    options=(
        *values("-F --field-separator", example=","),
        *values("-v --assign", example="x=1"),
        *flags(
            "-b --characters-as-bytes",
            "-c --traditional",
            "-C --copyright",
            "-g --gen-pot",
            "-M --bignum",
            "-N --use-lc-numeric",
            "-n --non-decimal-data",
            "-O --optimize",
            "-P --posix",
            "-r --re-interval",
            "-s --no-optimize",
            "-S --sandbox",
            "-t --lint-old",
            "-V --version",
            "-h --usage --help",
        ),
        *attached("-L --lint"),
        script("-e --source", example="{ print }"),
        does("-f --file", Effect.UNKNOWN, "reads its program from a file", takes=Takes.VALUE),
        does("-i --include", Effect.UNKNOWN, "reads program text from a file", takes=Takes.VALUE),
        does("-E --exec", Effect.UNKNOWN, "reads its program from a file", takes=Takes.VALUE),
        does("-l --load", Effect.CODE, "loads a shared library", takes=Takes.VALUE),
        does(
            "-o --pretty-print", Effect.WRITE, "writes the program to a file", takes=Takes.ATTACHED
        ),
        does("-p --profile", Effect.WRITE, "writes a profile to a file", takes=Takes.ATTACHED),
        does(
            "-d --dump-variables",
            Effect.WRITE,
            "writes the variables to a file",
            takes=Takes.ATTACHED,
        ),
        does("-D --debug", Effect.UNKNOWN, "starts the interactive debugger", takes=Takes.ATTACHED),
        does(
            "-W",
            Effect.UNKNOWN,
            "mawk's implementation options (-W exec runs a file)",
            takes=Takes.VALUE,
        ),
    ),
)

RG = Program(
    "rg",
    manual="rg(1), ripgrep 13.0 (rg --help); Codex's safe-command table (no --pre, "
    "--search-zip, --hostname-bin)",
    covers="rg with read-only options (never --pre, --search-zip or --hostname-bin)",
    options=(
        *flags(
            "-a --text",
            "--binary",
            "--block-buffered",
            "-b --byte-offset",
            "-s --case-sensitive",
            "--column",
            "-c --count",
            "--count-matches",
            "--crlf",
            "--debug",
            "--trace",
            "-l --files-with-matches",
            "--files-without-match",
            "-F --fixed-strings",
            "-L --follow",
            "--files",
            "-H --with-filename",
            "-I --no-filename",
            "--heading",
            "--no-heading",
            "--hidden",
            "--no-hidden",
            "-i --ignore-case",
            "--ignore-file-case-insensitive",
            "-v --invert-match",
            "--json",
            "--line-buffered",
            "-n --line-number",
            "-N --no-line-number",
            "-x --line-regexp",
            "--max-columns-preview",
            "--mmap",
            "--no-mmap",
            "-U --multiline",
            "--multiline-dotall",
            "--no-config",
            "--no-ignore",
            "--no-ignore-dot",
            "--no-ignore-exclude",
            "--no-ignore-files",
            "--no-ignore-global",
            "--no-ignore-parent",
            "--no-ignore-vcs",
            "--no-messages",
            "--no-pcre2-unicode",
            "--no-require-git",
            "--no-unicode",
            "-0 --null",
            "--null-data",
            "--one-file-system",
            "-o --only-matching",
            "--passthru --passthrough",
            "-P --pcre2",
            "--pcre2-version",
            "-p --pretty",
            "-q --quiet",
            "--smart-case -S",
            "--sort-files",
            "--stats",
            "--trim",
            "--type-list",
            "-u --unrestricted",
            "-V --version",
            "--vimgrep",
            "-w --word-regexp",
            "--auto-hybrid-regex",
            "--no-auto-hybrid-regex",
            "--no-column",
            "--no-byte-offset",
            "--no-pcre2",
            "--no-search-zip",
            "--no-binary",
            "--no-text",
            "--no-fixed-strings",
            "--no-follow",
            "--no-multiline",
            "--no-multiline-dotall",
            "--no-one-file-system",
            "--no-block-buffered",
            "--no-line-buffered",
            "--no-crlf",
            "--no-invert-match",
            "--no-json",
            "--no-stats",
            "--no-sort-files",
            "--no-trim",
            "--no-include-zero",
            "--include-zero",
            "--no-max-columns-preview",
            "--no-context-separator",
            "--no-encoding",
            "--no-ignore-messages",
            "--no-pre",
            "-h --help",
        ),
        *values(
            "-A --after-context",
            "-B --before-context",
            "-C --context",
            "-m --max-count",
            "-M --max-columns",
            "--max-depth --maxdepth",
            "-j --threads",
            "--dfa-size-limit",
            "--regex-size-limit",
            "--max-filesize",
            example="2",
        ),
        *values(
            "--color --colour",
            "--colors",
            "--context-separator",
            "-E --encoding",
            "--engine",
            "-f --file",
            "-g --glob",
            "--iglob",
            "--ignore-file",
            "--path-separator",
            "-r --replace",
            "--sort",
            "--sortr",
            "-t --type",
            "-T --type-not",
            "--type-add",
            "--type-clear",
            "-e --regexp",
            "--field-context-separator",
            "--field-match-separator",
            "--pre-glob",
            example="x",
        ),
        does(
            "--pre",
            Effect.CODE,
            "runs a program on every file searched",
            takes=Takes.VALUE,
            example="cat",
        ),
        does("-z --search-zip", Effect.CODE, "runs decompression programs"),
        does(
            "--hostname-bin",
            Effect.CODE,
            "runs a program to get the host name",
            takes=Takes.VALUE,
            example="hostname",
        ),
    ),
)

_COREUTILS = "GNU coreutils 9.1; coreutils manual"

GREP = Program(
    "grep",
    manual="grep(1), GNU grep 3.8 (grep --help); grep manual §2.1 Command-line Options",
    numeric_flags=True,
    options=(
        *flags(
            "-E --extended-regexp",
            "-F --fixed-strings",
            "-G --basic-regexp",
            "-P --perl-regexp",
            "-i -y --ignore-case",
            "--no-ignore-case",
            "-w --word-regexp",
            "-x --line-regexp",
            "-z --null-data",
            "-s --no-messages",
            "-v --invert-match",
            "-V --version",
            "--help",
            "-b --byte-offset",
            "-n --line-number",
            "--line-buffered",
            "-H --with-filename",
            "-h --no-filename",
            "-o --only-matching",
            "-q --quiet --silent",
            "-a --text",
            "-I",
            "-r --recursive",
            "-R --dereference-recursive",
            "-L --files-without-match",
            "-l --files-with-matches",
            "-c --count",
            "-T --initial-tab",
            "-Z --null",
            "--no-group-separator",
            "-U --binary",
        ),
        *values("-e --regexp", example="x"),
        # The patterns file and the exclusion patterns file are only read.
        *values("-f --file", "--exclude-from", example="notes.txt"),
        *values("-m --max-count", "-A --after-context", "-B --before-context", example="2"),
        *values("-C --context", example="2"),
        *values("--label", "--group-separator", example="x"),
        *values("--binary-files", example="text"),
        *values("-d --directories", "-D --devices", example="skip"),
        *values("--include", "--exclude", "--exclude-dir", example="*.py"),
        *attached("--color --colour", example="never"),
    ),
)

# GNU grep 3.8's egrep and fgrep are scripts that run `grep -E` and `grep -F`.
EGREP = dataclasses.replace(
    GREP, name="egrep", manual="egrep(1): `grep -E`, GNU grep 3.8 (grep manual §2.4 grep Programs)"
)
FGREP = dataclasses.replace(
    GREP, name="fgrep", manual="fgrep(1): `grep -F`, GNU grep 3.8 (grep manual §2.4 grep Programs)"
)

SORT = Program(
    "sort",
    manual=f"sort(1), {_COREUTILS} §7.1 sort: Sort text files",
    covers="sort with read-only options (never -o/--output, -T/--temporary-directory or "
    "--compress-program)",
    options=(
        *flags(
            "-b --ignore-leading-blanks",
            "-d --dictionary-order",
            "-f --ignore-case",
            "-g --general-numeric-sort",
            "-i --ignore-nonprinting",
            "-M --month-sort",
            "-h --human-numeric-sort",
            "-n --numeric-sort",
            "-R --random-sort",
            "-r --reverse",
            "-V --version-sort",
            "-c",
            "-C",
            "--debug",
            "-m --merge",
            "-s --stable",
            "-u --unique",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        # `-c` and `-C` take no value; `--check[=diagnose-first|quiet|silent]` may.
        *attached("--check", example="quiet"),
        *values("--sort", example="numeric"),
        *values("-k --key", example="2,2n"),
        *values("-t --field-separator", example=","),
        *values("-S --buffer-size", example="1M"),
        *values("--batch-size", "--parallel", example="2"),
        # Files only read: random bytes, the names of the files to sort.
        *values("--random-source", "--files0-from", example="notes.txt"),
        does(
            "-o --output",
            Effect.WRITE,
            "writes the result to the named file",
            takes=Takes.VALUE,
            example="out.txt",
        ),
        # Temporary files only, deleted before sort exits; still writes where it is told.
        does(
            "-T --temporary-directory",
            Effect.WRITE,
            "writes temporary files into the named directory",
            takes=Takes.VALUE,
            example="tmp",
        ),
        does(
            "--compress-program",
            Effect.CODE,
            "runs the named program to compress temporary files",
            takes=Takes.VALUE,
            example="gzip",
        ),
    ),
)

SHUF = Program(
    "shuf",
    manual=f"shuf(1), {_COREUTILS} §7.2 shuf: Shuffling text",
    options=(
        *flags("-e --echo", "-r --repeat", "-z --zero-terminated", "--help", "--version"),
        *values("-i --input-range", example="1-10"),
        *values("-n --head-count", example="3"),
        *values("--random-source", example="notes.txt"),
        does(
            "-o --output",
            Effect.WRITE,
            "writes the result to the named file",
            takes=Takes.VALUE,
            example="out.txt",
        ),
    ),
)

UNIQ = Program(
    "uniq",
    manual=f"uniq(1), {_COREUTILS} §7.3 uniq: Uniquify files (`uniq [OPTION]... [INPUT [OUTPUT]]`)",
    # `uniq INPUT OUTPUT` writes OUTPUT.
    max_read_operands=1,
    numeric_flags=True,
    covers="uniq with read-only options and at most one operand (never `uniq INPUT OUTPUT`)",
    options=(
        *flags(
            "-c --count",
            "-d --repeated",
            "-D",
            "-i --ignore-case",
            "-u --unique",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        *attached("--all-repeated", example="separate"),
        *attached("--group", example="append"),
        *values("-f --skip-fields", "-s --skip-chars", "-w --check-chars", example="1"),
    ),
)

COMM = Program(
    "comm",
    manual=f"comm(1), {_COREUTILS} §7.4 comm: Compare two sorted files line by line",
    options=(
        *flags(
            "-1",
            "-2",
            "-3",
            "--check-order",
            "--nocheck-order",
            "--total",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        *values("--output-delimiter", example=","),
    ),
)

TSORT = Program(
    "tsort",
    manual=f"tsort(1), {_COREUTILS} §7.6 tsort: Topological sort",
    options=flags("--help", "--version"),
)

CUT = Program(
    "cut",
    manual=f"cut(1), {_COREUTILS} §8.1 cut: Print selected parts of lines",
    options=(
        *flags(
            "-n",
            "--complement",
            "-s --only-delimited",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        *values("-b --bytes", "-c --characters", "-f --fields", example="1-2"),
        *values("-d --delimiter", "--output-delimiter", example=","),
    ),
)

PASTE = Program(
    "paste",
    manual=f"paste(1), {_COREUTILS} §8.2 paste: Merge lines of files",
    options=(
        *flags("-s --serial", "-z --zero-terminated", "--help", "--version"),
        *values("-d --delimiters", example=","),
    ),
)

JOIN = Program(
    "join",
    manual=f"join(1), {_COREUTILS} §8.3 join: Join lines on a common field",
    options=(
        *flags(
            "-i --ignore-case",
            "--check-order",
            "--nocheck-order",
            "--header",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        *values("-a", "-v", "-j", "-1", "-2", example="1"),
        *values("-e", example="-"),
        *values("-o", example="auto"),
        *values("-t", example=","),
    ),
)

TR = Program(
    "tr",
    manual=f"tr(1), {_COREUTILS} §9.1 tr: Translate, squeeze, and/or delete characters",
    style=Style.POSIX,
    options=flags(
        "-c -C --complement",
        "-d --delete",
        "-s --squeeze-repeats",
        "-t --truncate-set1",
        "--help",
        "--version",
    ),
)


def _tabs(name: str, section: str, extra: tuple[str, ...]) -> Program:
    """expand and unexpand: `-t LIST`, or the obsolete `-8`."""
    return Program(
        name,
        manual=f"{name}(1), {_COREUTILS} {section}",
        numeric_flags=True,
        options=(*flags(*extra, "--help", "--version"), *values("-t --tabs", example="4")),
    )


EXPAND = _tabs("expand", "§9.2 expand: Convert tabs to spaces", ("-i --initial",))
UNEXPAND = _tabs("unexpand", "§9.3 unexpand: Convert spaces to tabs", ("-a --all", "--first-only"))

FMT = Program(
    "fmt",
    manual=f"fmt(1), {_COREUTILS} §4.1 fmt: Reformat paragraph text",
    numeric_flags=True,
    options=(
        *flags(
            "-c --crown-margin",
            "-s --split-only",
            "-t --tagged-paragraph",
            "-u --uniform-spacing",
            "--help",
            "--version",
        ),
        *values("-p --prefix", example="#"),
        *values("-w --width", "-g --goal", example="60"),
    ),
)

FOLD = Program(
    "fold",
    manual=f"fold(1), {_COREUTILS} §4.3 fold: Wrap input lines to fit in specified width",
    numeric_flags=True,
    options=(
        *flags("-b --bytes", "-s --spaces", "--help", "--version"),
        *values("-w --width", example="60"),
    ),
)

REV = Program(
    "rev",
    manual="rev(1), util-linux 2.38.1 (rev --help)",
    options=flags("-h --help", "-V --version"),
)

COLUMN = Program(
    "column",
    manual="column(1), util-linux 2.38.1 (column --help)",
    options=(
        *flags(
            "-t --table",
            "-d --table-noheadings",
            "-e --table-header-repeat",
            "-L --keep-empty-lines",
            "-J --json",
            "-x --fillrows",
            "-h --help",
            "-V --version",
        ),
        *values(
            "-n --table-name",
            "-O --table-order",
            "-N --table-columns",
            "-E --table-noextreme",
            "-H --table-hide",
            "-R --table-right",
            "-T --table-truncate",
            "-W --table-wrap",
            "-r --tree",
            "-i --tree-id",
            "-p --tree-parent",
            example="1",
        ),
        *values("-l --table-columns-limit", "-c --output-width", example="2"),
        # -o is the output separator, a string: column writes only to standard output.
        *values("-o --output-separator", "-s --separator", example=","),
    ),
)

# jq's language has no way to run a program or write a file: `input`, `$ENV`, `env`,
# `input_filename`, `$__loc__` and modules (`import`, `include`, -L) only read.
JQ = Program(
    "jq",
    manual="jq(1), jq 1.6 manual, Invoking jq (jq --help)",
    options=(
        *flags(
            "-s --slurp",
            "-R --raw-input",
            "-n --null-input",
            "-c --compact-output",
            "--tab",
            "-C --color-output",
            "-M --monochrome-output",
            "-a --ascii-output",
            "--unbuffered",
            "-S --sort-keys",
            "-r --raw-output",
            "-j --join-output",
            # The program is then read from the file named by the first operand.
            "-f --from-file",
            "-e --exit-status",
            "--seq",
            "--stream",
            "--args",
            "--jsonargs",
            "--run-tests",
            "--debug-dump-disasm",
            "--debug-trace",
            "-h --help",
            "-V --version",
        ),
        *values("--indent", example="2"),
        *values("-L", example="."),
        # `--arg NAME VALUE` and friends take two words; the second is read as an operand,
        # which only ever names a value or a file jq reads.
        *values("--arg", "--argjson", "--slurpfile", "--rawfile", "--argfile", example="x"),
    ),
)

# ---------------------------------------------------------------- printing and conditions

ECHO = Program(
    "echo",
    manual=f"echo(1), {_COREUTILS} §15.1 echo: Print a line of text; bash builtin echo "
    "(options only before the first word)",
    style=Style.POSIX,
    options=flags("-n", "-e", "-E", "--help", "--version"),
)

PRINTF = Program(
    "printf",
    manual=f"printf(1), {_COREUTILS} §15.2 printf: Format and print data; bash builtin "
    "printf (-v VAR)",
    style=Style.POSIX,
    options=(
        *flags("--help", "--version"),
        does(
            "-v",
            Effect.CODE,
            "bash's printf assigns the named shell variable (PATH, IFS, …), which changes "
            "what later commands run",
            takes=Takes.VALUE,
            example="x",
        ),
    ),
)

YES = Program(
    "yes",
    manual=f"yes(1), {_COREUTILS} §15.3 yes: Print a string until interrupted",
    style=Style.POSIX,
    options=flags("--help", "--version"),
)

FALSE = Program(
    "false",
    manual=f"false(1), {_COREUTILS} §16.1 false: Do nothing, unsuccessfully",
    options=flags("--help", "--version"),
)

TRUE = Program(
    "true",
    manual=f"true(1), {_COREUTILS} §16.2 true: Do nothing, successfully",
    options=flags("--help", "--version"),
)

# test's words are an expression; the unary operators are read as options, and everything
# from the first other word on as operands (`test -f x`, `[ "$a" = b ]`, `test 1 -lt 2`).
TEST = Program(
    "test",
    manual=f"test(1), {_COREUTILS} §16.3 test: Check file types and compare values; bash "
    "builtin test and [",
    style=Style.POSIX,
    aliases=("[",),
    options=flags(
        *(
            f"-{letter}"
            for letter in ("a", "b", "c", "d", "e", "f", "g", "G", "h", "k", "L", "n", "N")
        ),
        *(
            f"-{letter}"
            for letter in ("o", "O", "p", "r", "R", "s", "S", "t", "u", "v", "w", "x", "z")
        ),
        "--help",
        "--version",
    ),
)

EXPR = Program(
    "expr",
    manual=f"expr(1), {_COREUTILS} §16.4 expr: Evaluate expressions",
    style=Style.POSIX,
    options=flags("--help", "--version"),
)

SLEEP = Program(
    "sleep",
    manual=f"sleep(1), {_COREUTILS} §25.1 sleep: Delay for a specified time",
    options=flags("--help", "--version"),
)

FACTOR = Program(
    "factor",
    manual=f"factor(1), {_COREUTILS} §26.1 factor: Print prime factors",
    options=flags("--help", "--version"),
)

SEQ = Program(
    "seq",
    manual=f"seq(1), {_COREUTILS} §26.3 seq: Print numeric sequences",
    style=Style.POSIX,
    # `seq -5 5`: a negative number is a number, not an option.
    numeric_flags=True,
    options=(
        *flags("-w --equal-width", "--help", "--version"),
        *values("-f --format", example="%.2f"),
        *values("-s --separator", example=","),
    ),
)

PROGRAMS: tuple[Program, ...] = (
    FIND,
    SED,
    AWK,
    RG,
    GREP,
    EGREP,
    FGREP,
    SORT,
    SHUF,
    UNIQ,
    COMM,
    TSORT,
    CUT,
    PASTE,
    JOIN,
    TR,
    EXPAND,
    UNEXPAND,
    FMT,
    FOLD,
    REV,
    COLUMN,
    JQ,
    ECHO,
    PRINTF,
    YES,
    FALSE,
    TRUE,
    TEST,
    EXPR,
    SLEEP,
    FACTOR,
    SEQ,
)
