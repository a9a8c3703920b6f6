"""Table: programs that list, read, copy, move and delete files (GNU coreutils and friends),
and the small programs that report on the system and the session (id, uname, date, …).

Each entry cites the manual its options were read from: the installed program's `--help`
(Debian 12: GNU coreutils 9.1, diffutils 3.8, file 5.44, util-linux 2.38.1, tree 2.1.0) and
the program's manual. Options not listed are unknown: a family never covers them (they need an
exact rule or a human). Options that only change what is read or printed are listed as plain
flags and values even on entries that write (`cp -v`): the entry's own effects say what it
does.
"""

from __future__ import annotations

from .build import DELETE, PERMISSIONS, attached, does, flags, values
from .model import Effect, Program, Style, Takes

_COREUTILS = "GNU coreutils 9.1; coreutils manual"
_HELP_VERSION = flags("--help", "--version")

# ---------------------------------------------------------------- listing and reading

LS = Program(
    "ls",
    manual=f"ls(1), {_COREUTILS} §10.1 ls: List directory contents",
    options=(
        *flags(
            "-a --all",
            "-A --almost-all",
            "--author",
            "-b --escape",
            "-B --ignore-backups",
            "-c",
            "-C",
            "-d --directory",
            "-D --dired",
            "-f",
            "-F",
            "--file-type",
            "--full-time",
            "-g",
            "--group-directories-first",
            "-G --no-group",
            "-h --human-readable",
            "--si",
            "-H --dereference-command-line",
            "--dereference-command-line-symlink-to-dir",
            "-i --inode",
            "-k --kibibytes",
            "-l",
            "-L --dereference",
            "-m",
            "-n --numeric-uid-gid",
            "-N --literal",
            "-o",
            "-p",
            "-q --hide-control-chars",
            "--show-control-chars",
            "-Q --quote-name",
            "-r --reverse",
            "-R --recursive",
            "-s --size",
            "-S",
            "-t",
            "-u",
            "-U",
            "-v",
            "-x",
            "-X",
            "-Z --context",
            "-1",
            "--zero",
            "--help",
            "--version",
        ),
        # Examples that ls accepts, so the ground-truth check runs each option for real.
        *values("--block-size", example="K"),
        *values("--format", example="long"),
        *values("--hide", "-I --ignore", example="*.txt"),
        *values("--indicator-style", example="slash"),
        *values("--quoting-style", example="literal"),
        *values("--sort", example="size"),
        *values("--time", example="ctime"),
        *values("--time-style", example="iso"),
        *values("-T --tabsize", "-w --width", example="8"),
        *attached("--color --colour", "--hyperlink", "--classify"),
    ),
)

CAT = Program(
    "cat",
    manual=f"cat(1), {_COREUTILS} §3.1 cat: Concatenate and write files",
    options=flags(
        "-A --show-all",
        "-b --number-nonblank",
        "-e",
        "-E --show-ends",
        "-n --number",
        "-s --squeeze-blank",
        "-t",
        "-T --show-tabs",
        "-u",
        "-v --show-nonprinting",
        "--help",
        "--version",
    ),
)

TAC = Program(
    "tac",
    manual=f"tac(1), {_COREUTILS} §3.2 tac: Concatenate and write files in reverse",
    options=(
        *flags("-b --before", "-r --regex", "--help", "--version"),
        *values("-s --separator", example=","),
    ),
)

NL = Program(
    "nl",
    manual=f"nl(1), {_COREUTILS} §3.3 nl: Number lines and write files",
    options=(
        *flags("-p --no-renumber", "--help", "--version"),
        *values(
            "-b --body-numbering",
            "-f --footer-numbering",
            "-h --header-numbering",
            example="a",
        ),
        *values("-d --section-delimiter", example="::"),
        *values("-n --number-format", example="rz"),
        *values("-s --number-separator", example=":"),
        *values(
            "-i --line-increment",
            "-l --join-blank-lines",
            "-v --starting-line-number",
            "-w --number-width",
            example="2",
        ),
    ),
)

OD = Program(
    "od",
    manual=f"od(1), {_COREUTILS} §3.4 od: Write files in octal or other formats",
    options=(
        *flags(
            "-v --output-duplicates",
            "--traditional",
            "-a",
            "-b",
            "-c",
            "-d",
            "-f",
            "-i",
            "-l",
            "-o",
            "-s",
            "-x",
            "--help",
            "--version",
        ),
        *values("-A --address-radix", example="x"),
        *values("--endian", example="little"),
        *values("-j --skip-bytes", "-N --read-bytes", "-S", example="4"),
        *values("-t --format", example="x1"),
        # `-w[BYTES]` and `--strings[=BYTES]` take an optional value; `-S BYTES` a required one.
        *attached("-w --width", "--strings", example="8"),
    ),
)


def _basenc(name: str, section: str, extra: tuple[str, ...] = ()) -> Program:
    """base32, base64 and basenc: encode or decode to standard output only."""
    return Program(
        name,
        manual=f"{name}(1), {_COREUTILS} {section}",
        options=(
            *flags("-d --decode", "-i --ignore-garbage", *extra, "--help", "--version"),
            *values("-w --wrap", example="76"),
        ),
    )


BASE32 = _basenc("base32", "§3.5 base32: Transform data into printable data")
BASE64 = _basenc("base64", "§3.6 base64: Transform data into printable data")
BASENC = _basenc(
    "basenc",
    "§3.7 basenc: Transform data into printable data",
    (
        "--base64",
        "--base64url",
        "--base32",
        "--base32hex",
        "--base16",
        "--base2msbf",
        "--base2lsbf",
        "--z85",
    ),
)

HEAD = Program(
    "head",
    manual=f"head(1), {_COREUTILS} §5.1 head: Output the first part of files",
    numeric_flags=True,
    options=(
        *flags(
            "-q --quiet --silent",
            "-v --verbose",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        *values("-c --bytes", "-n --lines", example="3"),
    ),
)

TAIL = Program(
    "tail",
    manual=f"tail(1), {_COREUTILS} §5.2 tail: Output the last part of files",
    numeric_flags=True,
    options=(
        # -f/--follow and -F never end on their own, but only read: the caller's time limit
        # ends them.
        *flags(
            "-f",
            "-F",
            "-q --quiet --silent",
            "--retry",
            "-v --verbose",
            "-z --zero-terminated",
            "--help",
            "--version",
        ),
        *attached("--follow", example="name"),
        *values("-c --bytes", "-n --lines", "--max-unchanged-stats", example="3"),
        *values("-s --sleep-interval", example="0.5"),
        *values("--pid", example="1"),
    ),
)

WC = Program(
    "wc",
    manual=f"wc(1), {_COREUTILS} §6.1 wc: Print newline, word, and byte counts",
    options=(
        *flags(
            "-c --bytes",
            "-m --chars",
            "-l --lines",
            "-L --max-line-length",
            "-w --words",
            "--help",
            "--version",
        ),
        # Reads the names of the files to count from a file.
        *values("--files0-from", example="names"),
    ),
)

SUM = Program(
    "sum",
    manual=f"sum(1), {_COREUTILS} §6.2 sum: Print checksum and block counts",
    options=flags("-r", "-s --sysv", "--help", "--version"),
)

_DIGEST_FLAGS = (
    "-c --check",
    "--ignore-missing",
    "--quiet",
    "--status",
    "--strict",
    "--tag",
    "-w --warn",
    "-z --zero",
    "--help",
    "--version",
)

CKSUM = Program(
    "cksum",
    manual=f"cksum(1), {_COREUTILS} §6.3 cksum: Print and verify file checksums",
    options=(
        *flags(*_DIGEST_FLAGS, "--untagged", "--debug"),
        *values("-a --algorithm", example="sha256"),
        *values("-l --length", example="256"),
    ),
)


def _digest(name: str, section: str, *, length: bool = False) -> Program:
    """md5sum, sha*sum, b2sum: print or check digests; `-c` reads the checksum files named."""
    return Program(
        name,
        manual=f"{name}(1), {_COREUTILS} {section}",
        options=(
            *flags(*_DIGEST_FLAGS, "-b --binary", "-t --text"),
            *(values("-l --length", example="256") if length else ()),
        ),
    )


B2SUM = _digest("b2sum", "§6.4 b2sum: Print or check BLAKE2 digests", length=True)
MD5SUM = _digest("md5sum", "§6.5 md5sum: Print or check MD5 digests")
SHA1SUM = _digest("sha1sum", "§6.6 sha1sum: Print or check SHA-1 digests")
SHA2SUMS = tuple(
    _digest(f"sha{bits}sum", "§6.7 sha2 utilities: Print or check SHA-2 digests")
    for bits in (224, 256, 384, 512)
)

DIFF = Program(
    "diff",
    manual="diff(1), GNU diffutils 3.8; diffutils manual §13 Invoking diff, §13.1 Options to diff",
    numeric_flags=True,
    options=(
        *flags(
            "--normal",
            "-q --brief",
            "-s --report-identical-files",
            "-c",
            "-u",
            "-e --ed",
            "-f --forward-ed",
            "-n --rcs",
            "-y --side-by-side",
            "--left-column",
            "--suppress-common-lines",
            "-p --show-c-function",
            "-t --expand-tabs",
            "-T --initial-tab",
            "--suppress-blank-empty",
            # Pipes the output through the fixed program /usr/bin/pr, which only paginates.
            "-l --paginate",
            "-r --recursive",
            "--no-dereference",
            "-N --new-file",
            "--unidirectional-new-file",
            "--ignore-file-name-case",
            "--no-ignore-file-name-case",
            "-i --ignore-case",
            "-E --ignore-tab-expansion",
            "-Z --ignore-trailing-space",
            "-b --ignore-space-change",
            "-w --ignore-all-space",
            "-B --ignore-blank-lines",
            "-a --text",
            "--binary",
            "--strip-trailing-cr",
            "-d --minimal",
            "--speed-large-files",
            "--help",
            "-v --version",
        ),
        *values("-C", "-U", "-W --width", "--tabsize", "--horizon-lines", example="3"),
        *attached("--context", "--unified", example="3"),
        *values(
            "-F --show-function-line",
            "-I --ignore-matching-lines",
            "-x --exclude",
            "-D --ifdef",
            example="x",
        ),
        *values("-L --label", example="old"),
        *values(
            "--old-group-format",
            "--new-group-format",
            "--changed-group-format",
            "--unchanged-group-format",
            "--line-format",
            "--old-line-format",
            "--new-line-format",
            "--unchanged-line-format",
            example="%L",
        ),
        # Files that are only read: patterns, the start of a directory walk, a file compared
        # with every operand.
        *values(
            "-X --exclude-from",
            "-S --starting-file",
            "--from-file",
            "--to-file",
            example="notes.txt",
        ),
        *attached("--color", example="never"),
        *values("--palette", example="ad=1"),
    ),
)

CMP = Program(
    "cmp",
    manual="cmp(1), GNU diffutils 3.8; diffutils manual §12 Invoking cmp, §12.1 Options to cmp",
    options=(
        *flags(
            "-b --print-bytes",
            "-l --verbose",
            "-s --quiet --silent",
            "--help",
            "-v --version",
        ),
        *values("-i --ignore-initial", "-n --bytes", example="1"),
    ),
)

STAT = Program(
    "stat",
    manual=f"stat(1), {_COREUTILS} §14.3 stat: Report file or file system status",
    options=(
        *flags("-L --dereference", "-f --file-system", "-t --terse", "--help", "--version"),
        *values("--cached", example="never"),
        *values("-c --format", "--printf", example="%n"),
    ),
)

DU = Program(
    "du",
    manual=f"du(1), {_COREUTILS} §14.2 du: Estimate file space usage",
    options=(
        *flags(
            "-0 --null",
            "-a --all",
            "--apparent-size",
            "-b --bytes",
            "-c --total",
            "-D --dereference-args",
            "-H",
            "-h --human-readable",
            "--inodes",
            "-k",
            "-L --dereference",
            "-l --count-links",
            "-m",
            "-P --no-dereference",
            "-S --separate-dirs",
            "--si",
            "-s --summarize",
            "-x --one-file-system",
            "--help",
            "--version",
        ),
        *values("-B --block-size", "-t --threshold", example="1K"),
        *values("-d --max-depth", example="1"),
        *values("--time-style", example="iso"),
        *values("--exclude", example="*.o"),
        # Read the names to measure, and the patterns to skip, from files.
        *values("--files0-from", "-X --exclude-from", example="names"),
        *attached("--time", example="atime"),
    ),
)

DF = Program(
    "df",
    manual=f"df(1), {_COREUTILS} §14.1 df: Report file system space usage",
    options=(
        *flags(
            "-a --all",
            "-h --human-readable",
            "-H --si",
            "-i --inodes",
            "-k",
            "-l --local",
            "--no-sync",
            "-P --portability",
            # sync(2) flushes the kernel's caches; it writes no file.
            "--sync",
            "--total",
            "-T --print-type",
            "-v",
            "--help",
            "--version",
        ),
        *values("-B --block-size", example="1M"),
        *values("-t --type", "-x --exclude-type", example="tmpfs"),
        *attached("--output", example="source,size"),
    ),
)

FILE = Program(
    "file",
    manual="file(1), file 5.44 (file --help; man page OPTIONS)",
    options=(
        *flags(
            "-b --brief",
            "-c --checking-printout",
            "-i --mime",
            "--apple",
            "--extension",
            "--mime-type",
            "--mime-encoding",
            "-k --keep-going",
            "-l --list",
            "-L --dereference",
            "-h --no-dereference",
            "-n --no-buffer",
            "-N --no-pad",
            "-0 --print0",
            "-r --raw",
            "-s --special-files",
            "-S --no-sandbox",
            "-d --debug",
            "--help",
            "-v --version",
        ),
        # Magic files and the list of names are only read.
        *values("-m --magic-file", "-f --files-from", example="names"),
        *values("-e --exclude", "--exclude-quiet", example="elf"),
        *values("-F --separator", example=":"),
        *values("-P --parameter", example="bytes=1024"),
        does(
            "-C --compile",
            Effect.WRITE,
            "writes the compiled magic file (NAME.mgc) into the current directory",
        ),
        does(
            "-p --preserve-date",
            Effect.WRITE,
            "sets the access and modification times of the files it reads",
        ),
        does(
            "-z --uncompress",
            Effect.CODE,
            "runs decompression programs (gzip, bzip2, xz, zstd, …) on compressed files",
        ),
        does(
            "-Z --uncompress-noreport",
            Effect.CODE,
            "runs decompression programs (gzip, bzip2, xz, zstd, …) on compressed files",
        ),
    ),
)

TREE = Program(
    "tree",
    manual="tree(1), tree 2.1.0 (Debian 12; options as parsed by tree.c main, which takes a "
    "short option's value from the next word even inside a cluster)",
    short_values_follow=True,
    options=(
        *flags(
            "-a",
            "-d",
            "-l",
            "-f",
            "-x",
            "-q",
            "-N",
            "-Q",
            "-p",
            "-u",
            "-g",
            "-s",
            "-h",
            "-D",
            "-F",
            "-i",
            "-A",
            "-S",
            "-n",
            "-C",
            "-t",
            "-c",
            "-r",
            "-v",
            "-U",
            "-X",
            "-J",
            "--inodes",
            "--device",
            "--noreport",
            "--nolinks",
            "--dirsfirst",
            "--filesfirst",
            "--si",
            "--du",
            "--prune",
            "--ignore-case",
            "--matchdirs",
            "--fromfile",
            "--metafirst",
            "--gitignore",
            "--info",
            "--fflinks",
            "--help",
            "--version",
        ),
        *values("-L", "--filelimit", example="2"),
        *values("-P", "-I", example="*.py"),
        *values("-H", example="."),
        *values("-T", example="listing"),
        *values("--charset", example="UTF-8"),
        *values("--timefmt", example="%F"),
        *values("--sort", example="name"),
        # Files that are only read: gitignore and .info files, HTML intro and outro.
        *values("--gitfile", "--infofile", "--hintro", "--houtro", example="notes.txt"),
        does(
            "-o",
            Effect.WRITE,
            "writes the listing to the named file",
            takes=Takes.VALUE,
            example="out.txt",
        ),
        does(
            "-R",
            Effect.WRITE,
            "writes a 00Tree.html listing into every directory below the -L depth",
        ),
    ),
)

XXD = Program(
    "xxd",
    manual="xxd(1), xxd 2022-01-14 (vim 9.0; xxd -h): `xxd [options] [infile [outfile]]`, "
    "options only before the first operand, each option known by its first letter",
    style=Style.POSIX,
    # `xxd INFILE OUTFILE` writes OUTFILE (a dump, or with -r the reverted bytes).
    max_read_operands=1,
    covers="xxd with at most one operand (never `xxd INFILE OUTFILE`, which writes OUTFILE)",
    options=(
        # xxd reads a flag from the first letter of the word and ignores the rest (`-ps`,
        # `-autoskip`): an optional attached value models that.
        *attached("-a", "-b", "-C", "-d", "-E", "-e", "-h", "-i", "-p", "-r", "-u", "-v"),
        # Values: attached (`-c8`) or the next word (`-c 8`).
        *values("-c", "-g", "-l", "-o", "-s", example="8"),
        *values("-n", example="data"),
    ),
)

HEXDUMP = Program(
    "hexdump",
    manual="hexdump(1), util-linux 2.38.1 (hexdump --help)",
    options=(
        *flags(
            "-b --one-byte-octal",
            "-c --one-byte-char",
            "-C --canonical",
            "-d --two-bytes-decimal",
            "-o --two-bytes-octal",
            "-x --two-bytes-hex",
            "-v --no-squeezing",
            "-h --help",
            "-V --version",
        ),
        *attached("-L --color", example="never"),
        *values("-e --format", example="16/1 %02x"),
        # The format file is only read.
        *values("-f --format-file", example="notes.txt"),
        *values("-n --length", "-s --skip", example="16"),
    ),
)

STRINGS = Program(
    "strings",
    manual="strings(1), GNU Binutils 2.40 (strings --help); binutils manual, strings. An "
    "`@FILE` operand reads more options (all read-only) from FILE",
    numeric_flags=True,
    options=(
        *flags(
            "-a --all",
            "-d --data",
            "-f --print-file-name",
            "-w --include-all-whitespace",
            "-o",
            "-h --help",
            "-v -V --version",
        ),
        *values("-n --bytes", example="8"),
        *values("-t --radix", example="x"),
        *values("-T --target", example="elf64-x86-64"),
        *values("-e --encoding", example="s"),
        *values("--unicode", "-U", example="escape"),
        *values("-s --output-separator", example=","),
    ),
)

# less and more run shell commands (`!cmd`, `|`), start an editor (`v`) and read commands
# from the terminal; less also writes its history file and runs $LESSOPEN on every file.
LESS = Program(
    "less",
    manual="less(1), less 590 (less --help, OPTIONS); commands `!`, `|` and `v` run programs",
    effects=frozenset({Effect.CODE}),
    options=(
        *flags(
            "-? --help",
            "-a --search-skip-screen",
            "-A --SEARCH-SKIP-SCREEN",
            "-B --auto-buffers",
            "-c --clear-screen",
            "-d --dumb",
            "-e --quit-at-eof",
            "-E --QUIT-AT-EOF",
            "-f --force",
            "-F --quit-if-one-screen",
            "-g --hilite-search",
            "-G --HILITE-SEARCH",
            "-i --ignore-case",
            "-I --IGNORE-CASE",
            "-J --status-column",
            "-K --quit-on-intr",
            "-L --no-lessopen",
            "-m --long-prompt",
            "-M --LONG-PROMPT",
            "-n --line-numbers",
            "-N --LINE-NUMBERS",
            "-q --quiet --silent",
            "-Q --QUIET --SILENT",
            "-r --raw-control-chars",
            "-R --RAW-CONTROL-CHARS",
            "-s --squeeze-blank-lines",
            "-S --chop-long-lines",
            "-u --underline-special",
            "-U --UNDERLINE-SPECIAL",
            "-V --version",
            "-w --hilite-unread",
            "-W --HILITE-UNREAD",
            "-X --no-init",
            "-~ --tilde",
            "--file-size",
            "--follow-name",
            "--incsearch",
            "--mouse",
            "--no-keypad",
            "--no-histdups",
            "--save-marks",
            "--use-backslash",
            "--use-color",
        ),
        *values(
            "-b --buffers",
            "-h --max-back-scroll",
            "-j --jump-target",
            "-x --tabs",
            "-y --max-forw-scroll",
            "-z --window",
            "-# --shift",
            "--line-num-width",
            "--status-col-width",
            "--wheel-lines",
            example="4",
        ),
        *values(
            "-D --color",
            "-p --pattern",
            "-P --prompt",
            "-t --tag",
            '-" --quotes',
            "--rscroll",
            example="x",
        ),
        does(
            "-k --lesskey-file",
            Effect.CODE,
            "reads key bindings, which can run commands",
            takes=Takes.VALUE,
        ),
        *values("-T --tag-file", example="tags"),
        does(
            "-o --log-file",
            Effect.WRITE,
            "copies its input to the named file",
            takes=Takes.VALUE,
            example="out.txt",
        ),
        does(
            "-O --LOG-FILE",
            Effect.WRITE,
            "copies its input to the named file, overwriting it",
            takes=Takes.VALUE,
            example="out.txt",
        ),
    ),
)

MORE = Program(
    "more",
    manual="more(1), util-linux 2.38.1 (more --help); commands `!` and `v` run programs",
    effects=frozenset({Effect.CODE}),
    numeric_flags=True,
    options=(
        *flags(
            "-d --silent",
            "-f --logical",
            "-l --no-pause",
            "-c --print-over",
            "-p --clean-print",
            "-e --exit-on-eof",
            "-s --squeeze",
            "-u --plain",
            "-h --help",
            "-V --version",
        ),
        *values("-n --lines", example="20"),
    ),
)

# ---------------------------------------------------------------- names and context

BASENAME = Program(
    "basename",
    manual=f"basename(1), {_COREUTILS} §18.1 basename: Strip directory and suffix from a file name",
    style=Style.POSIX,
    options=(
        *flags("-a --multiple", "-z --zero", "--help", "--version"),
        *values("-s --suffix", example=".txt"),
    ),
)

DIRNAME = Program(
    "dirname",
    manual=f"dirname(1), {_COREUTILS} §18.2 dirname: Strip last file name component",
    options=flags("-z --zero", "--help", "--version"),
)

REALPATH = Program(
    "realpath",
    manual=f"realpath(1), {_COREUTILS} §18.5 realpath: Print the resolved file name",
    options=(
        *flags(
            "-e --canonicalize-existing",
            "-m --canonicalize-missing",
            "-L --logical",
            "-P --physical",
            "-q --quiet",
            "-s --strip --no-symlinks",
            "-z --zero",
            "--help",
            "--version",
        ),
        *values("--relative-to", "--relative-base", example="."),
    ),
)

READLINK = Program(
    "readlink",
    manual=f"readlink(1), {_COREUTILS} §12.6 readlink: Print value of a symlink or "
    "canonical file name",
    options=flags(
        "-f --canonicalize",
        "-e --canonicalize-existing",
        "-m --canonicalize-missing",
        "-n --no-newline",
        "-q --quiet",
        "-s --silent",
        "-v --verbose",
        "-z --zero",
        "--help",
        "--version",
    ),
)

PWD = Program(
    "pwd",
    manual=f"pwd(1), {_COREUTILS} §19.1 pwd: Print working directory; bash builtin pwd",
    options=flags("-L --logical", "-P --physical", "--help", "--version"),
)

PRINTENV = Program(
    "printenv",
    manual=f"printenv(1), {_COREUTILS} §19.3 printenv: Print all or some environment variables",
    style=Style.POSIX,
    options=flags("-0 --null", "--help", "--version"),
)

TTY = Program(
    "tty",
    manual=f"tty(1), {_COREUTILS} §19.4 tty: Print file name of terminal on standard input",
    options=flags("-s --silent --quiet", "--help", "--version"),
)

ID = Program(
    "id",
    manual=f"id(1), {_COREUTILS} §20.1 id: Print user identity",
    options=flags(
        "-a",
        "-Z --context",
        "-g --group",
        "-G --groups",
        "-n --name",
        "-r --real",
        "-u --user",
        "-z --zero",
        "--help",
        "--version",
    ),
)

LOGNAME = Program(
    "logname",
    manual=f"logname(1), {_COREUTILS} §20.2 logname: Print current login name",
    options=_HELP_VERSION,
)

WHOAMI = Program(
    "whoami",
    manual=f"whoami(1), {_COREUTILS} §20.3 whoami: Print effective user name",
    options=_HELP_VERSION,
)

GROUPS = Program(
    "groups",
    manual=f"groups(1), {_COREUTILS} §20.4 groups: Print group names a user is in",
    options=_HELP_VERSION,
)

DATE = Program(
    "date",
    manual=f"date(1), {_COREUTILS} §21.1 date: Print or set system date and time (Setting "
    "the time; Options for date)",
    # `date +FORMAT` prints; any other operand (`date MMDDhhmm`) sets the clock.
    operand_effect=Effect.UNKNOWN,
    value_prefix="+",
    covers="date to print a date (never -s/--set or a MMDDhhmm operand, which set the clock)",
    options=(
        *flags(
            "--debug",
            "--resolution",
            "-R --rfc-email --rfc-822 --rfc-2822",
            "-u --utc --universal --uct",
            "--help",
            "--version",
        ),
        *values("-d --date", example="yesterday"),
        *values("--rfc-3339", example="seconds"),
        *attached("-I --iso-8601", example="seconds"),
        # Files only read: dates to print, a file whose time is printed.
        *values("-f --file", "-r --reference", example="notes.txt"),
        does(
            "-s --set",
            Effect.UNKNOWN,
            "sets the system clock",
            takes=Takes.VALUE,
            example="2020-01-01",
        ),
    ),
)

ARCH = Program(
    "arch",
    manual=f"arch(1), {_COREUTILS} §21.2 arch: Print machine hardware name",
    options=_HELP_VERSION,
)

NPROC = Program(
    "nproc",
    manual=f"nproc(1), {_COREUTILS} §21.3 nproc: Print the number of available processors",
    options=(*flags("--all", "--help", "--version"), *values("--ignore", example="1")),
)

UNAME = Program(
    "uname",
    manual=f"uname(1), {_COREUTILS} §21.4 uname: Print system information",
    options=flags(
        "-a --all",
        "-s --kernel-name",
        "-n --nodename",
        "-r --kernel-release",
        "-v --kernel-version",
        "-m --machine",
        "-p --processor",
        "-i --hardware-platform",
        "-o --operating-system",
        "--help",
        "--version",
    ),
)

HOSTNAME = Program(
    "hostname",
    manual="hostname(1), hostname 3.23 (Debian; hostname --help)",
    # `hostname NAME` (and `hostname -y NAME`) sets the host (or NIS domain) name.
    operand_effect=Effect.UNKNOWN,
    covers="hostname to print names (never an operand, -F or -b, which set the host name)",
    options=(
        # -f, -A, -d, -i and -a look the host's own name up (the resolver may ask a DNS server,
        # as `ls -l` may ask NSS); they print, and set nothing.
        *flags(
            "-a --alias",
            "-A --all-fqdns",
            "-d --domain",
            "-f --fqdn --long",
            "-i --ip-address",
            "-I --all-ip-addresses",
            "-s --short",
            "-y --yp --nis",
            "-V --version",
            "-h --help",
        ),
        does(
            "-F --file",
            Effect.UNKNOWN,
            "sets the host name from the named file",
            takes=Takes.VALUE,
            example="notes.txt",
        ),
        does("-b --boot", Effect.UNKNOWN, "sets a default host name when none is set"),
    ),
)

WHICH = Program(
    "which",
    manual="which(1), debianutils 5.7 (/usr/bin/which: getopts a)",
    style=Style.POSIX,
    options=flags("-a"),
)

LOCALE = Program(
    "locale",
    manual="locale(1), GNU C Library 2.36 (locale --help)",
    options=flags(
        "-a --all-locales",
        "-m --charmaps",
        "-c --category-name",
        "-k --keyword-name",
        "-v --verbose",
        "-? --help",
        "--usage",
        "-V --version",
    ),
)

# ---------------------------------------------------------------- writing

_BACKUP = (*flags("-b"), *attached("--backup", example="numbered"))

CP = Program(
    "cp",
    manual=f"cp(1), {_COREUTILS} §11.1 cp: Copy files and directories",
    effects=frozenset({Effect.WRITE}),
    options=(
        *_BACKUP,
        *flags(
            "-a --archive",
            "--attributes-only",
            "--copy-contents",
            "-d",
            # -f and --remove-destination replace an existing destination: it is overwritten,
            # which copying does anyway.
            "-f --force",
            "--remove-destination",
            "-i --interactive",
            "-H",
            "-l --link",
            "-L --dereference",
            "-n --no-clobber",
            "-P --no-dereference",
            "-p",
            "--parents",
            "-R -r --recursive",
            "--strip-trailing-slashes",
            "-s --symbolic-link",
            "-T --no-target-directory",
            "-u --update",
            "-v --verbose",
            "-x --one-file-system",
            "-Z",
            "--help",
            "--version",
        ),
        *attached("--preserve", example="mode"),
        *attached("--reflink", example="auto"),
        *attached("--context", example=""),
        *values("--no-preserve", example="mode"),
        *values("--sparse", example="auto"),
        *values("-S --suffix", example="~"),
        *values("-t --target-directory", example="dest"),
    ),
)

DD = Program(
    "dd",
    manual=f"dd(1), {_COREUTILS} §11.2 dd: Convert and copy a file (operands KEY=VALUE: "
    "`of=FILE` writes FILE)",
    effects=frozenset({Effect.WRITE}),
    options=_HELP_VERSION,
)

INSTALL = Program(
    "install",
    manual=f"install(1), {_COREUTILS} §11.3 install: Copy files and set attributes",
    effects=frozenset({Effect.WRITE}),
    options=(
        *_BACKUP,
        *flags(
            "-c",
            "-C --compare",
            "-d --directory",
            "-D",
            "-p --preserve-timestamps",
            "-T --no-target-directory",
            "-v --verbose",
            "--preserve-context",
            "-Z",
            "--help",
            "--version",
        ),
        *attached("--context", example=""),
        *values("-S --suffix", example="~"),
        *values("-t --target-directory", example="dest"),
        does(
            "-m --mode",
            Effect.WRITE,
            "sets the installed files' permission mode",
            takes=Takes.VALUE,
            example="644",
            actions=PERMISSIONS,
        ),
        does(
            "-o --owner",
            Effect.WRITE,
            "sets the installed files' owner",
            takes=Takes.VALUE,
            example="root",
            actions=PERMISSIONS,
        ),
        does(
            "-g --group",
            Effect.WRITE,
            "sets the installed files' group",
            takes=Takes.VALUE,
            example="root",
            actions=PERMISSIONS,
        ),
        does("-s --strip", Effect.CODE, "runs the strip program found on PATH"),
        does(
            "--strip-program",
            Effect.CODE,
            "runs the named program on the installed files",
            takes=Takes.VALUE,
            example="strip",
        ),
    ),
)

# mv renames: the source name goes away and the target, if it exists, is replaced. It is
# a write, not a deletion (no `delete` action): a deny family over rm does not see mv.
MV = Program(
    "mv",
    manual=f"mv(1), {_COREUTILS} §11.4 mv: Move (rename) files",
    effects=frozenset({Effect.WRITE}),
    options=(
        *_BACKUP,
        *flags(
            "-f --force",
            "-i --interactive",
            "-n --no-clobber",
            "--strip-trailing-slashes",
            "-T --no-target-directory",
            "-u --update",
            "-v --verbose",
            "-Z --context",
            "--help",
            "--version",
        ),
        *values("-S --suffix", example="~"),
        *values("-t --target-directory", example="dest"),
    ),
)

RM = Program(
    "rm",
    manual=f"rm(1), {_COREUTILS} §11.5 rm: Remove files or directories",
    effects=frozenset({Effect.DELETE}),
    actions=DELETE,
    options=(
        *flags(
            "-f --force",
            "-i",
            "-I",
            "--one-file-system",
            "--no-preserve-root",
            "--preserve-root",
            "-r -R --recursive",
            "-d --dir",
            "-v --verbose",
            "--help",
            "--version",
        ),
        *attached("--interactive"),
    ),
)

SHRED = Program(
    "shred",
    manual=f"shred(1), {_COREUTILS} §11.6 shred: Remove files more securely",
    effects=frozenset({Effect.WRITE}),
    options=(
        *flags("-v --verbose", "-x --exact", "-z --zero", "--help", "--version"),
        *values("-n --iterations", "-s --size", example="1"),
        *values("--random-source", example="notes.txt"),
        does(
            "-f --force",
            Effect.WRITE,
            "changes the files' permissions to allow writing",
            actions=PERMISSIONS,
        ),
        does("-u", Effect.DELETE, "removes the files after overwriting them", actions=DELETE),
        does(
            "--remove",
            Effect.DELETE,
            "removes the files after overwriting them",
            takes=Takes.ATTACHED,
            example="unlink",
            actions=DELETE,
        ),
    ),
)

LN = Program(
    "ln",
    manual=f"ln(1), {_COREUTILS} §12.2 ln: Make links between files",
    effects=frozenset({Effect.WRITE}),
    options=(
        *_BACKUP,
        *flags(
            "-d -F --directory",
            # Replaces existing destination names with the new links.
            "-f --force",
            "-i --interactive",
            "-L --logical",
            "-n --no-dereference",
            "-P --physical",
            "-r --relative",
            "-s --symbolic",
            "-T --no-target-directory",
            "-v --verbose",
            "--help",
            "--version",
        ),
        *values("-S --suffix", example="~"),
        *values("-t --target-directory", example="dest"),
    ),
)

MKDIR = Program(
    "mkdir",
    manual=f"mkdir(1), {_COREUTILS} §12.3 mkdir: Make directories",
    effects=frozenset({Effect.WRITE}),
    options=(
        *flags("-p --parents", "-v --verbose", "-Z", "--help", "--version"),
        *attached("--context", example=""),
        does(
            "-m --mode",
            Effect.WRITE,
            "sets the new directories' permission mode",
            takes=Takes.VALUE,
            example="755",
            actions=PERMISSIONS,
        ),
    ),
)

RMDIR = Program(
    "rmdir",
    manual=f"rmdir(1), {_COREUTILS} §12.7 rmdir: Remove empty directories",
    effects=frozenset({Effect.DELETE}),
    actions=DELETE,
    options=flags(
        "--ignore-fail-on-non-empty",
        "-p --parents",
        "-v --verbose",
        "--help",
        "--version",
    ),
)

UNLINK = Program(
    "unlink",
    manual=f"unlink(1), {_COREUTILS} §12.8 unlink: Remove files via the unlink syscall",
    effects=frozenset({Effect.DELETE}),
    actions=DELETE,
    options=_HELP_VERSION,
)

_OWNERSHIP = (
    *flags(
        "-c --changes",
        "-f --silent --quiet",
        "-v --verbose",
        "--dereference",
        "-h --no-dereference",
        "--no-preserve-root",
        "--preserve-root",
        "-R --recursive",
        "-H",
        "-L",
        "-P",
        "--help",
        "--version",
    ),
    *values("--reference", example="notes.txt"),
)

CHOWN = Program(
    "chown",
    manual=f"chown(1), {_COREUTILS} §13.1 chown: Change file owner and group",
    effects=frozenset({Effect.WRITE}),
    actions=PERMISSIONS,
    options=(*_OWNERSHIP, *values("--from", example="root")),
)

CHGRP = Program(
    "chgrp",
    manual=f"chgrp(1), {_COREUTILS} §13.2 chgrp: Change group ownership",
    effects=frozenset({Effect.WRITE}),
    actions=PERMISSIONS,
    options=_OWNERSHIP,
)

CHMOD = Program(
    "chmod",
    manual=f"chmod(1), {_COREUTILS} §13.3 chmod: Change access permissions",
    effects=frozenset({Effect.WRITE}),
    actions=PERMISSIONS,
    options=(
        *flags(
            "-c --changes",
            "-f --silent --quiet",
            "-v --verbose",
            "--no-preserve-root",
            "--preserve-root",
            "-R --recursive",
            "--help",
            "--version",
        ),
        *values("--reference", example="notes.txt"),
        # A MODE operand may start with `-` (`chmod -w f`, `chmod -x,u+r f`): chmod's getopt
        # reads such a word as these letters with the rest of the mode attached.
        *attached(
            *(f"-{letter}" for letter in "rwxXstugoa01234567"),
            example="",
        ),
    ),
)

TOUCH = Program(
    "touch",
    manual=f"touch(1), {_COREUTILS} §13.4 touch: Change file timestamps",
    effects=frozenset({Effect.WRITE}),
    options=(
        *flags("-a", "-c --no-create", "-f", "-h --no-dereference", "-m", "--help", "--version"),
        *values("-d --date", example="yesterday"),
        *values("-r --reference", example="notes.txt"),
        *values("-t", example="202001010000"),
        *values("--time", example="mtime"),
    ),
)

TRUNCATE = Program(
    "truncate",
    manual=f"truncate(1), {_COREUTILS} §14.5 truncate: Shrink or extend the size of a file",
    effects=frozenset({Effect.WRITE}),
    options=(
        *flags("-c --no-create", "-o --io-blocks", "--help", "--version"),
        *values("-r --reference", example="notes.txt"),
        *values("-s --size", example="0"),
    ),
)

TEE = Program(
    "tee",
    manual=f"tee(1), {_COREUTILS} §17.1 tee: Redirect output to multiple files or processes",
    effects=frozenset({Effect.WRITE}),
    options=(
        *flags("-a --append", "-i --ignore-interrupts", "-p", "--help", "--version"),
        *attached("--output-error", example="warn"),
    ),
)

SPLIT = Program(
    "split",
    manual=f"split(1), {_COREUTILS} §5.3 split: Split a file into pieces",
    effects=frozenset({Effect.WRITE}),
    numeric_flags=True,
    options=(
        *flags(
            "-d",
            "-x",
            "-e --elide-empty-files",
            "-u --unbuffered",
            "--verbose",
            "--help",
            "--version",
        ),
        *attached("--numeric-suffixes", "--hex-suffixes", example="1"),
        *values("-a --suffix-length", "-b --bytes", "-C --line-bytes", example="3"),
        *values("-l --lines", "-n --number", example="2"),
        *values("--additional-suffix", example=".txt"),
        *values("-t --separator", example=","),
        does(
            "--filter",
            Effect.CODE,
            "runs the shell command for every piece",
            takes=Takes.VALUE,
            example="cat",
        ),
    ),
)

CSPLIT = Program(
    "csplit",
    manual=f"csplit(1), {_COREUTILS} §5.4 csplit: Split a file into context-determined pieces",
    effects=frozenset({Effect.WRITE}),
    options=(
        *flags(
            "-k --keep-files",
            "--suppress-matched",
            "-s --quiet --silent",
            "-z --elide-empty-files",
            "--help",
            "--version",
        ),
        *values("-b --suffix-format", example="%03d"),
        *values("-f --prefix", example="part"),
        *values("-n --digits", example="3"),
    ),
)

# patch writes the files a diff names, and git-style diffs also delete and rename files and
# change their modes: the entry carries the actions of rm and chmod, so deny families over
# either see patch. (Ed-style diffs are applied by running ed; patch 2.7.6 with the
# CVE-2018-1000156 fix checks the ed script first.)
PATCH = Program(
    "patch",
    manual="patch(1), GNU patch 2.7.6 (patch --help); diffutils 3.8 manual §15 Invoking "
    "patch, §10.4 Creating and Removing Files",
    effects=frozenset({Effect.WRITE, Effect.DELETE}),
    actions=DELETE | PERMISSIONS,
    options=(
        *flags(
            "-l --ignore-whitespace",
            "-c --context",
            "-e --ed",
            "-n --normal",
            "-u --unified",
            "-N --forward",
            "-R --reverse",
            "-E --remove-empty-files",
            "-Z --set-utc",
            "-T --set-time",
            "-b --backup",
            "--backup-if-mismatch",
            "--no-backup-if-mismatch",
            "-t --batch",
            "-f --force",
            "-s --quiet --silent",
            "--verbose",
            "--dry-run",
            "--posix",
            "--binary",
            "--follow-symlinks",
            "-v --version",
            "--help",
        ),
        *attached("--merge", example="diff3"),
        *values("-p --strip", "-F --fuzz", "-x --debug", example="1"),
        *values("-i --input", example="fix.patch"),
        *values("-o --output", "-r --reject-file", example="out.txt"),
        *values("-D --ifdef", example="NEW"),
        *values("--quoting-style", example="literal"),
        *values("-V --version-control", example="simple"),
        *values("-B --prefix", "-Y --basename-prefix", example="old/"),
        *values("-z --suffix", example=".orig"),
        *values("-d --directory", example="src"),
        *values("--reject-format", example="unified"),
        *values("--read-only", example="warn"),
        does(
            "-g --get",
            Effect.CODE,
            "with a positive value runs RCS, SCCS or Perforce commands to check files out",
            takes=Takes.VALUE,
            example="1",
        ),
    ),
)

PROGRAMS: tuple[Program, ...] = (
    LS,
    CAT,
    TAC,
    NL,
    OD,
    BASE32,
    BASE64,
    BASENC,
    HEAD,
    TAIL,
    WC,
    SUM,
    CKSUM,
    B2SUM,
    MD5SUM,
    SHA1SUM,
    *SHA2SUMS,
    DIFF,
    CMP,
    STAT,
    DU,
    DF,
    FILE,
    TREE,
    XXD,
    HEXDUMP,
    STRINGS,
    LESS,
    MORE,
    BASENAME,
    DIRNAME,
    REALPATH,
    READLINK,
    PWD,
    PRINTENV,
    TTY,
    ID,
    LOGNAME,
    WHOAMI,
    GROUPS,
    DATE,
    ARCH,
    NPROC,
    UNAME,
    HOSTNAME,
    WHICH,
    LOCALE,
    CP,
    DD,
    INSTALL,
    MV,
    RM,
    SHRED,
    LN,
    MKDIR,
    RMDIR,
    UNLINK,
    CHOWN,
    CHGRP,
    CHMOD,
    TOUCH,
    TRUNCATE,
    TEE,
    SPLIT,
    CSPLIT,
    PATCH,
)
