"""The waiting-room page on a proof-of-work queue, in Debian's Chromium driven by Playwright,
and the page solver's speed (the phone estimate of the cost table in docs/security.md).

Run by crates/usher-testkit/tests/browsers/pow_page.rs, which starts Redis, a dispatcher, a gateway and
the demo booking service as real processes and passes their URLs in the environment (as
waiting_room.py, whose helpers this reuses). The last stdout line is `RESULT ok <scenarios>`;
`FIGURE <name> <value>` lines before it are measurements (never asserted against a target).
"""

import json
import os
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from waiting_room import (  # noqa: E402
    BOOKING, GW, PHONE, SHOTS, T, admin, call, check_token, log, passed, scenario, shot,
    stored, until, wait_state,
)
from playwright.sync_api import sync_playwright  # noqa: E402

DIFFICULTY = 20  # about a million hashes: long enough to see the progress bar move
MEASURE_SECS = 4


def figure(name, value):
    print(f"FIGURE {name} {value}", flush=True)


# Runs the page's own worker (/q/assets/pow-worker.js) on puzzles it cannot solve quickly for
# about MEASURE_SECS and reports hashes per second from its progress messages.
MEASURE_WORKER = """async ([secs]) => {
  const src = [...document.scripts].map((s) => s.src).find((s) => s.includes('page.js'));
  const url = new URL('pow-worker.js', src); url.search = new URL(src).search;
  const w = new Worker(url);
  const t0 = performance.now();
  let last = { hashes: 0, at: t0 };
  await new Promise((done) => {
    w.onmessage = ({ data }) => { last = { hashes: data.hashes, at: performance.now() }; };
    w.postMessage({ puzzle: 'usher-measure.' + Math.random(), difficulty: 64 });
    setTimeout(done, secs * 1000);
  });
  w.terminate();
  return last.hashes / ((last.at - t0) / 1000);
}"""


# The same solver source run on the page's main thread (CDP's CPU throttling slows the main
# thread, not workers), puzzle after puzzle at difficulty 16, for about MEASURE_SECS. Needs a
# context that bypasses the page's CSP (it evaluates the fetched source).
MEASURE_MAIN = """async ([secs]) => {
  const src = [...document.scripts].map((s) => s.src).find((s) => s.includes('page.js'));
  const url = new URL('pow-worker.js', src); url.search = new URL(src).search;
  const code = await (await fetch(url)).text();
  const out = [];
  const solve = new Function('postMessage', code + '; return onmessage;')((m) => out.push(m));
  const t0 = performance.now();
  let hashes = 0;
  while (performance.now() - t0 < secs * 1000) {
    solve({ data: { puzzle: 'usher-measure.' + Math.random(), difficulty: 16 } });
    hashes += out[out.length - 1].hashes;
  }
  return hashes / ((performance.now() - t0) / 1000);
}"""


def measure_main(page, label):
    rate = page.evaluate(MEASURE_MAIN, [MEASURE_SECS])
    figure(label, round(rate))
    return rate


def measure(page, label):
    rate = page.evaluate(MEASURE_WORKER, [MEASURE_SECS])
    figure(label, round(rate))
    return rate


def main():
    os.makedirs(SHOTS, exist_ok=True)
    admin("PUT", "/admin/queues/pow", {
        "paused": True,
        "passthrough": False,
        "title": "Concert — proof of work",
        "booking_url": BOOKING + "/entry",
        "challenge": "pow",
        "pow_difficulty": DIFFICULTY,
    })
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,  # a loaded machine may start two Chromiums at once
        )
        ctx = browser.new_context(locale="en-US", viewport=PHONE, is_mobile=True, has_touch=True)
        held = {}

        @scenario("the page solves the puzzle in its worker, with progress, and joins")
        def solves():
            # A quick solution (the solve time is random) can end the challenge before this
            # driver sees the bar move, or sees the challenge at all: then leave that place and
            # join again. Each look at the page is one read, so a state is never half-seen.
            asked = False
            for attempt in range(5):
                page = ctx.new_page()
                workers = []
                page.on("worker", lambda w: workers.append(w.url))
                page.goto(GW + "/q/pow")
                until(page, "['challenge', 'waiting'].includes(document.body.dataset.state)")
                state, msg = page.evaluate(
                    "[document.body.dataset.state, document.getElementById('message').textContent]")
                if state == "challenge":
                    assert "Checking your browser" in msg, msg
                    asked = True
                until(page, "parseFloat(document.getElementById('pow-fill').style.width) > 0"
                      " || document.body.dataset.state === 'waiting'")
                state, width, bar_hidden = page.evaluate(
                    "[document.body.dataset.state,"
                    " parseFloat(document.getElementById('pow-fill').style.width),"
                    " document.getElementById('pow-bar').getClientRects().length === 0]")
                moved = state == "challenge" and width > 0
                if moved:
                    assert not bar_hidden, "the progress bar shows while it moves"
                    shot(page, "pow-challenge")
                wait_state(page, "waiting", timeout=60_000)
                assert any("/q/assets/pow-worker.js" in u for u in workers), workers
                assert page.is_hidden("#pow")
                assert admin("GET", "/admin/queues/pow")["waiting"] == 1, "one place"
                ticket = stored(page, "pow")["ticket"]
                assert ticket.startswith("pow."), "a ticket"
                if moved:
                    assert asked, "the page said it was checking the browser"
                    held["page"] = page
                    return
                log(f"attempt {attempt}: solved before any progress; leaving and joining again")
                status, _ = call("DELETE", GW + "/api/queues/pow/tickets/" + ticket)
                assert status == 204, status
                page.evaluate("localStorage.clear()")
                page.close()
            raise AssertionError("five lucky solutions in a row")

        @scenario("admitted with a token that verifies")
        def admitted():
            page = held["page"]
            posted = []
            page.on("request", lambda r: posted.append(r) if r.url.startswith(BOOKING) else None)
            admin("PUT", "/admin/queues/pow", {"paused": False})
            # The page POSTs the token to the booking site (the form's navigation).
            deadline = time.time() + 20
            while not posted:
                assert time.time() < deadline, ("admitted in time", admin("GET", "/admin/queues/pow"))
                page.wait_for_timeout(50)  # (Playwright delivers events while it is called)
            page.wait_for_selector("#entry", timeout=T)
            form = dict(kv.split("=", 1) for kv in posted[0].post_data.split("&"))
            check_token(urllib.request.unquote(form["token"]), "pow")
            assert form["queue"] == "pow"

        @scenario("the solver's speed, unthrottled and as a phone (4x CPU throttling)")
        def speed():
            # A closed queue's page opens no stream: nothing else runs while the worker hashes.
            admin("PUT", "/admin/queues/measure", {"open": True})
            admin("DELETE", "/admin/queues/measure")
            page = browser.new_context(locale="en-US", bypass_csp=True).new_page()
            page.goto(GW + "/q/measure")
            wait_state(page, "closed")
            worker = measure(page, "js_worker_hashes_per_second")
            full = measure_main(page, "js_main_thread_hashes_per_second")
            cdp = page.context.new_cdp_session(page)
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": 4})
            phone = measure_main(page, "js_main_thread_hashes_per_second_4x_throttled")
            cdp.send("Emulation.setCPUThrottlingRate", {"rate": 1})
            # Figures, not checks: each ran and hashed.
            assert worker > 0 and full > 0 and phone > 0, (worker, full, phone)
            for d in (16, 18, 20, 22):
                figure(f"phone_seconds_at_difficulty_{d}", round(2 ** d / phone, 2))

        solves()
        admitted()
        speed()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("FAILED")
        raise
