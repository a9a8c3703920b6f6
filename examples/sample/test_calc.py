"""The calculator's tests, dependency-free: `python3 test_calc.py` (pytest collects them too)."""

import sys

from calc import add, multiply


def test_add() -> None:
    assert add(2, 3) == 5, f"add(2, 3) is {add(2, 3)}, expected 5"


def test_multiply() -> None:
    assert multiply(4, 5) == 20, f"multiply(4, 5) is {multiply(4, 5)}, expected 20"


if __name__ == "__main__":
    failed = 0
    tests = [test_add, test_multiply]
    for test in tests:
        try:
            test()
        except AssertionError as exc:
            failed += 1
            print(f"FAILED {test.__name__}: {exc}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
