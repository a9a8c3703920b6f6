"""Table: archivers and compressors (tar, zip, unzip, zipinfo, gzip, bzip2, xz, zstd).

Each entry cites the manual its options were read from (the versions installed on Debian 12).
Options not listed are unknown: a family never covers them (they need an exact rule or a
human). What an entry does with no options is its `effects`; the options that pick what the
program does (tar -t, unzip -l, gzip -c) are mode switches.

Decisions worth knowing:

- tar's base effects are {WRITE}: with no mode letter tar refuses to run ("You must specify
  one of the '-Acdtrux', '--delete' or '--test-label' options"), so the base only matters
  for a family's own words; `Bash(tar:*)` then covers creating and extracting, and only an
  explicit -t, -d or --test-label reads. tar is therefore not read-only and no family is
  offered for `tar tf x.tar` (an exact rule is); `Bash(tar -t:*)` covers `tar -t -f x.tar`
  but, as families compare leading words, not `tar tf x.tar` or `tar -tf x.tar`.
- tar's archive name (-f) is read like a script: `host:file` (a colon with no `/` before
  it) is a remote archive reached with rsh, so NETWORK. --force-local makes it local again;
  callgate still reports NETWORK then (the safe side).
- Removing archive members (tar --delete, zip -d) counts as deleting files, as does extracting
  an incremental archive (tar -g/-G delete files missing from its directory lists): the
  DELETE action, so `Bash(rm:*)` denies them.
- gzip, bzip2 and xz delete their input: their entries carry the DELETE action, so
  `Bash(rm:*)` denies every gzip, gunzip, bzip2, bunzip2, xz and unxz command, even `gzip -c`
  (deny over-matches). zstd keeps its input unless --rm. The `*cat` entries only read.
- Only -c (to standard output) is a read-only mode of bzip2, xz and zstd: they take the last
  of -z, -d, -t and -l (`xz -t -d x.xz` decompresses x.xz and deletes it), so -t and -l are
  plain options there. gzip's -t and -l survive a later -d, and are modes.
- zip reads two-letter options (-TT, -FS, -db) that callgate reads as clusters of one-letter
  options: -T runs code (so -TT does), -S is left unknown (so -FS, which deletes archive
  entries, is unknown and denied by `Bash(rm:*)`), and the -d… display options read as -d
  (delete).
- unzip reads `--` as a negation, not as the end of its options (`unzip -l -- -qT x.zip`
  sets the archive's time stamp): callgate reads the words after `--` as operands, which
  under-reports that one metadata write.
"""

from __future__ import annotations

from dataclasses import replace

from .build import DELETE, attached, does, flags, mode, values
from .model import Effect, Option, Program, Style, Takes

_READ = Effect.READ
_WRITE = Effect.WRITE


def _tar_archive(name: str) -> tuple[tuple[Effect, str], ...]:
    """tar's archive name: `host:file` (a colon with no `/` before it) is on a remote host."""
    colon = name.find(":")
    if colon > 0 and "/" not in name[:colon]:
        return ((Effect.NETWORK, f"archive {name[:40]!r} is on a remote host (reached with rsh)"),)
    return ()


def _deletes(spec: str, what: str, *, takes: Takes = Takes.NOTHING, example: str = "1") -> Option:
    return does(spec, Effect.DELETE, what, takes=takes, example=example, actions=DELETE)


# ------------------------------------------------------------------ tar

TAR = Program(
    "tar",
    manual="tar(1), GNU tar 1.34 (tar --help); GNU tar manual §3.4 All tar Options, "
    "§6.3 Reading Names from a File, §9.6 Using Multiple Tapes",
    effects=frozenset({_WRITE}),
    style=Style.TAR,
    script=_tar_archive,
    covers="tar with options the table knows that do no more than write files (never "
    "--to-command, -I, --checkpoint-action, --delete, --remove-files, -g/-G, remote archives)",
    options=(
        # Operation modes.
        mode("-t --list", _READ),
        mode("-d --diff --compare", _READ),
        mode("--test-label", _READ),
        mode("-x --extract --get", _WRITE),
        mode("-c --create", _WRITE),
        mode("-r --append", _WRITE),
        mode("-u --update", _WRITE),
        mode("-A --catenate --concatenate", _WRITE),
        Option(
            ("--delete",),
            effect=Effect.DELETE,
            what="deletes members from the archive",
            mode=frozenset({_WRITE, Effect.DELETE}),
            actions=DELETE,
        ),
        # The archive: a script-like value, `host:file` reaches the network.
        Option(("-f", "--file"), Takes.VALUE, example="x.tar", script=True),
        *flags(
            "--force-local",
            # Operation modifiers.
            "--check-device",
            "--no-check-device",
            "--ignore-failed-read",
            "--no-seek",
            "-n --seek",
            "-S --sparse",
            # Local file name selection. A -T list may hold only these name options (tar 1.34
            # refuses --to-command, --checkpoint-action, --remove-files or --transform there).
            "--exclude-backups",
            "--exclude-caches",
            "--exclude-caches-all",
            "--exclude-caches-under",
            "--exclude-vcs",
            "--exclude-vcs-ignores",
            "--no-null",
            "--no-recursion",
            "--no-unquote",
            "--no-verbatim-files-from",
            "--null",
            "--recursion",
            "--unquote",
            "--verbatim-files-from",
            "--anchored",
            "--ignore-case",
            "--no-anchored",
            "--no-ignore-case",
            "--no-wildcards",
            "--no-wildcards-match-slash",
            "--wildcards",
            "--wildcards-match-slash",
            # Overwrite control (extraction writes anyway).
            "--keep-directory-symlink",
            "--keep-newer-files",
            "-k --keep-old-files",
            "--no-overwrite-dir",
            "--overwrite-dir",
            "--skip-old-files",
            "-W --verify",
            # Output stream.
            "--ignore-command-error",
            "--no-ignore-command-error",
            "-O --to-stdout",
            # File attributes of what is written.
            "--clamp-mtime",
            "--delay-directory-restore",
            "--no-delay-directory-restore",
            "-m --touch",
            "--no-same-owner",
            "--no-same-permissions",
            "--numeric-owner",
            "-p --preserve-permissions --same-permissions",
            "--same-owner",
            "-s --preserve-order --same-order",
            "--acls",
            "--no-acls",
            "--selinux",
            "--no-selinux",
            "--xattrs",
            "--no-xattrs",
            # Blocking and format.
            "-B --read-full-records",
            "-i --ignore-zeros",
            "--old-archive --portability",
            "--posix",
            # Compression through a fixed program.
            "-a --auto-compress",
            "--no-auto-compress",
            "-j --bzip2",
            "-J --xz",
            "--lzip",
            "--lzma",
            "--lzop",
            "--zstd",
            "-z --gzip --gunzip --ungzip",
            "-Z --compress --uncompress",
            # Local file selection.
            "--hard-dereference",
            "-h --dereference",
            "--one-file-system",
            "-P --absolute-names",
            # Informative output.
            "--full-time",
            "-l --check-links",
            "-R --block-number",
            "--show-defaults",
            "--show-omitted-dirs",
            "--show-snapshot-field-ranges",
            "--show-transformed-names --show-stored-names",
            "--utc",
            "-v --verbose",
            "-w --interactive --confirmation",
            "-o",
            "-? --help",
            "--restrict",
            "--usage",
            "--version",
        ),
        *values(
            "--hole-detection",
            "--level",
            "--sparse-version",
            "--exclude",
            "--exclude-tag",
            "--exclude-tag-all",
            "--exclude-tag-under",
            "--group",
            "--mode",
            "--mtime",
            "--owner",
            "--sort",
            "--xattrs-exclude",
            "--xattrs-include",
            "-b --blocking-factor",
            "--record-size",
            "-H --format",
            "--pax-option",
            "-V --label",
            "-K --starting-file",
            "--newer-mtime",
            "-N --newer --after-date",
            "--suffix",
            "--strip-components",
            "--transform --xform",
            "--no-quote-chars",
            "--quote-chars",
            "--quoting-style",
            "--warning",
            example="1",
        ),
        *values(
            "--add-file",
            "-C --directory",
            "--exclude-ignore",
            "--exclude-ignore-recursive",
            "-T --files-from",
            "-X --exclude-from",
            "--group-map",
            "--owner-map",
            example="x",
        ),
        *attached("--occurrence", "--one-top-level", "--checkpoint", "--totals"),
        # Writes beyond the archive or the extracted files, deletes, runs programs.
        does("--overwrite", _WRITE, "overwrites existing files when extracting"),
        does("-U --unlink-first", _WRITE, "removes each file before extracting over it"),
        does(
            "--backup",
            _WRITE,
            "renames existing files to backups when extracting",
            takes=Takes.ATTACHED,
        ),
        does(
            "--atime-preserve",
            _WRITE,
            "resets the access times of the files it reads",
            takes=Takes.ATTACHED,
        ),
        does(
            "--index-file",
            _WRITE,
            "writes the verbose output to the named file",
            takes=Takes.VALUE,
            example="index.txt",
        ),
        does(
            "--volno-file",
            _WRITE,
            "writes the volume number to the named file",
            takes=Takes.VALUE,
            example="volno",
        ),
        _deletes("--remove-files", "removes the files it added to the archive"),
        _deletes("--recursive-unlink", "removes directory trees before extracting over them"),
        _deletes(
            "-g --listed-incremental",
            "extracting, deletes files missing from the archive's directory lists; creating, "
            "writes the snapshot file",
            takes=Takes.VALUE,
            example="snapshot",
        ),
        _deletes(
            "-G --incremental",
            "extracting, deletes files missing from the archive's directory lists",
        ),
        does(
            "-I --use-compress-program",
            Effect.CODE,
            "filters the archive through the named program",
            takes=Takes.VALUE,
            example="gzip",
        ),
        does(
            "--to-command",
            Effect.CODE,
            "pipes each extracted file to the named command",
            takes=Takes.VALUE,
            example="cat",
        ),
        does(
            "--checkpoint-action",
            Effect.CODE,
            "its exec= action runs a command at each checkpoint",
            takes=Takes.VALUE,
            example="dot",
        ),
        does(
            "-F --info-script --new-volume-script",
            Effect.CODE,
            "runs the named script at the end of each volume",
            takes=Takes.VALUE,
            example="./next-volume",
        ),
        does(
            "-M --multi-volume",
            Effect.CODE,
            "prompts for the next volume on standard input, where `!` starts a shell",
        ),
        does(
            "-L --tape-length",
            Effect.CODE,
            "implies -M, whose prompt for the next volume can start a shell",
            takes=Takes.VALUE,
            example="1024",
        ),
        does(
            "--rsh-command",
            Effect.CODE,
            "runs the named command to reach a remote archive",
            takes=Takes.VALUE,
            example="ssh",
        ),
        does(
            "--rmt-command",
            Effect.CODE,
            "runs the named command on the remote archive's host",
            takes=Takes.VALUE,
            example="/usr/sbin/rmt",
        ),
    ),
)

# ------------------------------------------------------------------ zip, unzip, zipinfo

ZIP = Program(
    "zip",
    manual="zip(1), Info-ZIP Zip 3.0 (zip -h2), OPTIONS",
    effects=frozenset({_WRITE}),
    options=(
        *flags(
            "-a --ascii",
            "-A --adjust-sfx",
            "-B --binary",
            "-c --entry-comments",
            "-D --no-dir-entries",
            "-e --encrypt",
            "-f --freshen",
            "-F --fix",
            "--fixfix",
            "-g --grow",
            "-h -? --help",
            "--more-help",
            "-j --junk-paths",
            "--absolute-path",
            "-J --junk-sfx",
            "-k --DOS-names",
            "-l --to-crlf",
            "--from-crlf",
            "--log-append",
            "--log-info",
            "-L --license",
            "--must-match",
            "--no-wild",
            "-o --latest-time",
            "-q --quiet",
            "-r --recurse-paths",
            "-R --recurse-patterns",
            "--show-files",
            "--show-command",
            "--show-options",
            "-u --update",
            "-U --copy-entries --copy",
            "-v --verbose",
            "-X --no-extra",
            "-y --symlinks",
            "-z --archive-comment",
            "-@ --names-stdin",
            "--display-bytes",
            "--display-counts",
            "--display-dots",
            "--display-globaldots",
            "--display-usize",
            "--display-volume",
            "--difference-archive --dif",
            *(f"-{digit}" for digit in "0123456789"),
        ),
        *values(
            "-i --include",
            "-x --exclude",
            "-n --suffixes",
            "-P --password",
            "-s --split-size",
            "-t --from-date",
            "--before-date",
            "-Z --compression-method",
            "--dot-size",
            example="1",
        ),
        does(
            "-b --temp-path",
            _WRITE,
            "writes its temporary archive into the named directory",
            takes=Takes.VALUE,
            example=".",
        ),
        does(
            "-O --output-file --out",
            _WRITE,
            "writes the archive to the named file",
            takes=Takes.VALUE,
            example="out.zip",
        ),
        does(
            "--logfile-path",
            _WRITE,
            "writes a log to the named file",
            takes=Takes.VALUE,
            example="zip.log",
        ),
        _deletes("-m --move", "deletes the files it added to the archive"),
        _deletes(
            "-d --delete",
            "deletes entries from the archive (callgate also reads zip's -db, -dc, -dd, -dg, "
            "-ds, -du and -dv display options as -d)",
        ),
        _deletes("--filesync", "deletes archive entries whose files no longer exist"),
        does(
            "-T --test",
            Effect.CODE,
            "tests the new archive by running unzip, or the command -TT names (callgate reads "
            "-TT as -T -T)",
        ),
        does(
            "--unzip-command",
            Effect.CODE,
            "runs the named command to test the archive",
            takes=Takes.VALUE,
            example="unzip -tqq",
        ),
    ),
)

# zipinfo's listing letters: `unzip -Z` and zipinfo read every later option as one of these.
_ZIPINFO_FLAGS = flags("-1", "-2", "-s", "-m", "-l", "-v", "-h", "-M", "-t", "-T", "-z", "-C")

UNZIP = Program(
    "unzip",
    manual="unzip(1), Info-ZIP UnZip 6.00 (Debian 6.0-28; unzip -hh), ARGUMENTS, OPTIONS, "
    "MODIFIERS; zipinfo(1) for -Z",
    effects=frozenset({_WRITE}),
    options=(
        mode("-l", _READ),
        mode("-v", _READ),
        mode("-t", _READ),
        mode("-p", _READ),
        mode("-c", _READ),
        mode("-z", _READ),
        mode("-Z", _READ),
        mode("-f", _WRITE),
        mode("-u", _WRITE),
        mode("-T", _WRITE),
        *flags(
            "-a",
            "-b",
            "-C",
            "-D",
            "-j",
            "-K",
            "-L",
            "-M",
            "-n",
            "-q",
            "-U",
            "-V",
            "-W",
            "-X",
            "-^",
            "-h",
            # zipinfo letters, read after -Z (on their own, unzip refuses them).
            "-1",
            "-2",
            "-s",
            "-m",
        ),
        *values("-P", "-x", example="x"),
        does(
            "-d",
            _WRITE,
            "extracts into the named directory",
            takes=Takes.VALUE,
            example="out",
        ),
        does("-o", _WRITE, "overwrites existing files without asking"),
        does("-B", _WRITE, "renames overwritten files to backups"),
        does("-:", _WRITE, "extracts members named with `../` outside the extraction directory"),
    ),
)

ZIPINFO = Program(
    "zipinfo",
    manual="zipinfo(1), Info-ZIP ZipInfo 3.00 (Debian unzip 6.0-28), OPTIONS",
    options=(*_ZIPINFO_FLAGS, *values("-x", example="x")),
)

# ------------------------------------------------------------------ gzip, bzip2, xz

_GZIP_MANUAL = "gzip(1), GNU gzip 1.12 (gzip --help); gzip manual §4 Invoking gzip"
_GZIP_LEVELS = tuple(f"-{digit}" for digit in "123456789")
_GZIP_FLAGS = (
    "-a --ascii",
    "-d --decompress --uncompress",
    "-f --force",
    "-h --help",
    "-L --license",
    "-n --no-name",
    "-N --name",
    "-q --quiet",
    "-r --recursive",
    "--rsyncable",
    "--synchronous",
    "-v --verbose",
    "-V --version",
    "--fast",
    "--best",
    *_GZIP_LEVELS,
)
_GZIP_READ_MODES = ("-c --stdout --to-stdout", "-l --list", "-t --test")

GZIP = Program(
    "gzip",
    manual=_GZIP_MANUAL,
    effects=frozenset({_WRITE, Effect.DELETE}),
    actions=DELETE,
    aliases=("gunzip",),
    options=(
        *(mode(spec, _READ) for spec in _GZIP_READ_MODES),
        mode("-k --keep", _WRITE),
        *flags(*_GZIP_FLAGS),
        *values("-S --suffix", example=".gz"),
    ),
)

ZCAT = Program(
    "zcat",
    manual=f"zcat(1) (gzip -cd), {_GZIP_MANUAL}",
    options=(
        *flags(*_GZIP_FLAGS, *_GZIP_READ_MODES, "-k --keep"),
        *values("-S --suffix", example=".gz"),
    ),
)

_BZIP2_MANUAL = "bzip2(1), bzip2 1.0.8, OPTIONS"
_BZIP2_FLAGS = (
    "-d --decompress",
    "-z --compress",
    "-f --force",
    "-s --small",
    "-q --quiet",
    "-v --verbose",
    "-h --help",
    "-L --license",
    "-V --version",
    "-t --test",
    "--fast",
    "--best",
    "--repetitive-fast",
    "--repetitive-best",
    *_GZIP_LEVELS,
)
_BZIP2_READ_MODES = ("-c --stdout",)

BZIP2 = Program(
    "bzip2",
    manual=_BZIP2_MANUAL,
    effects=frozenset({_WRITE, Effect.DELETE}),
    actions=DELETE,
    aliases=("bunzip2",),
    options=(
        *(mode(spec, _READ) for spec in _BZIP2_READ_MODES),
        mode("-k --keep", _WRITE),
        *flags(*_BZIP2_FLAGS),
    ),
)

BZCAT = Program(
    "bzcat",
    manual=f"bzcat(1) (bzip2 -dc), {_BZIP2_MANUAL}",
    options=flags(*_BZIP2_FLAGS, *_BZIP2_READ_MODES, "-k --keep"),
)

_XZ_MANUAL = "xz(1), XZ Utils 5.4.1 (xz --long-help), OPTIONS"
_XZ_FLAGS = (
    "-l --list",
    "-t --test",
    "-z --compress",
    "-d --decompress --uncompress",
    "-f --force",
    "--single-stream",
    "--no-sparse",
    "--ignore-check",
    "-e --extreme",
    "--fast",
    "--best",
    "--no-adjust",
    "-q --quiet",
    "-v --verbose",
    "-Q --no-warn",
    "--robot",
    "--info-memory",
    "-h --help",
    "-H --long-help",
    "-V --version",
    *(f"-{digit}" for digit in "0123456789"),
)
_XZ_VALUES = values(
    "-S --suffix",
    "-F --format",
    "-C --check",
    "--block-size",
    "--block-list",
    "--flush-timeout",
    "--memlimit-compress",
    "--memlimit-decompress",
    "--memlimit-mt-decompress",
    "-M --memlimit --memory",
    "-T --threads",
    example="1",
)
_XZ_ATTACHED = attached(
    "--files",
    "--files0",
    "--lzma1",
    "--lzma2",
    "--x86",
    "--arm",
    "--armthumb",
    "--arm64",
    "--powerpc",
    "--ia64",
    "--sparc",
    "--delta",
)
_XZ_READ_MODES = ("-c --stdout --to-stdout",)

XZ = Program(
    "xz",
    manual=_XZ_MANUAL,
    effects=frozenset({_WRITE, Effect.DELETE}),
    actions=DELETE,
    aliases=("unxz", "lzma", "unlzma"),
    options=(
        *(mode(spec, _READ) for spec in _XZ_READ_MODES),
        mode("-k --keep", _WRITE),
        *flags(*_XZ_FLAGS),
        *_XZ_VALUES,
        *_XZ_ATTACHED,
    ),
)

XZCAT = Program(
    "xzcat",
    manual=f"xzcat(1) (xz --decompress --stdout), {_XZ_MANUAL}",
    options=(*flags(*_XZ_FLAGS, *_XZ_READ_MODES, "-k --keep"), *_XZ_VALUES, *_XZ_ATTACHED),
)

# An entry of its own rather than an alias, so that `lzcat x` is offered `Bash(lzcat:*)`.
LZCAT = replace(XZCAT, name="lzcat", manual=f"lzcat(1) (xz --format=lzma -dc), {_XZ_MANUAL}")

# ------------------------------------------------------------------ zstd

_ZSTD_OPTIONS = (
    mode("-c --stdout", _READ),
    mode("--train", _WRITE),
    mode("--train-cover", _WRITE, takes=Takes.ATTACHED, example=""),
    mode("--train-fastcover", _WRITE, takes=Takes.ATTACHED, example=""),
    mode("--train-legacy", _WRITE, takes=Takes.ATTACHED, example=""),
    *flags(
        "-l --list",
        "-t --test",
        "-z --compress",
        "-d --decompress --uncompress",
        "-k --keep",
        "-f --force",
        "-r",
        "-q --quiet",
        "-v --verbose",
        "-h",
        "-H --help",
        "-V --version",
        "-n --no-name",
        "-S",
        "--ultra",
        "--single-thread",
        "--rsyncable",
        "--no-dictID",
        "--exclude-compressed",
        "--show-default-cparams",
        "-C --check",
        "--no-check",
        "--progress",
        "--no-progress",
        "--sparse",
        "--no-sparse",
        "--pass-through",
        "--no-pass-through",
        "--asyncio",
        "--no-asyncio",
        "--content-size",
        "--no-content-size",
        "--compress-literals",
        "--no-compress-literals",
        "--row-match-finder",
        "--no-row-match-finder",
        "--best",
    ),
    *attached(
        "--fast",
        "--adapt",
        "--long",
        "-T",
        "-B",
        "-M",
        "-b",
        "-e",
        "-i",
        example="1",
    ),
    *values(
        "-D",
        "--patch-from",
        "--filelist",
        example="x",
    ),
    *values(
        "--threads",
        "--auto-threads",
        "--memory",
        "--block-size",
        "--stream-size",
        "--size-hint",
        "--target-compressed-block-size",
        "--format",
        "--zstd",
        "--maxdict",
        "--dictID",
        "--priority",
        example="1",
    ),
    does("-o", _WRITE, "writes to the named file", takes=Takes.VALUE, example="out.zst"),
    does(
        "--output-dir-flat --output-dir-mirror",
        _WRITE,
        "writes its output files into the named directory",
        takes=Takes.VALUE,
        example="out",
    ),
    does(
        "--trace",
        _WRITE,
        "writes a trace log to the named file",
        takes=Takes.VALUE,
        example="trace.log",
    ),
    _deletes("--rm", "removes its input files after (de)compressing them"),
)

_ZSTD_MANUAL = "zstd(1), Zstandard 1.5.4 (zstd -H), OPTIONS"

ZSTD = Program(
    "zstd",
    manual=_ZSTD_MANUAL,
    effects=frozenset({_WRITE}),
    numeric_flags=True,
    aliases=("unzstd", "zstdmt"),
    options=_ZSTD_OPTIONS,
)

ZSTDCAT = Program(
    "zstdcat",
    manual=f"zstdcat(1) (zstd -dcf), {_ZSTD_MANUAL}",
    numeric_flags=True,
    options=_ZSTD_OPTIONS,
)

PROGRAMS: tuple[Program, ...] = (
    TAR,
    ZIP,
    UNZIP,
    ZIPINFO,
    GZIP,
    ZCAT,
    BZIP2,
    BZCAT,
    XZ,
    XZCAT,
    LZCAT,
    ZSTD,
    ZSTDCAT,
)
