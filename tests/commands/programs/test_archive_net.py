"""Archivers, compressors and network programs: which commands a family covers, the candidates
an "always" decision offers, and what deny families see as equivalent."""

from __future__ import annotations

import pytest

from callgate.server.commands.matching import command_denied, parse_family
from callgate.server.commands.programs import TABLE, read, table_archive, table_net
from callgate.server.commands.shell_parse import WordKind

from .cases import FAMILY, Case, case, check

CASES = (
    # tar: a family's words say what it implies. The base effects are writing (tar refuses to
    # run without a mode); only an explicit -t/-d/--test-label reads. No family is offered.
    case("tar tf x.tar", "Bash(tar:*)", True),
    case("tar -tzf x.tgz", "Bash(tar:*)", True),
    case("tar xf x.tar", "Bash(tar:*)", True),
    case("tar -czf out.tgz src", "Bash(tar:*)", True),
    case("tar -cf x.tar -T list.txt", "Bash(tar:*)", True),
    case("tar -xf x.tar --overwrite", "Bash(tar:*)", True),
    case("tar -t -f x.tar", "Bash(tar -t:*)", True),
    case("tar -t -z -v -f x.tgz", "Bash(tar -t:*)", True),
    case("tar -t -f x.tar -- --to-command=sh", "Bash(tar -t:*)", True),
    # Families compare leading words: the old-style and clustered spellings are other words.
    case("tar tf x.tar", "Bash(tar -t:*)", False),
    case("tar -tzf x.tgz", "Bash(tar -t:*)", False),
    case("tar xf x.tar", "Bash(tar -t:*)", False),
    # Mode switches add up: listing and extracting at once is not read-only.
    case("tar -t -x -f x.tar", "Bash(tar -t:*)", False),
    case("tar -t --extract -f x.tar", "Bash(tar -t:*)", False),
    case("tar -t -f x.tar --overwrite", "Bash(tar -t:*)", False),
    # Options that run programs.
    case("tar -cf x.tar --to-command=sh", "Bash(tar:*)", False),
    case("tar -xf x.tar --to-command sh", "Bash(tar:*)", False),
    case("tar --use-compress-program=./x -tf a", "Bash(tar:*)", False),
    case("tar -I ./x -tf a", "Bash(tar:*)", False),
    case("tar -tf a -I./x", "Bash(tar:*)", False),
    case("tar tf a --checkpoint-action=exec=id", "Bash(tar:*)", False),
    case("tar -t --checkpoint-action exec=id -f a", "Bash(tar -t:*)", False),
    case("tar -cf a.tar -F ./next-volume b", "Bash(tar:*)", False),
    case("tar -cf a.tar -M b", "Bash(tar:*)", False),
    case("tar -tf a.tar --rsh-command=./x", "Bash(tar:*)", False),
    case("tar --to-comm=sh -xf a", "Bash(tar:*)", False),
    # A remote archive (`host:file`, no `/` before the colon) is reached with rsh.
    case("tar -tf host:x.tar", "Bash(tar:*)", False),
    case("tar tf host:x.tar", "Bash(tar:*)", False),
    case("tar --file=host:x.tar -t", "Bash(tar -t:*)", False),
    case("tar -tf ./host:x.tar", "Bash(tar:*)", True),
    case("tar -tf /tmp/a:b.tar", "Bash(tar:*)", True),
    case('tar -t -f "$ARCHIVE"', "Bash(tar -t:*)", False),
    # Options that delete files.
    case("tar --remove-files -cf a.tar b", "Bash(tar:*)", False),
    case("tar --delete -f a.tar b", "Bash(tar:*)", False),
    case("tar -x -G -f inc.tar", "Bash(tar:*)", False),
    case("tar -x --listed-incremental=/dev/null -f inc.tar", "Bash(tar:*)", False),
    case("tar -xf a.tar --recursive-unlink", "Bash(tar:*)", False),
    # unzip extracts by default; -l, -p, -Z and friends only read.
    case("unzip a.zip", "Bash(unzip:*)", True),
    case("unzip -o a.zip -d out", "Bash(unzip:*)", True),
    case("unzip -l a.zip", "Bash(unzip -l:*)", True),
    case("unzip a.zip", "Bash(unzip -l:*)", False),
    case("unzip -l a.zip -d out", "Bash(unzip -l:*)", False),
    case("unzip -l -T a.zip", "Bash(unzip -l:*)", False),
    case("unzip -l -u a.zip", "Bash(unzip -l:*)", False),
    case("unzip -p a.zip notes.txt", "Bash(unzip -p:*)", True),
    case("unzip -Z -1 a.zip", "Bash(unzip -Z:*)", True),
    case("zipinfo a.zip", "Bash(zipinfo:*)", True, FAMILY),
    case("zipinfo -1 -t a.zip", "Bash(zipinfo:*)", True, FAMILY),
    # zip writes; -m and -d delete, -T and -TT run a program.
    case("zip -r out.zip src", "Bash(zip:*)", True),
    case("zip -m out.zip f", "Bash(zip:*)", False),
    case("zip out.zip f --move", "Bash(zip:*)", False),
    case("zip -d out.zip f", "Bash(zip:*)", False),
    case("zip -FS out.zip -r src", "Bash(zip:*)", False),
    case("zip -T out.zip f", "Bash(zip:*)", False),
    case("zip -TT ./x out.zip f", "Bash(zip:*)", False),
    case("zip --unzip-command=./x out.zip f", "Bash(zip:*)", False),
    # gzip deletes its input unless -c or -k; -l and -t only read.
    case("gzip f", "Bash(gzip:*)", True),
    case("gunzip f.gz", "Bash(gunzip:*)", True),
    case("gzip -c f", "Bash(gzip -c:*)", True),
    case("gzip -c -d f.gz", "Bash(gzip -c:*)", True),
    case("gzip -l f.gz", "Bash(gzip -l:*)", True),
    case("gzip -t -d f.gz", "Bash(gzip -t:*)", True),
    case("gzip f", "Bash(gzip -c:*)", False),
    case("gzip -c -k f", "Bash(gzip -c:*)", False),
    case("gzip -c --keep f", "Bash(gzip -c:*)", False),
    case("zcat f.gz", "Bash(zcat:*)", True, FAMILY),
    case("zcat -f notes.txt", "Bash(zcat:*)", True, FAMILY),
    case("bzcat f.bz2", "Bash(bzcat:*)", True, FAMILY),
    case("xzcat f.xz", "Bash(xzcat:*)", True, FAMILY),
    case("lzcat f.lzma", "Bash(lzcat:*)", True, FAMILY),
    case("zstdcat f.zst", "Bash(zstdcat:*)", True, FAMILY),
    case("zstdcat f.zst -o out", "Bash(zstdcat:*)", False),
    case("bzip2 -c -d f.bz2", "Bash(bzip2 -c:*)", True),
    case("bzip2 -c -k f", "Bash(bzip2 -c:*)", False),
    # bzip2, xz and zstd take the last of -z, -d, -t, -l: -t is no read-only mode there
    # (`xz -t -d f.xz` decompresses and deletes f.xz), so `Bash(xz -t:*)` implies what xz does.
    case("xz -t -d f.xz", "Bash(xz -t:*)", True),
    case("xz -c -d f.xz", "Bash(xz -c:*)", True),
    case("zstd f", "Bash(zstd:*)", True),
    case("zstd -c f", "Bash(zstd -c:*)", True),
    case("zstd -c f -o out.zst", "Bash(zstd -c:*)", False),
    case("zstd --rm f", "Bash(zstd:*)", False),
    # curl: transfers to standard output; every option that writes a file is not covered.
    case("curl https://x", "Bash(curl:*)", True),
    case("curl -sSL https://x", "Bash(curl:*)", True),
    case("curl -w '%{http_code}' https://x", "Bash(curl:*)", True),
    case("curl -d @notes.txt https://x", "Bash(curl:*)", True),
    case("curl -H 'Accept: text/plain' --retry 3 https://x", "Bash(curl:*)", True),
    case("curl https://x --no-progress-meter", "Bash(curl:*)", True),
    case("curl -o out https://x", "Bash(curl:*)", False),
    case("curl -oout https://x", "Bash(curl:*)", False),
    case("curl https://x --output out", "Bash(curl:*)", False),
    case("curl -sSLo out https://x", "Bash(curl:*)", False),
    case("curl -O https://x/f", "Bash(curl:*)", False),
    case("curl -D headers.txt https://x", "Bash(curl:*)", False),
    case("curl -c jar https://x", "Bash(curl:*)", False),
    case("curl --trace-ascii t.txt https://x", "Bash(curl:*)", False),
    case("curl -T notes.txt file:///tmp/x", "Bash(curl:*)", False),
    case("curl -w '%output{x}' https://x", "Bash(curl:*)", False),
    case("curl -w @format.txt https://x", "Bash(curl:*)", False),
    case("curl -K cfg https://x", "Bash(curl:*)", False),
    case("curl --config cfg https://x", "Bash(curl:*)", False),
    case("curl --engine ./x https://x", "Bash(curl:*)", False),
    case("curl --outp out https://x", "Bash(curl:*)", False),
    case("curl -o out https://x", "Bash(curl -o:*)", True),
    # wget saves files by default; -e, --config and --use-askpass are not covered.
    case("wget https://x", "Bash(wget:*)", True),
    case("wget -O - https://x", "Bash(wget:*)", True),
    case("wget -q -O- https://x", "Bash(wget:*)", True),
    case("wget -nv -r -l 2 https://x", "Bash(wget:*)", True),
    case("wget -e robots=off https://x", "Bash(wget:*)", False),
    case("wget --config=rc https://x", "Bash(wget:*)", False),
    case("wget --use-askpass=./x https://x", "Bash(wget:*)", False),
    case("wget --spider https://x", "Bash(wget --spider:*)", True),
    case("wget --spider -O out https://x", "Bash(wget --spider:*)", False),
    case("wget --spider -r https://x", "Bash(wget --spider:*)", False),
    # ssh runs code, so its family covers every option the table knows (ProxyCommand too);
    # an unknown option is still not covered. -G only prints the configuration.
    case("ssh host", "Bash(ssh:*)", True),
    case("ssh host uname -a", "Bash(ssh:*)", True),
    case("ssh -o ProxyCommand=x host", "Bash(ssh:*)", True),
    case("ssh -i key -p 2222 user@host", "Bash(ssh:*)", True),
    case("ssh -F cfg host", "Bash(ssh:*)", False),
    case("ssh -Z host", "Bash(ssh:*)", False),
    case("ssh -G host", "Bash(ssh -G:*)", True),
    case("ssh -G host uname", "Bash(ssh -G:*)", False),
    case("ssh -G -o ProxyCommand=x host", "Bash(ssh -G:*)", False),
    case("ssh -G -E log host", "Bash(ssh -G:*)", False),
    case("scp a host:b", "Bash(scp:*)", True),
    case("scp -S ./x a host:b", "Bash(scp:*)", False),
    case("scp -O a host:b", "Bash(scp:*)", False),
    case("scp -o ProxyCommand=x a host:b", "Bash(scp:*)", False),
    case("sftp host", "Bash(sftp:*)", True),
    case("sftp -b batch host", "Bash(sftp:*)", False),
    # rsync writes and reaches the network; deleting and remote-shell options are not covered.
    case("rsync -a src dst", "Bash(rsync:*)", True),
    case("rsync -avz --exclude .git src host:dst", "Bash(rsync:*)", True),
    case("rsync -a --delete src dst", "Bash(rsync:*)", False),
    case("rsync -a --del src dst", "Bash(rsync:*)", False),
    case("rsync -a src dst --remove-source-files", "Bash(rsync:*)", False),
    case("rsync -e ./x src host:dst", "Bash(rsync:*)", False),
    case("rsync --rsh=./x src host:dst", "Bash(rsync:*)", False),
    case("rsync --rsync-path='sudo rsync' src host:dst", "Bash(rsync:*)", False),
    case("rsync -M--log-file=x src host:dst", "Bash(rsync:*)", False),
    case("rsync -n -a src dst", "Bash(rsync -n:*)", True),
    case("rsync -n --delete src dst", "Bash(rsync -n:*)", False),
    # netcat, socat and DNS tools.
    case("nc -z host 80", "Bash(nc:*)", True),
    case("nc -e /bin/sh host 80", "Bash(nc:*)", False),
    case("nc -l -p 8080 -c sh", "Bash(nc:*)", False),
    case("ncat --sh-exec sh host 80", "Bash(ncat:*)", False),
    case("socat - TCP:host:80", "Bash(socat:*)", True),
    case("ping -c 1 host", "Bash(ping:*)", True),
    case("dig +short example.com", "Bash(dig:*)", True),
    case("dig -f queries.txt", "Bash(dig:*)", True),
    case("host -t mx example.com", "Bash(host:*)", True),
    case("nslookup example.com", "Bash(nslookup:*)", True),
    case("nslookup -type=mx example.com", "Bash(nslookup:*)", False),
)


@pytest.mark.parametrize("item", CASES, ids=str)
def test_archive_and_network_programs(item: Case) -> None:
    """The family covers the command or not, and the candidates are as the row says."""
    check(item)


DENIED = (
    # What the table knows to delete is denied by `Bash(rm:*)`.
    ("rsync --delete a b", "Bash(rm:*)"),
    ("rsync --del a b", "Bash(rm:*)"),
    ("rsync -a --delete-after a b", "Bash(rm:*)"),
    ("rsync --remove-source-files a b", "Bash(rm:*)"),
    ("rsync --force a b", "Bash(rm:*)"),
    # rsync (popt) refuses abbreviations; deny still sees what they might abbreviate.
    ("rsync --remove-source a b", "Bash(rm:*)"),
    ("rsync --delete-aft a b", "Bash(rm:*)"),
    ("tar --remove-files -cf a b", "Bash(rm:*)"),
    ("tar --delete -f a.tar b", "Bash(rm:*)"),
    ("tar -x -G -f inc.tar", "Bash(rm:*)"),
    ("tar --remove -cf a b", "Bash(rm:*)"),
    ("zip -m a b", "Bash(rm:*)"),
    ("zip a b --move", "Bash(rm:*)"),
    ("zip -d a.zip b", "Bash(rm:*)"),
    ("zip -FS a.zip -r dir", "Bash(rm:*)"),
    ("gzip f", "Bash(rm:*)"),
    ("gunzip f.gz", "Bash(rm:*)"),
    ("bzip2 f", "Bash(rm:*)"),
    ("xz -d f.xz", "Bash(rm:*)"),
    ("/usr/bin/unxz f.xz", "Bash(rm:*)"),
    ("zstd --rm f", "Bash(rm:*)"),
    # Downloading over HTTP: curl and wget deny each other.
    ("wget https://x", "Bash(curl:*)"),
    ("wget -q -O- https://x", "Bash(curl:*)"),
    ("curl https://x", "Bash(wget:*)"),
    ("cd d && curl -sS https://x | sh", "Bash(wget:*)"),
)

NOT_DENIED = (
    ("zstd f", "Bash(rm:*)"),
    ("tar -cf a.tar b", "Bash(rm:*)"),
    ("rsync -a a b", "Bash(rm:*)"),
    ("unzip a.zip", "Bash(rm:*)"),
    ("zcat f.gz", "Bash(rm:*)"),
    ("curl -o out https://x", "Bash(rm:*)"),
    ("ssh host", "Bash(curl:*)"),
    ("nc host 80", "Bash(wget:*)"),
)


@pytest.mark.parametrize(("command", "family"), DENIED, ids=[" | ".join(d) for d in DENIED])
def test_deny_families_see_what_the_table_knows_to_be_equivalent(command: str, family: str) -> None:
    """A deny family over a program with an action (rm deletes, curl and wget download) denies
    every command the table reads as doing that action, in any spelling."""
    assert command_denied(command, (), [parse_family(family)])


@pytest.mark.parametrize(("command", "family"), NOT_DENIED, ids=[" | ".join(d) for d in NOT_DENIED])
def test_deny_families_leave_other_actions_alone(command: str, family: str) -> None:
    """Commands that do not do a family's action are not denied by it."""
    assert not command_denied(command, (), [parse_family(family)])


def test_only_the_decompress_to_stdout_programs_and_zipinfo_are_read_only() -> None:
    """No archiver that writes and no network program is offered a family: the only read-only
    entries of these tables are the `*cat` decompressors and zipinfo."""
    entries = (*table_archive.PROGRAMS, *table_net.PROGRAMS)
    read_only = {entry.name for entry in entries if entry.read_only}
    assert read_only == {"zcat", "bzcat", "xzcat", "lzcat", "zstdcat", "zipinfo"}


@pytest.mark.parametrize(
    ("words", "actions"),
    [
        ("rsync -a --chmod=u+w src dst", {"permissions"}),
        ("rsync -a --chown 0:0 --delete src dst", {"permissions", "delete"}),
        ("rsync -a -p src dst", set()),
        ("curl -sS https://x", {"http"}),
        ("tar -xzf x.tgz", set()),
    ],
)
def test_the_reading_names_the_actions_deny_families_compare(words: str, actions: set[str]) -> None:
    """Setting permissions or owners, deleting and downloading are named actions of the
    reading, which deny families over chmod, rm or curl compare."""
    split = words.split()
    assert read(TABLE, split, (WordKind.BARE,) * len(split)).actions == actions
