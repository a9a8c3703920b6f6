"""Programs that read, list, copy, write and delete files: which commands a family covers,
which candidates are offered, and which commands a deny family over rm or chmod sees."""

from __future__ import annotations

import pytest

from callgate.server.commands.matching import command_denied, family_words, parse_family
from callgate.server.commands.programs import TABLE, Program, read, table_files, table_text
from callgate.server.commands.programs.build import attached, values
from callgate.server.commands.shell_parse import WordKind

from .cases import FAMILY, Case, case, check

CASES = (
    # Read-only programs: covered, and offered as a family.
    case("head -n 5 notes.txt", "Bash(head:*)", True, FAMILY),
    case("head -5 notes.txt", "Bash(head:*)", True, FAMILY),
    case("head -n -5 notes.txt", "Bash(head:*)", True, FAMILY),
    case("head -qc 100 a b", "Bash(head:*)", True, FAMILY),
    case("tail -n +3 notes.txt", "Bash(tail:*)", True, FAMILY),
    case("tail -20 notes.txt", "Bash(tail:*)", True, FAMILY),
    case("tail -f --pid=1 log.txt", "Bash(tail:*)", True, FAMILY),
    case("tail --follow=name --retry log.txt", "Bash(tail:*)", True, FAMILY),
    case("wc -l notes.txt", "Bash(wc:*)", True, FAMILY),
    case("wc -lw --files0-from=names", "Bash(wc:*)", True, FAMILY),
    case("ls -la", "Bash(ls:*)", True, FAMILY),
    case("cat -n notes.txt", "Bash(cat:*)", True, FAMILY),
    case("tac -s , notes.txt", "Bash(tac:*)", True, FAMILY),
    case("nl -ba notes.txt", "Bash(nl:*)", True, FAMILY),
    case("od -An -tx1 notes.txt", "Bash(od:*)", True, FAMILY),
    case("od -w16 -S 4 notes.txt", "Bash(od:*)", True, FAMILY),
    case("base64 -d notes.b64", "Bash(base64:*)", True, FAMILY),
    case("basenc --base16 notes.txt", "Bash(basenc:*)", True, FAMILY),
    case("md5sum notes.txt", "Bash(md5sum:*)", True, FAMILY),
    case("sha256sum -c sums.txt", "Bash(sha256sum:*)", True, FAMILY),
    case("sha512sum --tag notes.txt", "Bash(sha512sum:*)", True, FAMILY),
    case("b2sum -l 256 notes.txt", "Bash(b2sum:*)", True, FAMILY),
    case("cksum -a sha256 notes.txt", "Bash(cksum:*)", True, FAMILY),
    case("diff a b", "Bash(diff:*)", True, FAMILY),
    case("diff -ru old new", "Bash(diff:*)", True, FAMILY),
    case("diff --color=always -U 5 a b", "Bash(diff:*)", True, FAMILY),
    case("diff --to-file=b a c", "Bash(diff:*)", True, FAMILY),
    case("diff -l a b", "Bash(diff:*)", True, FAMILY),
    case("cmp -s a b", "Bash(cmp:*)", True, FAMILY),
    case("stat -c %s notes.txt", "Bash(stat:*)", True, FAMILY),
    case("du -sh .", "Bash(du:*)", True, FAMILY),
    case("du -d 1 --exclude=.git .", "Bash(du:*)", True, FAMILY),
    case("df -h .", "Bash(df:*)", True, FAMILY),
    case("file -b --mime-type notes.txt", "Bash(file:*)", True, FAMILY),
    case("file -m magic notes.txt", "Bash(file:*)", True, FAMILY),
    case("tree -L 2 src", "Bash(tree:*)", True, FAMILY),
    case("tree -a -I node_modules --dirsfirst", "Bash(tree:*)", True, FAMILY),
    case("xxd notes.txt", "Bash(xxd:*)", True, FAMILY),
    case("xxd -l 16 -c8 notes.txt", "Bash(xxd:*)", True, FAMILY),
    case("xxd -ps notes.txt", "Bash(xxd:*)", True, FAMILY),
    case("hexdump -C notes.txt", "Bash(hexdump:*)", True, FAMILY),
    case("strings -n 8 a.out", "Bash(strings:*)", True, FAMILY),
    case("strings -8 a.out", "Bash(strings:*)", True, FAMILY),
    case("basename src/a.txt .txt", "Bash(basename:*)", True, FAMILY),
    case("dirname src/a.txt", "Bash(dirname:*)", True, FAMILY),
    case("realpath --relative-to=. src", "Bash(realpath:*)", True, FAMILY),
    case("readlink -f src", "Bash(readlink:*)", True, FAMILY),
    case("pwd -P", "Bash(pwd:*)", True, FAMILY),
    case("printenv HOME", "Bash(printenv:*)", True, FAMILY),
    case("id -un", "Bash(id:*)", True, FAMILY),
    case("whoami", "Bash(whoami:*)", True, FAMILY),
    case("uname -a", "Bash(uname:*)", True, FAMILY),
    case("nproc --all", "Bash(nproc:*)", True, FAMILY),
    case("which -a python3", "Bash(which:*)", True, FAMILY),
    case("locale -a", "Bash(locale:*)", True, FAMILY),
    case("tty -s", "Bash(tty:*)", True, FAMILY),
    # date and hostname print with no operand, but an operand sets the clock or the name:
    # their families cover printing and are never offered.
    case("date +%Y-%m-%d", "Bash(date:*)", True),
    case("date -u -d @0 +%s", "Bash(date:*)", True),
    case("date -Iseconds", "Bash(date:*)", True),
    case("date 010112002030", "Bash(date:*)", False),
    case("date -s 2020-01-01", "Bash(date:*)", False),
    case("date --set=2020-01-01", "Bash(date:*)", False),
    case("hostname -f", "Bash(hostname:*)", True),
    case("hostname evil", "Bash(hostname:*)", False),
    case("hostname -F name.txt", "Bash(hostname:*)", False),
    # sort: -o/--output writes, --compress-program runs a program, -T writes temporaries.
    case("sort -u notes.txt", "Bash(sort:*)", True, FAMILY),
    case("sort -t, -k2,2n notes.txt", "Bash(sort:*)", True, FAMILY),
    case("sort --check=quiet notes.txt", "Bash(sort:*)", True, FAMILY),
    case("sort -o out notes.txt", "Bash(sort:*)", False),
    case("sort -oout notes.txt", "Bash(sort:*)", False),
    case("sort --output=out notes.txt", "Bash(sort:*)", False),
    case("sort --output out notes.txt", "Bash(sort:*)", False),
    case("sort notes.txt -o out", "Bash(sort:*)", False),
    case("sort -uo out notes.txt", "Bash(sort:*)", False),
    case("sort -co out notes.txt", "Bash(sort:*)", False),
    case("sort --outp=out notes.txt", "Bash(sort:*)", False),
    case("sort --compress-program=./x notes.txt", "Bash(sort:*)", False),
    case("sort -T /tmp notes.txt", "Bash(sort:*)", False),
    case("sort -- -o", "Bash(sort:*)", True, FAMILY),
    case("sort -o out notes.txt", "Bash(sort -o:*)", True),
    # uniq: a second operand is a file it writes.
    case("uniq -c notes.txt", "Bash(uniq:*)", True, FAMILY),
    case("uniq in out", "Bash(uniq:*)", False),
    case("uniq -- in out", "Bash(uniq:*)", False),
    case("uniq in -c out", "Bash(uniq:*)", False),
    case("uniq a*", "Bash(uniq:*)", False),
    case("uniq -3 notes.txt", "Bash(uniq:*)", True, FAMILY),
    # tree: -o and -R write; a short option's value is the next word even inside a cluster.
    case("tree -o out", "Bash(tree:*)", False),
    case("tree -o out .", "Bash(tree:*)", False),
    case("tree -Lo 2 out", "Bash(tree:*)", False),
    case("tree -L 2 -R -H .", "Bash(tree:*)", False),
    # xxd: `xxd IN OUT` writes OUT, with or without -r; options stop at the first operand.
    case("xxd -r a b", "Bash(xxd:*)", False),
    case("xxd a b", "Bash(xxd:*)", False),
    case("xxd -ps in out", "Bash(xxd:*)", False),
    case("xxd -cols 8 in out", "Bash(xxd:*)", False),
    case("xxd in -r", "Bash(xxd:*)", False),
    case("xxd -r notes.hex", "Bash(xxd:*)", True, FAMILY),
    # file: -C writes a compiled magic file, -p sets times, -z and -Z run decompressors.
    case("file -C -m magic", "Bash(file:*)", False),
    case("file -p notes.txt", "Bash(file:*)", False),
    case("file -z notes.gz", "Bash(file:*)", False),
    case("file -bZ notes.gz", "Bash(file:*)", False),
    # Pagers run shell commands and editors: a family covers them, none is offered.
    case("less notes.txt", "Bash(less:*)", True),
    case("less -N +G notes.txt", "Bash(less:*)", True),
    case("more notes.txt", "Bash(more:*)", True),
    case("less notes.txt", "Bash(cat:*)", False),
    # Programs that write are covered by their own family and never offered.
    case("cp a b", "Bash(cp:*)", True),
    case("cp -r --preserve=mode src dest", "Bash(cp:*)", True),
    case("cp a b", "Bash(ls:*)", False),
    case("mv a b", "Bash(mv:*)", True),
    case("ln -sf a b", "Bash(ln:*)", True),
    case("mkdir -p a/b", "Bash(mkdir:*)", True),
    case("touch -d yesterday notes.txt", "Bash(touch:*)", True),
    case("truncate -s 0 notes.txt", "Bash(truncate:*)", True),
    case("tee out", "Bash(tee:*)", True),
    case("tee -a out", "Bash(tee:*)", True),
    case("tee out", "Bash(cat:*)", False),
    case("dd if=a of=b bs=1M", "Bash(dd:*)", True),
    case("chmod +x run.sh", "Bash(chmod:*)", True),
    case("chmod -x run.sh", "Bash(chmod:*)", True),
    case("chmod -R go-w src", "Bash(chmod:*)", True),
    case("chown -R u:g src", "Bash(chown:*)", True),
    case("chgrp g src", "Bash(chgrp:*)", True),
    case("install -m 644 a b", "Bash(install:*)", True),
    case("install -s a b", "Bash(install:*)", False),
    case("install --strip-program=./x -s a b", "Bash(install:*)", False),
    case("split -l 100 notes.txt part", "Bash(split:*)", True),
    case("split --filter='gzip > $FILE' notes.txt", "Bash(split:*)", False),
    case("csplit notes.txt /x/ '{*}'", "Bash(csplit:*)", True),
    case("shred notes.txt", "Bash(shred:*)", True),
    case("shred -u notes.txt", "Bash(shred:*)", False),
    case("rmdir d", "Bash(rmdir:*)", True),
    case("patch -p1 -i fix.patch", "Bash(patch:*)", True),
    case("patch -g1 -i fix.patch", "Bash(patch:*)", False),
)


@pytest.mark.parametrize("item", CASES, ids=str)
def test_file_programs(item: Case) -> None:
    check(item)


@pytest.mark.parametrize(
    ("command", "family", "denied"),
    [
        # A deny family over rm sees everything the table knows to delete files.
        ("unlink x", "Bash(rm:*)", True),
        ("rmdir d", "Bash(rm:*)", True),
        ("rmdir -p a/b", "Bash(rm:*)", True),
        ("shred -u x", "Bash(rm:*)", True),
        ("shred -vzu x", "Bash(rm:*)", True),
        ("shred --remove=wipe x", "Bash(rm:*)", True),
        ("shred --rem x", "Bash(rm:*)", True),
        ("find . -delete", "Bash(rm:*)", True),
        ("patch -p1 -i fix.patch", "Bash(rm:*)", True),
        ("/usr/bin/rmdir d", "Bash(rm:*)", True),
        ("shred x", "Bash(rm:*)", False),
        ("ls", "Bash(rm:*)", False),
        ("cp a b", "Bash(rm:*)", False),
        ("mv a b", "Bash(rm:*)", False),
        ("sort -u x", "Bash(rm:*)", False),
        # A deny family over chmod sees chown, chgrp and the options that set modes.
        ("chown u x", "Bash(chmod:*)", True),
        ("chgrp g x", "Bash(chmod:*)", True),
        ("install -m 4755 a b", "Bash(chmod:*)", True),
        ("install --owner=root a b", "Bash(chmod:*)", True),
        ("mkdir -m 777 d", "Bash(chmod:*)", True),
        ("shred -f x", "Bash(chmod:*)", True),
        ("mkdir d", "Bash(chmod:*)", False),
        ("install a b", "Bash(chmod:*)", False),
        ("ls", "Bash(chmod:*)", False),
        ("chmod +x f", "Bash(chown:*)", True),
    ],
)
def test_deny_families_see_equivalent_programs(command: str, family: str, denied: bool) -> None:
    assert command_denied(command, (), [parse_family(family)]) is denied


@pytest.mark.parametrize(
    "entry",
    [*table_files.PROGRAMS, *table_text.PROGRAMS],
    ids=lambda entry: entry.name,
)
def test_every_entry_cites_a_versioned_manual(entry: Program) -> None:
    """Each entry names the manual page and the version its options were read from."""
    page = "gawk" if entry.name == "awk" else entry.name
    assert f"{page}(1)" in entry.manual
    assert any(ch.isdigit() for ch in entry.manual)


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("Bash(uniq:*)", "at most one operand"),
        ("Bash(xxd:*)", "never `xxd INFILE OUTFILE`"),
        ("Bash(date:*)", "-s/--set"),
        ("Bash(sort:*)", "--compress-program"),
        ("Bash(head:*)", "read-only options only"),
    ],
)
def test_family_words_say_what_is_left_out(pattern: str, words: str) -> None:
    assert words in family_words(pattern)


def _words(*words: str) -> tuple[tuple[str, ...], tuple[WordKind, ...]]:
    return words, (WordKind.BARE,) * len(words)


def test_values_that_follow_a_cluster_are_taken_in_order_and_skipped() -> None:
    """With `short_values_follow`, `-ab v w`: -a takes `v`, -b (an optional value, attached
    only) takes nothing, and `w` is the one operand; `v` is not read again."""
    entry = Program(
        "prog",
        manual="a test entry",
        short_values_follow=True,
        options=(*values("-a"), *attached("-b")),
    )
    reading = read({"prog": entry}, *_words("prog", "-ab", "v", "w"))
    assert reading.operands == ["w"]
    assert reading.options == {"-a", "-b"}
    assert reading.findings == []


def test_operands_past_the_read_ones_are_written_files() -> None:
    words, kinds = _words("uniq", "-c", "in", "out")
    reading = read(TABLE, words, kinds)
    assert [(f.position, f.what) for f in reading.findings] == [
        (3, "uniq writes its operand 'out'")
    ]
    glob = read(TABLE, ("uniq", "in*"), (WordKind.BARE, WordKind.PATTERN))
    assert [f.position for f in glob.findings] == [1]


def test_a_value_prefix_exempts_only_literal_operands() -> None:
    assert read(TABLE, *_words("date", "+%s")).findings == []
    dynamic = read(TABLE, ("date", "$fmt"), (WordKind.BARE, WordKind.DYNAMIC))
    assert dynamic.findings
