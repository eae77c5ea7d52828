"""What every Playwright driver here shares: its side of the line protocol with the Rust
test (`usher_testkit::tools::drive`: `CONTROL` lines answered `OK`, anything else is logged)
and polling a page. No environment is read here, so any driver can import it."""

import sys
import time


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def control(cmd):
    """Asks the Rust test to do `cmd` (kill a gateway, flush Redis, ...) and waits until done."""
    print("CONTROL " + cmd, flush=True)
    assert sys.stdin.readline().strip() == "OK", cmd


def until(page, expr, timeout):
    """Polls `expr` in the page until it is true, for at most `timeout` ms. (Playwright's
    wait_for_function compiles the expression inside the page, which the pages' CSPs rightly
    forbid; evaluate does not.)"""
    deadline = time.time() + timeout / 1000
    while True:
        try:
            if page.evaluate(expr):
                return
        except Exception:  # a navigation under way
            pass
        assert time.time() < deadline, f"not true within {timeout} ms: {expr}"
        time.sleep(0.05)
