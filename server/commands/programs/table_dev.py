"""Table: build tools, package managers, interpreters, and the wrappers that run a command.

Each entry cites the manual its options were read from. Options not listed are unknown: a
family never covers them (they need an exact rule or a human).

What these programs do, and how the table says it:

- Build tools, test runners and interpreters run code (`make`, `npm test`, `cargo build`,
  `pytest`, `python`): their effects hold CODE, so a family over them implies everything code
  can do, yet covers only options the table knows (`Bash(make:*)` covers `make -j4 test`, not
  `make --frobnicate`). `make -n` still runs `$(shell …)` and recursive `$(MAKE)` lines, and
  `python --version` is still `python`: neither gets a mode of its own.
- Wrappers (`env`, `timeout`, `nice`, `nohup`, `stdbuf`, `ionice`, `setsid`) take a command:
  it is read with the table in turn and becomes the reading's entry, so a family naming the
  wrapped command (`Bash(timeout 5 git log:*)`) is held to what that command's words imply,
  and a family over the wrapper alone implies running code. `xargs` is read differently: it
  appends words read from its input to its command, and those may be options
  (`--output=x`), so its words are not read as a command; a family starting with `xargs`
  implies running code. Deny families see the command behind every wrapper (xargs included)
  through the parse's wrapper starts. `command -v NAME` only looks a name up; `command NAME`
  runs it.
- Housekeeping is counted, as the knowledge base asks: every npm command writes its debug
  log under its cache directory (~/.npm/_logs), deletes the oldest beyond `logs-max`, writes
  an update-check stamp and asks the registry for a newer npm at most once a week (npm
  logging(7), config(7) `update-notifier`; seen with npm 11.19.1 in a sandbox), so no npm
  entry is read-only and none is offered as a family. `pip list` likewise asks PyPI for a
  newer pip once a week and caches the answer (pip 23.2 `IndexGroupCommand`, unless
  `--disable-pip-version-check` or `--no-index`); `pip show`, `pip freeze` and `pip check`
  do not (seen with pip 23.2.1).
- Files in the workspace that name programs make otherwise quiet subcommands run code. cargo
  in ~/.cargo/bin is rustup's proxy: it runs the toolchain a `rust-toolchain.toml` names, whose
  `path` may be any directory (seen with rustup 1.29: `cargo version` ran a script), so every
  cargo entry runs code. Without rustup, `.cargo/config.toml` (`build.rustc-wrapper`,
  `build.rustc`) still runs for every subcommand that asks rustc about the target (seen with
  cargo 1.95: `metadata`, `tree`, `fetch`, `add`, `clean`, `--explain`; not
  `metadata --no-deps`, `locate-project`, `version`, `generate-lockfile`, `update`,
  `fmt --check`). pnpm runs the pnpm version package.json's `packageManager` names and yarn
  runs the release `.yarnrc.yml`'s `yarnPath` names, so every pnpm and yarn command runs code.
  npm's `.npmrc` is a protected file in callgate, masked in the sandbox. Python programs (pip)
  run the `.pth` files of their site directories at startup, the user's in the session's HOME
  included, and pip reads `pip.conf` there (`log = …` makes it write): the table describes
  pip as it behaves with those files as installed.
- Left out: `go` (its flag package takes single-dash long options, `-race` being one option,
  which the reader would split as `-r -a -c -e`; and since Go 1.21 every go command may run
  the toolchain go.mod names), `deno`, `bun` and `tsc`: families over them stay opaque.
"""

from __future__ import annotations

from .build import DELETE, HTTP, PERMISSIONS, attached, does, flags, mode, values
from .model import EVERYTHING, Effect, Operands, Option, Program, Style, Takes

_READ = Effect.READ
_WRITE = Effect.WRITE
_DELETE = Effect.DELETE
_CODE = Effect.CODE
_NETWORK = Effect.NETWORK
_RUNS = frozenset({_CODE})


def _by_name(*entries: Program) -> dict[str, Program]:
    """Subcommand entries under their names and aliases."""
    return {name: entry for entry in entries for name in (entry.name, *entry.aliases)}


def _each(
    spec: str, effect: Effect, what: str, *, takes: Takes = Takes.NOTHING, example: str = "1"
) -> tuple[Option, ...]:
    """Several distinct options doing the same kind of thing, one entry each (deny families
    tell options apart by their canonical names)."""
    return tuple(does(name, effect, what, takes=takes, example=example) for name in spec.split())


# ---------------------------------------------------------------------------------- make

MAKE = Program(
    "make",
    manual="make(1), GNU Make 4.3, OPTIONS; `make --help`",
    effects=_RUNS,
    aliases=("gmake",),
    options=(
        # -n prints recipes instead of running them, but still runs `$(shell …)`, recipe lines
        # holding `$(MAKE)` or starting with `+`, and rules that remake included makefiles.
        *flags(
            "-b",
            "-m",
            "-B --always-make",
            "-d",
            "-e --environment-overrides",
            "-h --help",
            "-i --ignore-errors",
            "-k --keep-going",
            "-L --check-symlink-times",
            "-n --just-print --dry-run --recon",
            "-p --print-data-base",
            "-q --question",
            "-r --no-builtin-rules",
            "-R --no-builtin-variables",
            "-s --silent --quiet",
            "--no-silent",
            "-S --no-keep-going --stop",
            "--trace",
            "-v --version",
            "-w --print-directory",
            "--no-print-directory",
            "--warn-undefined-variables",
        ),
        *values("-C --directory", "-I --include-dir", example="."),
        *values("-o --old-file --assume-old", "-W --what-if --new-file --assume-new", example="x"),
        *attached("-j --jobs", "-l --load-average --max-load", example="2"),
        *attached("-O --output-sync", example="target"),
        *attached("--debug", example="b"),
        does(
            "-f --file --makefile",
            _CODE,
            "runs the recipes of the named makefile",
            takes=Takes.VALUE,
            example="Makefile",
        ),
        does(
            "-E --eval",
            _CODE,
            "evaluates the string as a makefile statement",
            takes=Takes.VALUE,
            example="X=1",
        ),
        does("-t --touch", _WRITE, "touches the targets instead of remaking them"),
    ),
)

# ----------------------------------------------------------------------------------- npm

_NPM_OWN = frozenset({_WRITE, _DELETE, _NETWORK})
"""What every npm command does besides its own work: its debug log (pruning old ones), the
update-check stamp, and the weekly question to the registry."""

_NPM_MANUAL = "npm 11.19.1, Configuration; npm config(7), logging(7)"

_NPM_COMMON: tuple[Option, ...] = (
    *flags(
        "--json",
        "-s --silent",
        "-q --quiet",
        "-d",
        "--verbose",
        "--unicode",
        "--progress",
        "--timing",
        "-h -H -? --help --usage",
        "-v --version",
        "-y --yes",
        "-n --no",
        "--update-notifier",
        "--offline",
        "--prefer-offline",
        "--prefer-online",
        "-g --global",
        "--workspaces",
        "--include-workspace-root",
        "--workspaces-update",
        "--ignore-scripts",
        "--foreground-scripts",
        "--dry-run",
        "--audit",
        "--fund",
    ),
    *values("--loglevel", example="warn"),
    *values("-w --workspace", example="pkg"),
    *values("-C --prefix", example="."),
    *values("--logs-max", "--depth", example="1"),
    *values("--omit", "--include", example="dev"),
    *attached("--color", example="always"),
    does(
        "--registry",
        _NETWORK,
        "names the registry npm contacts",
        takes=Takes.VALUE,
        example="https://registry.npmjs.org/",
    ),
    does(
        "--cache",
        _WRITE,
        "moves npm's cache, where it writes packages, logs and its update-check stamp",
        takes=Takes.VALUE,
        example="cache",
    ),
    does(
        "--logs-dir",
        _WRITE,
        "writes npm's debug logs to the named directory",
        takes=Takes.VALUE,
        example="logs",
    ),
    does(
        "--script-shell",
        _CODE,
        "runs package scripts with the named shell",
        takes=Takes.VALUE,
        example="/bin/sh",
    ),
    does(
        "--node-options",
        _CODE,
        "passes NODE_OPTIONS (whose --require loads code) to what npm runs",
        takes=Takes.VALUE,
        example="--no-warnings",
    ),
    does(
        "--browser",
        _CODE,
        "opens web pages with the named program",
        takes=Takes.VALUE,
        example="true",
    ),
    does("--editor", _CODE, "edits with the named program", takes=Takes.VALUE, example="true"),
    does("--viewer", _CODE, "shows help with the named program", takes=Takes.VALUE, example="true"),
    does("--shell", _CODE, "runs the named shell", takes=Takes.VALUE, example="/bin/sh"),
    does(
        "--git",
        _CODE,
        "runs the named program for git dependencies",
        takes=Takes.VALUE,
        example="git",
    ),
)

_NPM_LIST = flags("-a --all", "-l --long", "-p --parseable", "--link", "--package-lock-only")

_NPM_INSTALL = (
    *flags(
        "-S --save",
        "-D --save-dev",
        "-O --save-optional",
        "-P --save-prod",
        "-B --save-bundle",
        "--save-peer",
        "-E --save-exact",
        "--legacy-bundling",
        "--global-style",
        "--strict-peer-deps",
        "--legacy-peer-deps",
        "--prefer-dedupe",
        "--package-lock",
        "--package-lock-only",
        "--strict-allow-scripts",
        "--dangerously-allow-all-scripts",
        "--bin-links",
        "--install-links",
        "--engine-strict",
        "-f --force",
    ),
    *values(
        "--save-prefix",
        "--install-strategy",
        "--allow-directory",
        "--allow-file",
        "--allow-git",
        "--allow-remote",
        "--allow-scripts",
        "--before",
        "--min-release-age",
        "--min-release-age-exclude",
        "--cpu",
        "--os",
        "--libc",
        "--tag",
        example="x",
    ),
)


def _npm(
    name: str,
    effects: frozenset[Effect],
    *options: Option,
    summary: str = "",
    aliases: tuple[str, ...] = (),
    operand_effect: Effect | None = None,
    actions: frozenset[str] = frozenset(),
    subcommands: dict[str, Program] | None = None,
    page: str = "",
) -> Program:
    """An npm subcommand: its own effects, npm's housekeeping, npm's common options."""
    covers = ""
    if _CODE not in effects:
        if not summary:
            raise ValueError(f"npm {name}: an entry that runs no code says what it does")
        covers = (
            f"`npm {name}` ({summary}) with options and operands the program table knows, "
            "never ones that run programs; like every npm command it also writes its own log "
            "under ~/.npm and may ask the registry whether a newer npm exists"
        )
    return Program(
        name,
        manual=f"npm-{page or name}(1), {_NPM_MANUAL}",
        effects=effects | _NPM_OWN,
        options=(*_NPM_COMMON, *options),
        operands=Operands.SUBCOMMAND if subcommands else Operands.FILES,
        subcommands=subcommands or {},
        operand_effect=operand_effect,
        negatable=True,
        aliases=aliases,
        actions=actions,
        covers=covers,
    )


_NPM_RUN_OPTIONS = flags("--if-present")

_NPM_CONFIG_OPTIONS = (*flags("-l --long"), *values("-L --location", example="project"))

NPM = Program(
    "npm",
    manual=f"npm(1), {_NPM_MANUAL}; `npm -l`",
    effects=EVERYTHING,
    operands=Operands.SUBCOMMAND,
    style=Style.POSIX,
    negatable=True,
    options=_NPM_COMMON,
    subcommands=_by_name(
        # Read what is installed or configured.
        _npm(
            "ls",
            frozenset({_READ}),
            *_NPM_LIST,
            summary="lists installed packages",
            aliases=("list",),
        ),
        _npm(
            "ll",
            frozenset({_READ}),
            *_NPM_LIST,
            summary="lists installed packages",
            aliases=("la",),
        ),
        _npm(
            "explain",
            frozenset({_READ}),
            summary="explains why a package is installed",
            aliases=("why",),
        ),
        _npm("prefix", frozenset({_READ}), summary="prints the project directory"),
        _npm("root", frozenset({_READ}), summary="prints the node_modules directory"),
        _npm(
            "query",
            frozenset({_READ}),
            *flags("--package-lock-only", "--expect-results"),
            *values("--expect-result-count", "--before", example="1"),
            summary="lists packages matching a selector",
        ),
        _npm(
            "sbom",
            frozenset({_READ}),
            *flags("--package-lock-only"),
            *values("--sbom-format", "--sbom-type", example="spdx"),
            summary="prints a software bill of materials",
        ),
        _npm("help-search", frozenset({_READ}), *flags("-l --long"), summary="searches npm's help"),
        _npm("completion", frozenset({_READ}), summary="prints a shell completion script"),
        _npm(
            "fund",
            frozenset({_READ}),
            does(
                "--which", _CODE, "opens the chosen funding URL in the browser", takes=Takes.VALUE
            ),
            summary="lists funding information",
        ),
        _npm("get", frozenset({_READ}), *_NPM_CONFIG_OPTIONS, summary="prints configuration"),
        _npm("set", frozenset({_WRITE}), *_NPM_CONFIG_OPTIONS, summary="writes configuration"),
        _npm(
            "config",
            frozenset({_WRITE, _CODE}),
            *_NPM_CONFIG_OPTIONS,
            aliases=("c",),
            subcommands=_by_name(
                _npm(
                    "get",
                    frozenset({_READ}),
                    *_NPM_CONFIG_OPTIONS,
                    summary="prints configuration",
                    page="config",
                ),
                _npm(
                    "list",
                    frozenset({_READ}),
                    *_NPM_CONFIG_OPTIONS,
                    aliases=("ls",),
                    summary="prints configuration",
                    page="config",
                ),
                _npm(
                    "set",
                    frozenset({_WRITE}),
                    *_NPM_CONFIG_OPTIONS,
                    summary="writes an npmrc file",
                    page="config",
                ),
                _npm(
                    "delete",
                    frozenset({_WRITE}),
                    *_NPM_CONFIG_OPTIONS,
                    aliases=("rm", "del"),
                    summary="writes an npmrc file",
                    page="config",
                ),
                _npm(
                    "fix",
                    frozenset({_WRITE}),
                    *_NPM_CONFIG_OPTIONS,
                    summary="rewrites npmrc files",
                    page="config",
                ),
                _npm("edit", frozenset({_WRITE, _CODE}), *_NPM_CONFIG_OPTIONS, page="config"),
            ),
        ),
        _npm(
            "pkg",
            frozenset({_WRITE}),
            *flags("-f --force"),
            summary="reads or writes package.json",
            subcommands=_by_name(
                _npm(
                    "get",
                    frozenset({_READ}),
                    *flags("-f --force"),
                    summary="prints package.json fields",
                    page="pkg",
                ),
                _npm(
                    "set",
                    frozenset({_WRITE}),
                    *flags("-f --force"),
                    summary="writes package.json",
                    page="pkg",
                ),
                _npm(
                    "delete",
                    frozenset({_WRITE}),
                    *flags("-f --force"),
                    summary="writes package.json",
                    page="pkg",
                ),
                _npm(
                    "fix",
                    frozenset({_WRITE}),
                    *flags("-f --force"),
                    summary="rewrites package.json",
                    page="pkg",
                ),
            ),
        ),
        _npm(
            "cache",
            frozenset({_WRITE, _DELETE}),
            summary="lists, fills, checks or deletes npm's cache",
            subcommands=_by_name(
                _npm("ls", frozenset({_READ}), summary="lists npm's cache", page="cache"),
                _npm(
                    "add",
                    frozenset({_WRITE}),
                    summary="downloads packages into the cache",
                    page="cache",
                ),
                _npm(
                    "clean",
                    frozenset({_DELETE}),
                    *flags("-f --force"),
                    aliases=("clear", "rm"),
                    actions=DELETE,
                    summary="deletes npm's cache",
                    page="cache",
                ),
                _npm(
                    "verify",
                    frozenset({_WRITE, _DELETE}),
                    summary="checks npm's cache, deleting what it does not need",
                    page="cache",
                ),
            ),
        ),
        # Ask the registry.
        _npm(
            "view",
            frozenset({_NETWORK}),
            summary="asks the registry about a package",
            aliases=("info", "show", "v"),
        ),
        _npm(
            "outdated",
            frozenset({_NETWORK}),
            *flags("-a --all", "-l --long", "-p --parseable"),
            *values("--before", "--min-release-age", "--min-release-age-exclude", example="1"),
            summary="asks the registry for newer versions",
        ),
        _npm(
            "search",
            frozenset({_NETWORK}),
            *flags("-p --parseable", "--description"),
            *values("--searchlimit", "--searchopts", "--searchexclude", example="x"),
            summary="searches the registry",
            aliases=("find", "s", "se"),
        ),
        _npm("ping", frozenset({_NETWORK}), summary="pings the registry"),
        _npm("whoami", frozenset({_NETWORK}), summary="asks the registry who you are"),
        _npm(
            "audit",
            frozenset({_NETWORK}),
            *flags(
                "-f --force", "--package-lock-only", "--include-attestations", "--install-links"
            ),
            *values("--audit-level", example="high"),
            # `npm audit fix` installs (scripts run); `signatures` is counted with it.
            operand_effect=_CODE,
            summary="sends the dependency tree to the registry's audit service",
        ),
        # Install, change and remove packages: lifecycle scripts run.
        _npm(
            "install",
            EVERYTHING,
            *_NPM_INSTALL,
            aliases=(
                "i",
                "add",
                "in",
                "ins",
                "inst",
                "insta",
                "instal",
                "isnt",
                "isnta",
                "isntal",
                "isntall",
            ),
        ),
        _npm(
            "ci",
            EVERYTHING,
            *_NPM_INSTALL,
            actions=DELETE,
            aliases=("clean-install", "ic", "install-clean", "isntall-clean"),
        ),
        _npm("install-test", EVERYTHING, *_NPM_INSTALL, aliases=("it",)),
        _npm(
            "install-ci-test",
            EVERYTHING,
            *_NPM_INSTALL,
            actions=DELETE,
            aliases=("cit", "clean-install-test", "sit"),
        ),
        _npm("update", EVERYTHING, *_NPM_INSTALL, aliases=("u", "up", "upgrade", "udpate")),
        _npm(
            "uninstall",
            EVERYTHING,
            *_NPM_INSTALL,
            actions=DELETE,
            aliases=("unlink", "remove", "rm", "r", "un"),
        ),
        _npm("prune", EVERYTHING, *_NPM_INSTALL, actions=DELETE),
        _npm("dedupe", EVERYTHING, *_NPM_INSTALL, aliases=("ddp",)),
        _npm("find-dupes", EVERYTHING, *_NPM_INSTALL),
        _npm("link", EVERYTHING, *_NPM_INSTALL, aliases=("ln",)),
        _npm("rebuild", EVERYTHING, *_NPM_INSTALL, aliases=("rb",)),
        # Run scripts and packages.
        _npm("run", frozenset({_CODE}), *_NPM_RUN_OPTIONS, aliases=("run-script", "rum", "urn")),
        _npm("test", frozenset({_CODE}), *_NPM_RUN_OPTIONS, aliases=("t", "tst")),
        _npm("start", frozenset({_CODE}), *_NPM_RUN_OPTIONS),
        _npm("stop", frozenset({_CODE}), *_NPM_RUN_OPTIONS),
        _npm("restart", frozenset({_CODE}), *_NPM_RUN_OPTIONS),
        _npm(
            "exec",
            EVERYTHING,
            *values("--package", example="x"),
            does(
                "-c --call",
                _CODE,
                "runs the given command string",
                takes=Takes.VALUE,
                example="true",
            ),
            aliases=("x",),
        ),
        _npm("explore", frozenset({_CODE})),
        _npm("edit", frozenset({_CODE, _WRITE})),
        _npm(
            "help",
            frozenset({_READ}),
            operand_effect=_CODE,
            summary="prints npm's usage; a topic would run the help viewer",
            aliases=("hlep",),
        ),
        _npm("docs", frozenset({_CODE, _NETWORK}), aliases=("home",)),
        _npm("bugs", frozenset({_CODE, _NETWORK}), aliases=("issues",)),
        _npm("repo", frozenset({_CODE, _NETWORK})),
        # Create, pack and publish.
        _npm(
            "init",
            EVERYTHING,
            *flags("-f --force", "--init-private"),
            *values(
                "--scope",
                "--init-author-name",
                "--init-author-url",
                "--init-license",
                "--init-type",
                "--init-version",
                example="x",
            ),
            does("--init-module", _CODE, "runs the named init module", takes=Takes.VALUE),
            aliases=("create", "innit"),
        ),
        _npm(
            "pack",
            frozenset({_CODE, _WRITE}),
            does(
                "--pack-destination",
                _WRITE,
                "writes the tarball to the named directory",
                takes=Takes.VALUE,
                example=".",
            ),
        ),
        _npm(
            "publish",
            EVERYTHING,
            *flags("--provenance"),
            *values("--tag", "--access", "--otp", "--provenance-file", example="x"),
        ),
        _npm(
            "version",
            EVERYTHING,
            *flags("--allow-same-version", "--commit-hooks", "--git-tag-version"),
            *values("--preid", "-m --message", example="x"),
            does("--sign-git-tag", _CODE, "runs gpg to sign the tag"),
            aliases=("verison",),
        ),
        _npm(
            "login",
            frozenset({_NETWORK, _WRITE}),
            *values("--scope", "--auth-type", example="web"),
            summary="logs in to the registry, writing the token to ~/.npmrc",
        ),
        _npm(
            "logout",
            frozenset({_NETWORK, _WRITE}),
            *values("--scope", example="x"),
            summary="logs out of the registry, removing the token from ~/.npmrc",
        ),
    ),
)

NPX = Program(
    "npx",
    manual=f"npx(1), {_NPM_MANUAL}; npm-exec(1)",
    effects=EVERYTHING,
    style=Style.POSIX,
    options=(
        *_NPM_COMMON,
        *values("-p --package", example="x"),
        does(
            "-c --call", _CODE, "runs the given command string", takes=Takes.VALUE, example="true"
        ),
    ),
    negatable=True,
)

# ---------------------------------------------------------------------- pnpm, yarn, uv

PNPM = Program(
    "pnpm",
    manual="pnpm CLI documentation (pnpm.io, 10.x): pnpm CLI, Filtering, settings "
    "manage-package-manager-versions",
    effects=EVERYTHING,
    style=Style.POSIX,
    # Every pnpm command runs code: package scripts, and the pnpm version package.json's
    # packageManager names (manage-package-manager-versions).
    options=(
        *flags(
            "-h --help",
            "-v --version",
            "-r --recursive",
            "-w --workspace-root",
            "-s --silent",
            "--aggregate-output",
            "--stream",
            "--use-stderr",
            "--parallel",
            "--no-color",
        ),
        *values("-C --dir", example="."),
        *values("-F --filter", "--reporter", "--loglevel", "--workspace-concurrency", example="x"),
        *attached("--color", example="always"),
    ),
)

YARN = Program(
    "yarn",
    manual="yarn CLI documentation (yarnpkg.com, Yarn 4): yarn, .yarnrc.yml yarnPath; "
    "classic.yarnpkg.com (Yarn 1.22): CLI introduction",
    effects=EVERYTHING,
    style=Style.POSIX,
    # Every yarn command runs code: package scripts, and the yarn release .yarnrc.yml's
    # yarnPath names.
    options=(
        *flags("-h --help", "-v --version", "--silent", "--verbose", "--offline", "--json"),
        *values("--cwd", example="."),
    ),
)

UV = Program(
    "uv",
    manual="uv CLI reference (docs.astral.sh/uv/reference/cli, uv 0.11): Global options",
    effects=EVERYTHING,
    style=Style.POSIX,
    # uv runs code: the project's interpreter (to inspect it), build backends, `uv run`.
    options=(
        *flags(
            "-h --help",
            "-V --version",
            "-q --quiet",
            "-v --verbose",
            "--native-tls",
            "--offline",
            "--no-progress",
            "--no-config",
            "-n --no-cache",
            "--no-python-downloads",
            "--managed-python",
            "--no-managed-python",
        ),
        *values("--color", "--python-preference", example="never"),
        *values("--directory", "--project", "--config-file", example="."),
        does(
            "--allow-insecure-host",
            _NETWORK,
            "trusts the named host without checking its certificate",
            takes=Takes.VALUE,
            example="localhost",
        ),
        does(
            "--cache-dir",
            _WRITE,
            "writes uv's cache to the named directory",
            takes=Takes.VALUE,
            example="cache",
        ),
    ),
)

# ----------------------------------------------------------------------------------- pip

_PIP_MANUAL = "pip documentation 23.2 (pip.pypa.io), pip {0}; pip 23.2.1, `pip {0} --help`"

_PIP_GENERAL: tuple[Option, ...] = (
    *flags(
        "-h --help",
        "--debug",
        "--isolated",
        "--require-virtualenv",
        "-v --verbose",
        "-V --version",
        "-q --quiet",
        "--no-input",
        "--no-cache-dir",
        "--no-color",
        "--no-python-version-warning",
    ),
    *values("--retries", "--timeout", example="1"),
    *values("--exists-action", example="i"),
    *values("--proxy", "--trusted-host", example="localhost"),
    *values("--cert", "--client-cert", example="cert.pem"),
    does(
        "--python",
        _CODE,
        "runs pip with the named Python interpreter",
        takes=Takes.VALUE,
        example="python3",
    ),
    does(
        "--log",
        _WRITE,
        "appends a verbose log to the named file",
        takes=Takes.VALUE,
        example="pip.log",
    ),
    does(
        "--keyring-provider",
        _CODE,
        "imports or runs keyring to look up credentials",
        takes=Takes.VALUE,
        example="disabled",
    ),
    does(
        "--cache-dir",
        _WRITE,
        "writes pip's cache to the named directory",
        takes=Takes.VALUE,
        example="cache",
    ),
)
_PIP_VERSION_CHECK = flags("--disable-pip-version-check")

_PIP_INDEX = (
    does(
        "-i --index-url",
        _NETWORK,
        "names the package index pip contacts",
        takes=Takes.VALUE,
        example="https://pypi.org/simple",
    ),
    does(
        "--extra-index-url",
        _NETWORK,
        "names another package index pip contacts",
        takes=Takes.VALUE,
        example="https://pypi.org/simple",
    ),
    does(
        "-f --find-links",
        _NETWORK,
        "reads package links from the named page or directory",
        takes=Takes.VALUE,
        example=".",
    ),
)

_PIP_TARGET_PYTHON = values(
    "--platform", "--python-version", "--implementation", "--abi", example="3.11"
)
_PIP_BINARIES = values("--no-binary", "--only-binary", example=":all:")
_PIP_RESOLVE = (
    *_PIP_VERSION_CHECK,
    *_PIP_INDEX,
    *flags("--no-index", "--pre", "--ignore-requires-python"),
    *_PIP_BINARIES,
)
"""What every subcommand that asks a package index takes."""
_PIP_REQUIREMENTS = (
    *_PIP_RESOLVE,
    *flags(
        "--no-deps",
        "--prefer-binary",
        "--require-hashes",
        "--no-clean",
        "--no-build-isolation",
        "--use-pep517",
        "--no-use-pep517",
        "--check-build-dependencies",
    ),
    *values("-r --requirement", "-c --constraint", example="requirements.txt"),
    *values("--src", example="src"),
    *values("--progress-bar", "--global-option", example="off"),
)
"""What install, download and wheel take (pip's `RequirementCommand`)."""


def _pip(
    name: str,
    effects: frozenset[Effect],
    *options: Option,
    actions: frozenset[str] = frozenset(),
    subcommands: dict[str, Program] | None = None,
    page: str = "",
    covers: str = "",
) -> Program:
    """A pip subcommand (or action of one): its own effects, pip's general options."""
    return Program(
        name,
        manual=_PIP_MANUAL.format(page or name),
        effects=effects,
        options=(*_PIP_GENERAL, *options),
        operands=Operands.SUBCOMMAND if subcommands else Operands.FILES,
        subcommands=subcommands or {},
        actions=actions,
        covers=covers,
    )


_PIP_PATHS = (*flags("--user"), *values("--path", example="."))
_PIP_CONFIG_FILE = flags("--global", "--user", "--site")
_PIP_EDITOR = does(
    "--editor", _CODE, "edits with the named program", takes=Takes.VALUE, example="true"
)

PIP = Program(
    "pip",
    manual="pip documentation 23.2 (pip.pypa.io); pip 23.2.1, `pip --help` (Commands, General "
    "Options)",
    effects=EVERYTHING,
    operands=Operands.SUBCOMMAND,
    style=Style.POSIX,
    options=(*_PIP_GENERAL, *_PIP_VERSION_CHECK),
    subcommands=_by_name(
        _pip("show", frozenset({_READ}), *_PIP_VERSION_CHECK, *flags("-f --files")),
        _pip(
            "freeze",
            frozenset({_READ}),
            *_PIP_VERSION_CHECK,
            *_PIP_PATHS,
            *flags("-l --local", "--all", "--exclude-editable"),
            *values("-r --requirement", example="requirements.txt"),
            *values("--exclude", example="pip"),
        ),
        _pip("check", frozenset({_READ}), *_PIP_VERSION_CHECK),
        _pip("inspect", frozenset({_READ}), *_PIP_VERSION_CHECK, *_PIP_PATHS, *flags("--local")),
        _pip(
            "hash",
            frozenset({_READ}),
            *_PIP_VERSION_CHECK,
            *values("-a --algorithm", example="sha256"),
        ),
        _pip("help", frozenset({_READ}), *_PIP_VERSION_CHECK),
        _pip(
            "completion",
            frozenset({_READ}),
            *_PIP_VERSION_CHECK,
            *flags("-b --bash", "-z --zsh", "-f --fish", "--powershell"),
        ),
        # Lists what is installed, but asks PyPI for a newer pip once a week and caches the
        # answer unless told not to: those two options switch it to reading only.
        _pip(
            "list",
            frozenset({_READ, _NETWORK, _WRITE}),
            mode("--disable-pip-version-check", _READ),
            mode("--no-index", _READ),
            *_PIP_PATHS,
            *flags(
                "-l --local",
                "-e --editable",
                "--pre",
                "--not-required",
                "--exclude-editable",
                "--include-editable",
            ),
            *values("--format", example="json"),
            *values("--exclude", example="pip"),
            does("-o --outdated", _NETWORK, "asks the package index for newer versions"),
            does("-u --uptodate", _NETWORK, "asks the package index for newer versions"),
            *_PIP_INDEX,
            covers="`pip list` with options the program table knows, never ones that run code; "
            "pip list itself asks PyPI for a newer pip once a week and caches the answer, so "
            "this family also allows its options that reach the network or write files "
            "(--outdated, --index-url, --log)",
        ),
        _pip("index", frozenset({_NETWORK, _WRITE}), *_PIP_RESOLVE, *_PIP_TARGET_PYTHON),
        _pip(
            "search",
            frozenset({_NETWORK, _WRITE}),
            *_PIP_VERSION_CHECK,
            *values("-i --index", example="https://pypi.org/pypi"),
        ),
        # Building a source distribution, even to read its metadata, runs its build backend.
        _pip(
            "install",
            EVERYTHING,
            *_PIP_REQUIREMENTS,
            *_PIP_TARGET_PYTHON,
            *flags(
                "--dry-run",
                "--user",
                "--no-user",
                "-U --upgrade",
                "--force-reinstall",
                "-I --ignore-installed",
                "--break-system-packages",
                "--compile",
                "--no-compile",
                "--no-warn-script-location",
                "--no-warn-conflicts",
            ),
            *values("-e --editable", "-t --target", "--root", "--prefix", example="."),
            *values(
                "--upgrade-strategy", "-C --config-settings", "--root-user-action", example="x"
            ),
            does(
                "--report",
                _WRITE,
                "writes a JSON report to the named file",
                takes=Takes.VALUE,
                example="report.json",
            ),
        ),
        _pip(
            "download",
            EVERYTHING,
            *_PIP_REQUIREMENTS,
            *_PIP_TARGET_PYTHON,
            *values("-d --dest --destination-dir", example="."),
        ),
        _pip(
            "wheel",
            EVERYTHING,
            *_PIP_REQUIREMENTS,
            *flags("--no-verify"),
            *values("-w --wheel-dir", "-e --editable", example="."),
            *values("-C --config-settings", "--build-option", example="x"),
        ),
        _pip(
            "uninstall",
            frozenset({_DELETE}),
            *_PIP_VERSION_CHECK,
            *flags("-y --yes", "--break-system-packages"),
            *values("--root-user-action", example="ignore"),
            does(
                "-r --requirement",
                _NETWORK,
                "reads the named requirements file, which may be a URL",
                takes=Takes.VALUE,
                example="requirements.txt",
            ),
            actions=DELETE,
        ),
        _pip(
            "cache",
            frozenset({_READ, _DELETE}),
            *_PIP_VERSION_CHECK,
            subcommands=_by_name(
                _pip("dir", frozenset({_READ}), *_PIP_VERSION_CHECK, page="cache"),
                _pip("info", frozenset({_READ}), *_PIP_VERSION_CHECK, page="cache"),
                _pip(
                    "list",
                    frozenset({_READ}),
                    *_PIP_VERSION_CHECK,
                    *values("--format", example="abspath"),
                    page="cache",
                ),
                _pip(
                    "remove",
                    frozenset({_DELETE}),
                    *_PIP_VERSION_CHECK,
                    actions=DELETE,
                    page="cache",
                ),
                _pip(
                    "purge", frozenset({_DELETE}), *_PIP_VERSION_CHECK, actions=DELETE, page="cache"
                ),
            ),
        ),
        _pip(
            "config",
            frozenset({_READ, _WRITE, _CODE}),
            *_PIP_VERSION_CHECK,
            *_PIP_CONFIG_FILE,
            _PIP_EDITOR,
            subcommands=_by_name(
                *(
                    _pip(
                        action,
                        frozenset({_READ}),
                        *_PIP_VERSION_CHECK,
                        *_PIP_CONFIG_FILE,
                        page="config",
                    )
                    for action in ("list", "get", "debug")
                ),
                *(
                    _pip(
                        action,
                        frozenset({_WRITE}),
                        *_PIP_VERSION_CHECK,
                        *_PIP_CONFIG_FILE,
                        page="config",
                    )
                    for action in ("set", "unset")
                ),
                _pip(
                    "edit",
                    frozenset({_WRITE, _CODE}),
                    *_PIP_VERSION_CHECK,
                    *_PIP_CONFIG_FILE,
                    _PIP_EDITOR,
                    page="config",
                ),
            ),
        ),
    ),
)

# --------------------------------------------------------------------------------- cargo

_CARGO_MANUAL = "cargo 1.95.0, `cargo {0} --help`; The Cargo Book, cargo-{0}(1)"

_CARGO_COMMON: tuple[Option, ...] = (
    *flags("-v --verbose", "-q --quiet", "--locked", "--offline", "--frozen", "-h --help"),
    *values("--color", example="never"),
    does(
        "--config",
        _CODE,
        "sets configuration, which can name programs cargo runs (build.rustc-wrapper)",
        takes=Takes.VALUE,
        example="net.offline=true",
    ),
    does("-Z", Effect.UNKNOWN, "unstable (nightly-only) flags", takes=Takes.VALUE, example="help"),
)
_CARGO_MANIFEST = values("--manifest-path", example="Cargo.toml")
_CARGO_SELECTED = (*flags("--workspace"), *values("-p --package", "--exclude", example="p"))
_CARGO_PACKAGES = (*_CARGO_SELECTED, *flags("--all"))
_CARGO_TARGETS = (
    *flags("--lib", "--bins", "--examples", "--tests", "--benches", "--all-targets"),
    *values("--bin", "--example", "--test", "--bench", example="p"),
)
_CARGO_FEATURES = (
    *flags("--all-features", "--no-default-features"),
    *values("-F --features", example="default"),
)
_CARGO_TARGET_DIR = does(
    "--target-dir",
    _WRITE,
    "writes build output to the named directory",
    takes=Takes.VALUE,
    example="target",
)
_CARGO_BUILD_BASE = (
    *_CARGO_MANIFEST,
    *_CARGO_FEATURES,
    *values("-j --jobs", example="2"),
    *values("--target", example="x86_64-unknown-linux-gnu"),
    _CARGO_TARGET_DIR,
)
_CARGO_COMPILE = (
    *_CARGO_BUILD_BASE,
    *flags("--ignore-rust-version", "--timings", "--unit-graph", "-r --release"),
    *values("--profile", "--message-format", example="dev"),
)
"""What every compiling subcommand but package and publish takes."""
_CARGO_KEEP_GOING = flags("--keep-going")
_CARGO_FUTURE = flags("--future-incompat-report")
_BUILDS = frozenset({_CODE, _WRITE, _NETWORK})
"""Compiling runs build scripts and procedural macros, writes target/ and Cargo.lock, and
fetches dependencies."""


def _cargo(
    name: str,
    effects: frozenset[Effect],
    *options: Option,
    aliases: tuple[str, ...] = (),
    actions: frozenset[str] = frozenset(),
) -> Program:
    """A cargo subcommand: what it does itself, cargo's options common to every subcommand,
    and running code (rustup's proxy runs the toolchain the workspace names)."""
    return Program(
        name,
        manual=_CARGO_MANUAL.format(name),
        effects=effects | _RUNS,
        options=(*_CARGO_COMMON, *options),
        aliases=aliases,
        actions=actions,
    )


_CARGO_TEST = flags("--no-run", "--no-fail-fast")
_CARGO_FIX = flags("--allow-dirty", "--allow-staged", "--allow-no-vcs")
_CARGO_REGISTRY = values("--registry", "--index", example="crates-io")
_CARGO_SOURCE = values("--git", "--branch", "--tag", "--rev", "--path", example="x")
_CARGO_VCS = does(
    "--vcs",
    _CODE,
    "creates the repository with the named program (hg, pijul, fossil; git is built in)",
    takes=Takes.VALUE,
    example="none",
)

CARGO = Program(
    "cargo",
    manual="cargo 1.95.0, `cargo --help`; The Cargo Book, cargo(1) OPTIONS",
    effects=EVERYTHING,
    operands=Operands.SUBCOMMAND,
    style=Style.POSIX,
    options=(
        *_CARGO_COMMON,
        *flags("-V --version", "--list"),
        *values("-C", example="."),
        does(
            "--explain",
            _CODE,
            "runs rustc (the configured one) to explain an error code",
            takes=Takes.VALUE,
            example="E0001",
        ),
    ),
    subcommands=_by_name(
        _cargo(
            "build",
            _BUILDS,
            *_CARGO_COMPILE,
            *_CARGO_PACKAGES,
            *_CARGO_TARGETS,
            *_CARGO_KEEP_GOING,
            *_CARGO_FUTURE,
            does(
                "--artifact-dir",
                _WRITE,
                "copies the final artifacts to the named directory",
                takes=Takes.VALUE,
                example="out",
            ),
            aliases=("b",),
        ),
        _cargo(
            "check",
            _BUILDS,
            *_CARGO_COMPILE,
            *_CARGO_PACKAGES,
            *_CARGO_TARGETS,
            *_CARGO_KEEP_GOING,
            *_CARGO_FUTURE,
            aliases=("c",),
        ),
        _cargo(
            "test",
            _BUILDS,
            *_CARGO_COMPILE,
            *_CARGO_PACKAGES,
            *_CARGO_TARGETS,
            *_CARGO_FUTURE,
            *_CARGO_TEST,
            *flags("--doc"),
            aliases=("t",),
        ),
        _cargo(
            "bench",
            _BUILDS,
            *_CARGO_BUILD_BASE,
            *flags("--ignore-rust-version", "--timings", "--unit-graph"),
            *values("--profile", "--message-format", example="bench"),
            *_CARGO_PACKAGES,
            *_CARGO_TARGETS,
            *_CARGO_TEST,
        ),
        _cargo(
            "run",
            _BUILDS,
            *_CARGO_COMPILE,
            *_CARGO_KEEP_GOING,
            *values("-p --package", "--bin", "--example", example="p"),
            aliases=("r",),
        ),
        _cargo(
            "doc",
            _BUILDS,
            *_CARGO_COMPILE,
            *_CARGO_PACKAGES,
            *_CARGO_KEEP_GOING,
            *flags("--lib", "--bins", "--examples", "--no-deps", "--document-private-items"),
            *values("--bin", "--example", example="p"),
            does("--open", _CODE, "opens the documentation in the browser"),
            aliases=("d",),
        ),
        # clippy takes cargo check's options (`cargo clippy --help`: "Other options are the
        # same as `cargo check`").
        _cargo(
            "clippy",
            _BUILDS,
            *_CARGO_COMPILE,
            *_CARGO_PACKAGES,
            *_CARGO_TARGETS,
            *_CARGO_KEEP_GOING,
            *_CARGO_FUTURE,
            *_CARGO_FIX,
            *flags("--no-deps"),
            *attached("--explain", example="needless_return"),
            does("--fix", _WRITE, "applies lint suggestions to the sources"),
        ),
        _cargo(
            "fix",
            _BUILDS,
            *_CARGO_BUILD_BASE,
            *flags("--ignore-rust-version", "--timings", "-r --release"),
            *values("--profile", "--message-format", example="dev"),
            *_CARGO_PACKAGES,
            *_CARGO_TARGETS,
            *_CARGO_KEEP_GOING,
            *_CARGO_FIX,
            *flags("--broken-code", "--edition", "--edition-idioms"),
        ),
        # Resolving dependencies asks rustc about the target (the configured rustc), except
        # with --no-deps.
        _cargo(
            "metadata",
            _BUILDS,
            *_CARGO_MANIFEST,
            *_CARGO_FEATURES,
            *values("--format-version", example="1"),
            *values("--filter-platform", example="x86_64-unknown-linux-gnu"),
            *flags("--no-deps"),
        ),
        _cargo(
            "tree",
            _BUILDS,
            *_CARGO_MANIFEST,
            *_CARGO_SELECTED,
            *_CARGO_FEATURES,
            *flags("--no-dedupe", "-d --duplicates"),
            *values(
                "--target",
                "-e --edges",
                "-i --invert",
                "--prune",
                "--depth",
                "--prefix",
                "--charset",
                "-f --format",
                example="1",
            ),
        ),
        _cargo("fetch", _BUILDS, *_CARGO_MANIFEST, *values("--target", example="x")),
        _cargo(
            "locate-project",
            frozenset({_READ}),
            *_CARGO_MANIFEST,
            *flags("--workspace"),
            *values("--message-format", example="plain"),
        ),
        _cargo("verify-project", frozenset({_READ}), *_CARGO_MANIFEST),
        _cargo("version", frozenset({_READ})),
        _cargo(
            "generate-lockfile",
            frozenset({_NETWORK, _WRITE}),
            *_CARGO_MANIFEST,
            *flags("--ignore-rust-version"),
        ),
        _cargo(
            "update",
            frozenset({_NETWORK, _WRITE}),
            *_CARGO_MANIFEST,
            *flags(
                "--recursive",
                "-b --breaking",
                "-n --dry-run",
                "-w --workspace",
                "--ignore-rust-version",
            ),
            *values("--precise", example="1.0.0"),
            aliases=("up",),
        ),
        _cargo(
            "add",
            _BUILDS,
            *_CARGO_MANIFEST,
            *_CARGO_SOURCE,
            *values("--registry", example="crates-io"),
            *flags(
                "--dev",
                "--build",
                "--optional",
                "--no-optional",
                "--public",
                "--no-public",
                "--default-features",
                "--no-default-features",
                "--ignore-rust-version",
                "-n --dry-run",
            ),
            *values("--rename", "--base", "--target", "-F --features", "-p --package", example="x"),
        ),
        _cargo(
            "remove",
            frozenset({_NETWORK, _WRITE}),
            *_CARGO_MANIFEST,
            *flags("--dev", "--build", "-n --dry-run"),
            *values("--target", "-p --package", example="x"),
            aliases=("rm",),
        ),
        _cargo(
            "clean",
            frozenset({_DELETE, _CODE}),
            *_CARGO_MANIFEST,
            *flags("-r --release", "--doc", "-n --dry-run", "--workspace"),
            *values("-p --package", "--target", "--profile", example="p"),
            does(
                "--target-dir",
                _DELETE,
                "deletes the named directory",
                takes=Takes.VALUE,
                example="target",
            ),
            actions=DELETE,
        ),
        # rustfmt rewrites the sources (not with --check); words after `--` are rustfmt's
        # own options.
        Program(
            "fmt",
            manual="cargo-fmt, rustfmt 1.9.0 (cargo 1.95.0), `cargo fmt --help`",
            effects=frozenset({_WRITE, _CODE}),
            operand_effect=Effect.UNKNOWN,
            options=(
                *flags("--all", "-v --verbose", "-q --quiet", "--version", "-h --help"),
                *_CARGO_MANIFEST,
                *values("-p --package", "--message-format", example="p"),
                *flags("--check"),
            ),
        ),
        _cargo(
            "search",
            frozenset({_NETWORK, _WRITE}),
            *_CARGO_REGISTRY,
            *values("--limit", example="1"),
        ),
        _cargo(
            "install",
            _BUILDS,
            *_CARGO_SOURCE,
            *_CARGO_REGISTRY,
            *_CARGO_FEATURES,
            *flags(
                "--list",
                "-f --force",
                "-n --dry-run",
                "--keep-going",
                "--timings",
                "--no-track",
                "--bins",
                "--examples",
                "--debug",
                "--ignore-rust-version",
            ),
            *values(
                "--version",
                "--bin",
                "--example",
                "--profile",
                "--target",
                "--message-format",
                "-j --jobs",
                example="1",
            ),
            does(
                "--root",
                _WRITE,
                "installs into the named directory",
                takes=Takes.VALUE,
                example=".",
            ),
            does(
                "--target-dir",
                _WRITE,
                "writes build output to the named directory",
                takes=Takes.VALUE,
                example="target",
            ),
        ),
        _cargo(
            "uninstall",
            frozenset({_DELETE}),
            *values("-p --package", "--bin", example="p"),
            does(
                "--root",
                _DELETE,
                "uninstalls from the named directory",
                takes=Takes.VALUE,
                example=".",
            ),
            actions=DELETE,
        ),
        _cargo(
            "package",
            _BUILDS,
            *_CARGO_BUILD_BASE,
            *_CARGO_SELECTED,
            *_CARGO_REGISTRY,
            *_CARGO_KEEP_GOING,
            *values("--message-format", example="human"),
            *flags(
                "-l --list", "--no-verify", "--no-metadata", "--allow-dirty", "--exclude-lockfile"
            ),
        ),
        _cargo(
            "publish",
            _BUILDS,
            *_CARGO_BUILD_BASE,
            *_CARGO_SELECTED,
            *_CARGO_REGISTRY,
            *_CARGO_KEEP_GOING,
            *flags("-n --dry-run", "--no-verify", "--allow-dirty"),
        ),
        _cargo(
            "new",
            frozenset({_WRITE}),
            *flags("--bin", "--lib"),
            *values("--edition", "--name", "--registry", example="2021"),
            _CARGO_VCS,
        ),
        _cargo(
            "init",
            frozenset({_WRITE}),
            *flags("--bin", "--lib"),
            *values("--edition", "--name", "--registry", example="2021"),
            _CARGO_VCS,
        ),
        _cargo(
            "vendor",
            frozenset({_NETWORK, _WRITE, _DELETE}),
            *_CARGO_MANIFEST,
            *flags("--no-delete", "--respect-source-config", "--versioned-dirs"),
            *values("-s --sync", example="Cargo.toml"),
        ),
    ),
)

# ---------------------------------------------------------------------------- test runners

# pytest is not listed: plugins add options of their own (`-n` from xdist, `--cov`), so no
# table can know its options; a family naming it (`Bash(pytest:*)`) covers it as an opaque
# program, with any arguments, as before.

# ---------------------------------------------------------------------------- interpreters

PYTHON = Program(
    "python",
    manual="python(1), Python 3.11.7, COMMAND LINE OPTIONS; `python3 --help`",
    effects=_RUNS,
    style=Style.POSIX,
    options=(
        *flags(
            "-b",
            "-B",
            "-d",
            "-E",
            "-h -? --help",
            "--help-env",
            "--help-xoptions",
            "--help-all",
            "-i",
            "-I",
            "-O",
            "-P",
            "-q",
            "-s",
            "-S",
            "-u",
            "-v",
            "-V --version",
            "-x",
        ),
        *values("-W", example="error"),
        *values("-X", example="dev"),
        *values("--check-hash-based-pycs", example="default"),
        does(
            "-c",
            _CODE,
            "runs the given program text",
            takes=Takes.VALUE,
            example="pass",
            ends_options=True,
        ),
        does(
            "-m",
            _CODE,
            "runs the named module as a script",
            takes=Takes.VALUE,
            example="this",
            ends_options=True,
        ),
    ),
)

NODE = Program(
    "node",
    manual="node(1), Node.js v20.20.2, OPTIONS; `node --help`",
    effects=_RUNS,
    style=Style.POSIX,
    negatable=True,
    aliases=("nodejs",),
    options=(
        *flags(
            "-h --help",
            "-v --version",
            "-c --check",
            "-i --interactive",
            "--abort-on-uncaught-exception",
            "--enable-source-maps",
            "--expose-gc",
            "--frozen-intrinsics",
            "--jitless",
            "--no-deprecation",
            "--no-warnings",
            "--no-addons",
            "--no-global-search-paths",
            "--pending-deprecation",
            "--preserve-symlinks",
            "--preserve-symlinks-main",
            "--throw-deprecation",
            "--trace-deprecation",
            "--trace-warnings",
            "--trace-uncaught",
            "--trace-exit",
            "--trace-sigint",
            "--trace-sync-io",
            "--trace-promises",
            "--track-heap-objects",
            "--zero-fill-buffers",
            "--use-bundled-ca",
            "--use-openssl-ca",
            "--v8-options",
            "--experimental-permission",
            "--experimental-vm-modules",
            "--experimental-test-coverage",
            "--allow-addons",
            "--allow-child-process",
            "--allow-wasi",
            "--allow-worker",
            "--test",
            "--test-only",
            "--test-force-exit",
            "--watch",
            "--watch-preserve-output",
        ),
        *values(
            "-C --conditions",
            "--disable-proto",
            "--disable-warning",
            "--dns-result-order",
            "--input-type",
            "--max-http-header-size",
            "--test-concurrency",
            "--test-name-pattern",
            "--test-shard",
            "--test-timeout",
            "--title",
            "--unhandled-rejections",
            "--experimental-default-type",
            example="1",
        ),
        *values("--watch-path", "--allow-fs-read", "--allow-fs-write", "--env-file", example="."),
        *attached("--max-old-space-size", example="512"),
        does("-e --eval", _CODE, "runs the given program text", takes=Takes.VALUE, example="0"),
        does(
            "-p --print",
            _CODE,
            "runs the given program text and prints its value",
            takes=Takes.VALUE,
            example="0",
        ),
        does("-r --require", _CODE, "loads the named module first", takes=Takes.VALUE, example="x"),
        does("--import", _CODE, "loads the named module first", takes=Takes.VALUE, example="x"),
        does(
            "--loader --experimental-loader",
            _CODE,
            "loads the named module as a loader",
            takes=Takes.VALUE,
            example="x",
        ),
        does(
            "--test-reporter",
            _CODE,
            "loads the named reporter module",
            takes=Takes.VALUE,
            example="spec",
        ),
        does(
            "--openssl-config",
            _CODE,
            "loads the OpenSSL configuration, which can load engines and providers",
            takes=Takes.VALUE,
            example="openssl.cnf",
        ),
        *_each(
            "--inspect --inspect-brk --inspect-wait",
            _NETWORK,
            "listens for a debugger on a port",
            takes=Takes.ATTACHED,
            example="9229",
        ),
        does(
            "--inspect-port --debug-port",
            _NETWORK,
            "listens for a debugger on the port",
            takes=Takes.VALUE,
            example="9229",
        ),
        *_each("--cpu-prof --heap-prof --prof", _WRITE, "writes profiles to files"),
        *_each(
            "--report-on-fatalerror --report-on-signal --report-uncaught-exception",
            _WRITE,
            "writes diagnostic reports to files",
        ),
        *_each(
            "--cpu-prof-dir --heap-prof-dir --diagnostic-dir",
            _WRITE,
            "writes profiles or reports into the named directory",
            takes=Takes.VALUE,
            example="out",
        ),
        does(
            "--report-dir --report-directory",
            _WRITE,
            "writes reports into the named directory",
            takes=Takes.VALUE,
            example="out",
        ),
        *_each(
            "--cpu-prof-name --heap-prof-name --report-filename --redirect-warnings "
            "--test-reporter-destination --tls-keylog",
            _WRITE,
            "writes to the named file",
            takes=Takes.VALUE,
            example="out.txt",
        ),
    ),
)

PERL = Program(
    "perl",
    manual="perl(1) and perlrun(1), Perl 5.36.0, `perl -h`",
    effects=_RUNS,
    style=Style.POSIX,
    options=(
        *flags(
            "-a",
            "-c",
            "-f",
            "-n",
            "-p",
            "-s",
            "-S",
            "-t",
            "-T",
            "-u",
            "-U",
            "-v",
            "-w",
            "-W",
            "-X",
            "-h --help",
            "--version",
        ),
        *values("-I", example="lib"),
        *attached("-0", "-l", "-C", example="0"),
        *attached("-F", example=":"),
        *attached("-V", example=":version"),
        *attached("-D", example="1"),
        *attached("-x", example="."),
        does("-e", _CODE, "runs the given program text", takes=Takes.VALUE, example="1"),
        does("-E", _CODE, "runs the given program text", takes=Takes.VALUE, example="1"),
        *_each("-M -m", _CODE, "loads the named module", takes=Takes.ATTACHED, example="strict"),
        does(
            "-d",
            _CODE,
            "runs the program under a debugger module",
            takes=Takes.ATTACHED,
            example=":Trace",
        ),
        does(
            "-i", _WRITE, "edits the files it reads in place", takes=Takes.ATTACHED, example=".bak"
        ),
    ),
)

RUBY = Program(
    "ruby",
    manual="ruby(1), Ruby 3.3, OPTIONS (docs.ruby-lang.org)",
    effects=_RUNS,
    style=Style.POSIX,
    options=(
        *flags(
            "-a",
            "-c",
            "-l",
            "-n",
            "-p",
            "-s",
            "-S",
            "-w",
            "-y --yydebug",
            "-d --debug",
            "-v --verbose",
            "-h --help",
            "--version",
            "--copyright",
            "--jit",
            "--yjit",
        ),
        *values("-C", "-X", "-I", example="."),
        *values("-E --encoding", "--external-encoding", "--internal-encoding", example="UTF-8"),
        *attached("-0", "-W", example="0"),
        *attached("-F", example=":"),
        *attached("-x", "-K", example=""),
        *attached("--enable", "--disable", example="gems"),
        does("-e", _CODE, "runs the given program text", takes=Takes.VALUE, example="0"),
        does("-r", _CODE, "loads the named library", takes=Takes.VALUE, example="json"),
        does(
            "-i", _WRITE, "edits the files it reads in place", takes=Takes.ATTACHED, example=".bak"
        ),
    ),
)

# ------------------------------------------------------------------------------- wrappers

XARGS = Program(
    "xargs",
    manual="xargs(1), GNU findutils 4.9.0, OPTIONS",
    effects=_RUNS,
    style=Style.POSIX,
    # Not Operands.COMMAND: words read from its input are appended to the command, and they
    # may be its options, so the command's words are no reading of what runs.
    options=(
        *flags(
            "-0 --null",
            "-o --open-tty",
            "-p --interactive",
            "-r --no-run-if-empty",
            "--show-limits",
            "-t --verbose",
            "-x --exit",
            "--help",
            "--version",
        ),
        *values("-a --arg-file", example="args.txt"),
        *values("-d --delimiter", example=","),
        *values("-E", example="END"),
        *values("-I", example="{}"),
        *values("-L --max-lines", "-n --max-args", "-P --max-procs", "-s --max-chars", example="1"),
        *attached("-e --eof", "-i --replace", example="x"),
        *attached("-l", example="1"),
        does(
            "--process-slot-var",
            _CODE,
            "sets the named environment variable in the command's environment",
            takes=Takes.VALUE,
            example="SLOT",
        ),
    ),
)

_SIGNALS = attached("--block-signal", "--default-signal", "--ignore-signal", example="PIPE")

ENV = Program(
    "env",
    manual="env(1), GNU coreutils 9.1; coreutils manual §23.2 env: Run a command in a "
    "modified environment",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    assignments=True,
    options=(
        *flags(
            "-i --ignore-environment",
            "-0 --null",
            "--list-signal-handling",
            "-v --debug",
            "--help",
            "--version",
        ),
        *_SIGNALS,
        *values("-u --unset", example="X"),
        *values("-C --chdir", example="."),
        # The string is split into the command it runs: callgate does not read it, and a deny
        # family naming an action sees it as doing that action.
        Option(
            ("-S", "--split-string"),
            Takes.VALUE,
            Effect.UNKNOWN,
            "splits the string into a command and runs it",
            example="true",
            actions=DELETE | HTTP | PERMISSIONS,
        ),
    ),
)

TIMEOUT = Program(
    "timeout",
    manual="timeout(1), GNU coreutils 9.1; coreutils manual §23.6 timeout: Run a command with "
    "a time limit",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    leading_operands=1,
    options=(
        *flags("--preserve-status", "--foreground", "-v --verbose", "--help", "--version"),
        *values("-k --kill-after", example="1"),
        *values("-s --signal", example="KILL"),
    ),
)

NICE = Program(
    "nice",
    manual="nice(1), GNU coreutils 9.1; coreutils manual §23.3 nice: Run a command with "
    "modified niceness",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    numeric_flags=True,
    options=(*flags("--help", "--version"), *values("-n --adjustment", example="5")),
)

NOHUP = Program(
    "nohup",
    manual="nohup(1), GNU coreutils 9.1; coreutils manual §23.4 nohup: Run a command immune "
    "to hangups (nohup.out is written only when standard output is a terminal; callgate "
    "runs commands on pipes)",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    options=flags("--help", "--version"),
)

STDBUF = Program(
    "stdbuf",
    manual="stdbuf(1), GNU coreutils 9.1; coreutils manual §23.5 stdbuf: Run a command with "
    "modified I/O stream buffering",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    options=(
        *flags("--help", "--version"),
        *values("-i --input", "-o --output", "-e --error", example="L"),
    ),
)

IONICE = Program(
    "ionice",
    manual="ionice(1), util-linux 2.38.1, OPTIONS",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    options=(
        *flags("-t --ignore", "-h --help", "-V --version"),
        *values("-c --class", "-n --classdata", example="2"),
        does(
            "-p --pid",
            Effect.UNKNOWN,
            "changes the I/O scheduling of running processes; its operands are then ids",
            takes=Takes.VALUE,
        ),
        does(
            "-P --pgid",
            Effect.UNKNOWN,
            "changes the I/O scheduling of process groups; its operands are then ids",
            takes=Takes.VALUE,
        ),
        does(
            "-u --uid",
            Effect.UNKNOWN,
            "changes the I/O scheduling of a user's processes; its operands are then ids",
            takes=Takes.VALUE,
        ),
    ),
)

SETSID = Program(
    "setsid",
    manual="setsid(1), util-linux 2.38.1, OPTIONS",
    effects=_RUNS,
    style=Style.POSIX,
    operands=Operands.COMMAND,
    options=flags("-c --ctty", "-f --fork", "-w --wait", "-h --help", "-V --version"),
)

COMMAND = Program(
    "command",
    manual="bash(1), GNU Bash 5.2, SHELL BUILTIN COMMANDS: command; `help command`",
    effects=_RUNS,
    style=Style.POSIX,
    # Operands.FILES: with -v or -V the operands are names looked up, not a command, and a
    # reading cannot switch between the two.
    options=(
        *flags("-p"),
        mode("-v", _READ),
        mode("-V", _READ),
    ),
)

PROGRAMS: tuple[Program, ...] = (
    MAKE,
    NPM,
    NPX,
    PNPM,
    YARN,
    UV,
    PIP,
    CARGO,
    PYTHON,
    NODE,
    PERL,
    RUBY,
    XARGS,
    ENV,
    TIMEOUT,
    NICE,
    NOHUP,
    STDBUF,
    IONICE,
    SETSID,
    COMMAND,
)
