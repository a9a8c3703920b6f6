"""find, sed, awk and rg: which commands a family covers, and what candidates are offered."""

from __future__ import annotations

import pytest

from .cases import FAMILY, Case, case, check

CASES = (
    # sed: read-only scripts are covered; `e`, `w`, `s///e`, `s///w`, -i and -f are not.
    case("sed -n 1,2p notes.txt", "Bash(sed:*)", True, FAMILY),
    case("sed -n '/x/,$p' notes.txt", "Bash(sed:*)", True, FAMILY),
    case("sed 's/a/b/g;s|c|d|2' notes.txt", "Bash(sed:*)", True, FAMILY),
    case("sed -e 1d -e '$d' notes.txt", "Bash(sed:*)", True, FAMILY),
    case("sed -n '1e id' notes.txt", "Bash(sed:*)", False),
    case("sed -n 1e\\ id notes.txt", "Bash(sed:*)", False),
    case("sed -e p -e '1e id' notes.txt", "Bash(sed:*)", False),
    case("sed --expression='1e id' notes.txt", "Bash(sed:*)", False),
    case("sed 's/x/id/e' notes.txt", "Bash(sed:*)", False),
    case("sed 's/x/y/w out' notes.txt", "Bash(sed:*)", False),
    case("sed -n '1w out' notes.txt", "Bash(sed:*)", False),
    case("sed -n '1W out' notes.txt", "Bash(sed:*)", False),
    case("sed -i s/a/b/ notes.txt", "Bash(sed:*)", False),
    case("sed -i.bak s/a/b/ notes.txt", "Bash(sed:*)", False),
    case("sed --in-place s/a/b/ notes.txt", "Bash(sed:*)", False),
    case("sed -ni p notes.txt", "Bash(sed:*)", False),
    case("sed -f script.sed notes.txt", "Bash(sed:*)", False),
    case("sed -n 1,2p -i notes.txt", "Bash(sed:*)", False),
    case("sed --frobnicate p notes.txt", "Bash(sed:*)", False),
    case("sed -i s/a/b/ notes.txt", "Bash(sed -i:*)", True),
    # find: tests and read-only actions are covered; -exec, -delete and -f* writes are not.
    case("find . -name '*.py' -type f", "Bash(find:*)", True, FAMILY),
    case("find src -maxdepth 2 -newermt 2020-01-01 -print0", "Bash(find:*)", True, FAMILY),
    case("find . -delete", "Bash(find:*)", False),
    case("find . -name x -fprint out", "Bash(find:*)", False),
    case("find . -fls out", "Bash(find:*)", False),
    case("find . -fprintf out %p", "Bash(find:*)", False),
    case("find . -exec rm {} ;", "Bash(find:*)", False),
    case("find . -frobnicate", "Bash(find:*)", False),
    # rg: --pre, --search-zip and --hostname-bin run programs.
    case("rg -n foo src", "Bash(rg:*)", True, FAMILY),
    case("rg -i -g '*.py' foo", "Bash(rg:*)", True, FAMILY),
    case("rg --pre=./x foo", "Bash(rg:*)", False),
    case("rg --pre ./x foo", "Bash(rg:*)", False),
    case("rg foo --pre ./x", "Bash(rg:*)", False),
    case("rg -z foo", "Bash(rg:*)", False),
    case("rg -nz foo", "Bash(rg:*)", False),
    case("rg --search-zip foo", "Bash(rg:*)", False),
    case("rg --hostname-bin=./x foo", "Bash(rg:*)", False),
    case("rg -- --pre foo", "Bash(rg:*)", True, FAMILY),
    # awk: an interpreter; its family covers only programs that only read.
    case("awk '{print $1}' notes.txt", "Bash(awk:*)", True),
    case("awk '$3 > 10' notes.txt", "Bash(awk:*)", True),
    case("awk 'BEGIN{system(\"id\")}'", "Bash(awk:*)", False),
    case("awk '{print > \"out\"}' notes.txt", "Bash(awk:*)", False),
    case("awk '{print | \"sh\"}' notes.txt", "Bash(awk:*)", False),
    case("awk '{\"id\" | getline x}'", "Bash(awk:*)", False),
    case("awk -f prog.awk notes.txt", "Bash(awk:*)", False),
)


@pytest.mark.parametrize("item", CASES, ids=str)
def test_text_programs(item: Case) -> None:
    check(item)
