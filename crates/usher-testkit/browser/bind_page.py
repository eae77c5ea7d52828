"""The waiting-room page on a queue that binds places to the browser's key (`bind:
"browser_key"`), and what the page keeps after admission (issue 23, finding 10), in Debian's
Chromium driven by Playwright.

Run by crates/usher-testkit/tests/browsers/bind.rs, which starts Redis, a dispatcher, a gateway
and the demo booking service as real processes and passes their URLs in the environment (as
waiting_room.py, whose helpers this reuses). The last stdout line is `RESULT ok <scenarios>`.
"""

import base64
import json
import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(__file__))
from waiting_room import (  # noqa: E402
    BOOKING, GW, PHONE, admin, call, log, passed, scenario, shot, stored, until, wait_state,
)
from playwright.sync_api import sync_playwright  # noqa: E402

BOUND = "bound"
PLAIN = "plain"


def claims_of(token):
    return json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))


def form_of(request):
    return {k: v[0] for k, v in urllib.parse.parse_qs(request.post_data).items()}


def wait_posted(page, posted, n, queue):
    deadline = time.time() + 20
    while len(posted) < n:
        assert time.time() < deadline, ("the booking POST in time", admin("GET", f"/admin/queues/{queue}"))
        page.wait_for_timeout(50)  # (Playwright delivers events while it is called)


def storage(page):
    """Everything the page's origin keeps in localStorage, and this tab's sessionStorage."""
    return page.evaluate("[JSON.stringify(localStorage), JSON.stringify(sessionStorage)]")


def main():
    for q, extra in [(BOUND, {"bind": "browser_key"}), (PLAIN, {})]:
        admin("PUT", f"/admin/queues/{q}", {
            "paused": True, "passthrough": False, "title": "Bound — usher demo",
            "booking_url": BOOKING + "/entry", **extra,
        })
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,
        )
        ctx = browser.new_context(locale="en-US", viewport=PHONE)
        held = {}

        @scenario("a bind queue: the page joins with a key it keeps in IndexedDB")
        def join():
            page = ctx.new_page()
            streams = []
            page.on("request", lambda r: streams.append(r.url) if "/stream" in r.url else None)
            page.goto(GW + f"/q/{BOUND}")
            wait_state(page, "waiting")
            assert admin("GET", f"/admin/queues/{BOUND}")["waiting"] == 1, "one place"
            assert all("proof=" in u for u in streams), streams
            extractable = page.evaluate("""() => new Promise((ok, fail) => {
              const r = indexedDB.open('usher-keys', 1);
              r.onerror = () => fail(r.error);
              r.onsuccess = () => {
                const g = r.result.transaction('keys').objectStore('keys').get('bound');
                g.onsuccess = () => ok(g.result ? g.result.privateKey.extractable : null);
              };
            })""")
            assert extractable is False, f"a stored, non-extractable key: {extractable}"
            held["page"], held["streams"] = page, streams
            held["ticket"] = stored(page, BOUND)["ticket"]
            shot(page, "bind-waiting")

        @scenario("a ticket copied into a second browser cannot resume")
        def copied():
            other = browser.new_context(locale="en-US", viewport=PHONE)
            saved = json.dumps({"ticket": held["ticket"]})
            other.add_init_script(f"localStorage.setItem('usher:{BOUND}', {json.dumps(saved)})")
            page = other.new_page()
            page.goto(GW + f"/q/{BOUND}")
            wait_state(page, "closed")
            msg = page.text_content("#message")
            assert "another browser" in msg, msg
            assert stored(page, BOUND) == {}, "the copied ticket is forgotten"
            assert admin("GET", f"/admin/queues/{BOUND}")["waiting"] == 1, "no second place"
            # The owner still holds its place, at the same position.
            assert held["page"].evaluate("document.body.dataset.position") == "1"
            shot(page, "bind-wrong-key")
            other.close()

        @scenario("the same browser after a reload resumes its place")
        def reload():
            page = held["page"]
            page.reload()
            wait_state(page, "waiting")
            assert stored(page, BOUND)["ticket"] == held["ticket"]
            assert admin("GET", f"/admin/queues/{BOUND}")["waiting"] == 1, "the same place"
            # Every stream request carried its own proof: none was sent twice.
            proofs = [urllib.parse.parse_qs(urllib.parse.urlparse(u).query)["proof"][0]
                      for u in held["streams"]]
            assert len(proofs) >= 2 and len(set(proofs)) == len(proofs), held["streams"]

        def admitted_and_booked(q, page, bound):
            posted = []
            page.on("request", lambda r: posted.append(r) if r.url.startswith(BOOKING) else None)
            admin("PUT", f"/admin/queues/{q}", {"paused": False})
            wait_posted(page, posted, 1, q)
            admin("PUT", f"/admin/queues/{q}", {"paused": True})  # the next joins wait
            page.wait_for_selector("#entry", timeout=15_000)
            form = form_of(posted[0])
            claims = claims_of(form["token"])
            if bound:
                assert "cnf" in claims and len(claims["cnf"]["jkt"]) == 43, claims
                assert form.get("proof"), "the form carries a proof of the key"
            else:
                assert "cnf" not in claims and "proof" not in form, (claims, form)
            # The waiting room's origin, read from a tab that runs no page script: nothing of
            # the entry is left in its localStorage.
            probe = page.context.new_page()
            probe.goto(GW + "/q/assets/page.css")
            local = probe.evaluate("JSON.stringify(localStorage)")
            assert stored(probe, q) == {}, f"no ticket in localStorage: {local}"
            assert form["token"] not in local and held["ticket"] not in local, local
            probe.close()
            # Back to the waiting room (as after a failed POST): the entry is offered, not sent.
            page.go_back()
            deadline = time.time() + 15
            while len(posted) == 1:
                try:
                    if page.evaluate("document.body.dataset.state") == "admitted":
                        break
                except Exception:  # a navigation under way
                    pass
                assert time.time() < deadline, "the page came back"
                page.wait_for_timeout(50)
            assert len(posted) == 1, "going back replayed the entry"
            wait_state(page, "admitted")
            local, session = storage(page)
            assert form["token"] in session, "the entry waits in this tab's sessionStorage"
            # A reload offers the entry again and sends nothing by itself.
            page.reload()
            wait_state(page, "admitted")
            until(page, "!document.getElementById('primary').hidden")
            assert "Your entry was sent" in page.text_content("#message")
            assert len(posted) == 1, "a reload replayed the entry"
            # The next person on this computer opens the page in a new tab: a new place.
            fresh = page.context.new_page()
            fresh.goto(GW + f"/q/{q}")
            wait_state(fresh, "waiting")
            assert stored(fresh, q)["ticket"] != held.get("ticket"), "a new place, not a replay"
            assert len(posted) == 1
            # ... and the retry button still sends it from the original tab.
            page.click("#primary")
            wait_posted(page, posted, 2, q)
            page.wait_for_selector("#entry", timeout=15_000)
            fresh.close()

        @scenario("bind: admitted, the form carries a proof, the page forgets the ticket")
        def admitted_bound():
            admitted_and_booked(BOUND, held["page"], True)

        @scenario("no bind: after admission and the booking POST nothing is left to replay")
        def admitted_plain():
            page = ctx.new_page()
            page.goto(GW + f"/q/{PLAIN}")
            wait_state(page, "waiting")
            held["ticket"] = stored(page, PLAIN)["ticket"]
            admitted_and_booked(PLAIN, page, False)

        # USHER_TEST_ONLY=plain runs the last scenario alone (e.g. against another page
        # directory, USHER_PAGE_DIR, to see the old page replay the entry).
        if os.environ.get("USHER_TEST_ONLY") != "plain":
            join()
            copied()
            reload()
            admitted_bound()
        admitted_plain()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("FAILED")
        raise
