"""find, sed, awk, rg and the other text tools (grep, cut, jq, echo, printf, test, …): which
commands a family covers, and what candidates are offered."""

from __future__ import annotations

import pytest

from .cases import FAMILY, Case, case, check

CASES = (
    # sed: read-only scripts are covered; `e`, `w`, `s///e`, `s///w`, -i and -f are not.
    case("sed -n 1,2p notes.txt", "Bash(sed:*)", True, FAMILY),
    case("sed -n '/x/,$p' notes.txt", "Bash(sed:*)", True),  # not inert: exact only
    case("sed 's/a/b/g;s|c|d|2' notes.txt", "Bash(sed:*)", True, FAMILY),
    case("sed -e 1d -e '$d' notes.txt", "Bash(sed:*)", True),  # not inert: exact only
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
    # grep: every option only reads (-f reads the patterns from a file).
    case("grep -rn foo .", "Bash(grep:*)", True, FAMILY),
    case("grep -E -i -A3 'a|b' notes.txt", "Bash(grep:*)", True, FAMILY),
    case("grep -2 foo notes.txt", "Bash(grep:*)", True, FAMILY),
    case("grep -f patterns.txt --exclude-dir=.git -r .", "Bash(grep:*)", True, FAMILY),
    case("grep --color=always -e -o notes.txt", "Bash(grep:*)", True, FAMILY),
    case("grep --frobnicate foo notes.txt", "Bash(grep:*)", False),
    case("egrep 'a|b' notes.txt", "Bash(egrep:*)", True, FAMILY),
    case("fgrep -x a notes.txt", "Bash(fgrep:*)", True, FAMILY),
    # Filters that only read.
    case("cut -d: -f1 /etc/passwd", "Bash(cut:*)", True, FAMILY),
    case("tr -d '\\r' notes.txt", "Bash(tr:*)", True),  # not inert: exact only
    case("tr a-z A-Z", "Bash(tr:*)", True, FAMILY),
    case("paste -sd, notes.txt", "Bash(paste:*)", True, FAMILY),
    case("comm -12 a b", "Bash(comm:*)", True, FAMILY),
    case("join -t, -1 2 a b", "Bash(join:*)", True, FAMILY),
    case("fmt -72 notes.txt", "Bash(fmt:*)", True, FAMILY),
    case("fold -w 60 notes.txt", "Bash(fold:*)", True, FAMILY),
    case("expand -t 4 notes.txt", "Bash(expand:*)", True, FAMILY),
    case("unexpand -a notes.txt", "Bash(unexpand:*)", True, FAMILY),
    case("rev notes.txt", "Bash(rev:*)", True, FAMILY),
    case("column -t -s, -o ' | ' notes.csv", "Bash(column:*)", True, FAMILY),
    case("tsort deps.txt", "Bash(tsort:*)", True, FAMILY),
    case("shuf -n 3 notes.txt", "Bash(shuf:*)", True, FAMILY),
    case("shuf -o out notes.txt", "Bash(shuf:*)", False),
    # jq cannot run programs or write files; its options only read.
    case("jq -r '.[] | .name' data.json", "Bash(jq:*)", True),  # not inert: exact only
    case("jq -n --arg x 1 '$x'", "Bash(jq:*)", True),  # not inert: exact only
    case("jq -f prog.jq --rawfile t notes.txt data.json", "Bash(jq:*)", True, FAMILY),
    case("jq --frobnicate . data.json", "Bash(jq:*)", False),
    # Printing and conditions; bash's printf -v assigns a variable later commands see.
    case("echo hello", "Bash(echo:*)", True, FAMILY),
    case("echo -n hello", "Bash(echo:*)", True, FAMILY),
    case("printf '%s\\n' a b", "Bash(printf:*)", True),  # not inert: exact only
    case("printf -v PATH %s /tmp/x", "Bash(printf:*)", False),
    case("printf -vPATH %s /tmp/x", "Bash(printf:*)", False),
    case("printf -- -v", "Bash(printf:*)", True, FAMILY),
    case("test -f notes.txt", "Bash(test:*)", True, FAMILY),
    case("test 1 -lt 2", "Bash(test:*)", True, FAMILY),
    case("seq 1 10", "Bash(seq:*)", True, FAMILY),
    case("seq -w -5 5", "Bash(seq:*)", True, FAMILY),
    case("true", "Bash(true:*)", True, FAMILY),
    case("sleep 1", "Bash(sleep:*)", True, FAMILY),
    case("yes", "Bash(yes:*)", True, FAMILY),
)


@pytest.mark.parametrize("item", CASES, ids=str)
def test_text_programs(item: Case) -> None:
    check(item)
