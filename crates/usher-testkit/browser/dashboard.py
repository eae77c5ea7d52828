"""Browser tests of the operator dashboard (`/admin/ui` on the dispatcher), on Debian's
Chromium driven by Playwright.

Run by crates/usher-testkit/tests/browsers/dashboard.rs, which starts Redis, a dispatcher (with an admin
token) and a gateway as real processes and passes in the environment:

  USHER_TEST_DISPATCHER, USHER_TEST_GATEWAY  base URLs
  USHER_TEST_ADMIN_TOKEN                     the dispatcher's admin token
  USHER_TEST_SCREENSHOTS                     where screenshots go

Control lines go to stdout (`CONTROL join <queue> <n>`: the Rust test starts n simulated
browsers waiting in the queue, and answers `OK` on stdin). The last stdout line is
`RESULT ok <scenarios>`. Any failed check raises, which exits non-zero with the traceback on
stderr.
"""

import json
import os
import time
from datetime import datetime, timedelta, timezone
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

import driver
from driver import control, log

DISPATCHER = os.environ["USHER_TEST_DISPATCHER"]
GATEWAY = os.environ["USHER_TEST_GATEWAY"]
TOKEN = os.environ["USHER_TEST_ADMIN_TOKEN"]
SHOTS = os.environ["USHER_TEST_SCREENSHOTS"]
UI = DISPATCHER + "/admin/ui"
T = 20_000  # ms: the longest any single wait may take
LAPTOP = {"width": 1280, "height": 800}
Q = "dash"
CARD = f"[data-queue='{Q}']"
passed = []


def admin(method, path):
    """The admin API as the test sees it (checks what the dashboard's calls did)."""
    req = urllib.request.Request(DISPATCHER + path, method=method,
                                 headers={"authorization": "Bearer " + TOKEN})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def admin_put(path, body):
    """`PUT` with a JSON body through the admin API (set-up the dashboard does not do)."""
    req = urllib.request.Request(DISPATCHER + path, method="PUT", data=json.dumps(body).encode(),
                                 headers={"authorization": "Bearer " + TOKEN,
                                          "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def shot(page, name, **kw):
    page.screenshot(path=os.path.join(SHOTS, name + ".png"), **kw)


def until(page, expr, timeout=T):
    driver.until(page, expr, timeout)


def field(page, name):
    return page.inner_text(f"{CARD} [data-field='{name}']")


def number(page, name):
    return int(field(page, name))


def calls(page):
    return page.eval_on_selector_all("#calls li", "ls => ls.map(l => l.textContent)")


def confirm(page, expect_call):
    """Checks the confirmation dialog shows the call (token redacted) and confirms it; returns
    the body it showed (None without one)."""
    until(page, "document.getElementById('confirm').open")
    shown = page.inner_text("#confirm-call")
    assert shown.startswith(expect_call), shown
    assert "Bearer [redacted]" in shown and TOKEN not in shown, shown
    before = len(calls(page))
    page.click("#confirm-ok")
    until(page, f"document.querySelectorAll('#calls li').length > {before}")
    last = calls(page)[0]
    assert expect_call in last and last.endswith("ok"), last
    assert TOKEN not in page.inner_text("body")
    body = shown.split("\n\n", 1)
    return json.loads(body[1]) if len(body) == 2 else None


def scenario(name):
    def wrap(f):
        def run(*a):
            log(f"--- {name}")
            f(*a)
            passed.append(name)
        return run
    return wrap


def main():
    os.makedirs(SHOTS, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,  # a loaded machine may start two Chromiums at once
        )
        ctx = browser.new_context(viewport=LAPTOP, locale="en-US")
        page = ctx.new_page()
        errors = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))

        @scenario("a wrong token shows an error")
        def wrong_token():
            page.goto(UI)
            until(page, "document.activeElement && document.activeElement.id === 'token'")
            page.keyboard.type("not-the-token")
            page.keyboard.press("Enter")
            until(page, "document.getElementById('login-error').textContent.includes('refused')")
            assert page.is_hidden("#app")
            assert page.evaluate("sessionStorage.length") == 0, "a refused token is not kept"
            shot(page, "dashboard-login-error")
            # The refused calls are the only console errors (401s).
            errors.clear()

        @scenario("sign in keeps the token in sessionStorage, no cookie")
        def sign_in():
            page.fill("#token", TOKEN)
            page.click("#login-form button")
            until(page, "!document.getElementById('app').hidden")
            assert page.evaluate("sessionStorage.getItem('usher-admin-token')") == TOKEN
            assert page.evaluate("document.cookie") == ""
            page.reload()
            until(page, "!document.getElementById('app').hidden")

        @scenario("create a queue through the UI")
        def create():
            page.fill("#create-form [name=queue]", Q)
            # 1/s: the 40 people of the next scenario wait about 40 s, longer than the steps up
            # to the pause (which needs people still waiting) take on a loaded machine.
            page.fill("#create-form [name=admit_per_second]", "1")
            page.click("#create-form button[type=submit]")
            body = confirm(page, f"PUT /admin/queues/{Q}")
            assert body == {"admit_per_second": 1}, body
            until(page, f"document.querySelector(\"{CARD}\") !== null")
            assert admin("GET", f"/admin/queues/{Q}")["admit_per_second"] == 1
            assert field(page, "state") == "open"
            # Fields this dispatcher may not report yet read "—", never "undefined".
            assert field(page, "max_active") == "—"
            assert "undefined" not in page.inner_text(CARD)
            unlabelled = page.evaluate("""[...document.querySelectorAll('input, select, button')]
                .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                             && !e.textContent.trim())
                .map(e => e.name || e.id || e.outerHTML)""")
            assert not unlabelled, f"controls without a label: {unlabelled}"

        @scenario("the numbers move while browsers wait")
        def numbers():
            control(f"join {Q} 40")
            until(page, f"Number(document.querySelector(\"{CARD} [data-field='waiting']\").textContent) > 10")
            first = number(page, "waiting")
            until(page, f"Number(document.querySelector(\"{CARD} [data-field='waiting']\").textContent) < {first}")
            until(page, f"Number(document.querySelector(\"{CARD} [data-field='admitted_total']\").textContent) > 0")
            until(page, f"parseFloat(document.querySelector(\"{CARD} [data-field='measured_per_second']\").textContent) > 0")
            assert field(page, "eta_last").startswith("about"), field(page, "eta_last")
            points = page.eval_on_selector(f"{CARD} polyline[data-series='waiting']",
                                           "p => p.getAttribute('points').split(' ').length")
            assert points >= 3, points
            until(page, f"[...document.querySelectorAll('#gateways tbody tr')].some(r => r.textContent.includes('{Q}'))")
            assert "alive" in page.inner_text("#gateways tbody")
            until(page, "Number(document.querySelector(\"#gateways [data-field='streams']\").textContent) > 0")
            page.select_option("#window", "5")
            assert "−5 min" in page.text_content(f"{CARD} svg")
            shot(page, "dashboard", full_page=True)

        @scenario("a cancelled dialog makes no call")
        def cancel():
            before = len(calls(page))
            page.click(f"{CARD} button:text('Pause…')")
            until(page, "document.getElementById('confirm').open")
            page.keyboard.press("Escape")
            until(page, "!document.getElementById('confirm').open")
            time.sleep(0.5)
            assert len(calls(page)) == before
            assert admin("GET", f"/admin/queues/{Q}")["paused"] is False

        @scenario("pause stops admission while the line keeps its place")
        def pause():
            page.click(f"{CARD} button:text('Pause…')")
            shot(page, "dashboard-confirm")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"paused": True}
            until(page, f"document.querySelector(\"{CARD} [data-field='state']\").textContent === 'paused'")
            assert admin("GET", f"/admin/queues/{Q}")["paused"] is True
            time.sleep(1)  # admissions minted before the pause are delivered
            admitted = admin("GET", f"/admin/queues/{Q}")["admitted_total"]
            time.sleep(4)  # two polls
            view = admin("GET", f"/admin/queues/{Q}")
            assert view["admitted_total"] == admitted and view["waiting"] > 0, view
            assert field(page, "eta_last").startswith("never"), field(page, "eta_last")
            assert number(page, "waiting") == view["waiting"]
            shot(page, "dashboard-paused")

        @scenario("send a notice")
        def notice():
            page.fill(f"{CARD} [name=message]", "Section A is sold out")
            page.click(f"{CARD} button:text('Send notice…')")
            assert confirm(page, f"POST /admin/queues/{Q}/notice") == {"message": "Section A is sold out"}

        @scenario("maintenance with its text, and a scheduled sale's entrants")
        def states():
            page.fill(f"{CARD} [name=state_text]", "Back at ten")
            page.click(f"{CARD} button:text('Start maintenance…')")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"maintenance": "Back at ten"}
            until(page, f"document.querySelector(\"{CARD} [data-field='state']\").textContent === 'maintenance'")
            assert field(page, "maintenance") == "Back at ten", field(page, "maintenance")
            assert admin("GET", f"/admin/queues/{Q}")["maintenance"] == "Back at ten"
            shot(page, "dashboard-maintenance")
            page.click(f"{CARD} button:text('End maintenance…')")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"maintenance": None}
            until(page, f"document.querySelector(\"{CARD} [data-field='maintenance']\").textContent === '—'")
            # A scheduled sale: its pre-queue's people show before the draw, `waiting` stays 0.
            admin_put("/admin/queues/drop", {"paused": True,
                                             "opens_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 900))})
            control("join drop 3")
            drop = "[data-queue='drop']"
            until(page, f"document.querySelector(\"{drop} [data-field='entrants']\")?.textContent === '3'")
            assert page.inner_text(f"{drop} [data-field='waiting']") == "0"

        @scenario("change the rate: only the changed field is sent")
        def rate():
            page.click(f"{CARD} summary")
            page.fill(f"{CARD} [name=admit_per_second]", "50")
            page.click(f"{CARD} button:text('Apply changes…')")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"admit_per_second": 50}
            assert admin("GET", f"/admin/queues/{Q}")["admit_per_second"] == 50
            until(page, f"document.querySelector(\"{CARD} [data-field='admit_per_second']\").textContent === '50'")

        @scenario("no-shows: the arrival deadline and make-up are set, the share is shown")
        def no_shows():
            # The settings form is open (the rate scenario opened it).
            assert page.inner_text(f"{CARD} [data-field='no_show_ratio']") == "—"  # not measured
            page.fill(f"{CARD} [name=arrival_seconds]", "30")
            page.select_option(f"{CARD} [name=make_up_no_shows]", "true")
            page.click(f"{CARD} button:text('Apply changes…')")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"arrival_seconds": 30, "make_up_no_shows": True}
            q = admin("GET", f"/admin/queues/{Q}")
            assert (q["arrival_seconds"], q["make_up_no_shows"], q["no_show_ratio"]) == (30, True, None), q
            until(page, f"document.querySelector(\"{CARD} [data-field='no_shows_total']\").textContent === '0'")
            # Off again: the browsers of the later scenarios are never checked by a booking service.
            admin_put(f"/admin/queues/{Q}", {"arrival_seconds": None, "make_up_no_shows": False})
            until(page, f"document.querySelector(\"{CARD} [name=arrival_seconds]\").value === ''")

        # >>> door
        @scenario("the open door: set through the form, its last period shown")
        def open_door():
            # A period a gateway recorded once Redis was back (the test writes one through the
            # store as soon as the queue exists: an outage is open_door::'s to cause).
            until(page, f"document.querySelector(\"{CARD} [data-field='door_last']\").textContent.includes('7 let through (gateway 1)')")
            assert page.inner_text(f"{CARD} [data-field='door_admitted_total']") == "7"
            assert page.inner_text(f"{CARD} [data-field='on_outage']") == "hold"
            page.select_option(f"{CARD} [name=on_outage]", "open")
            page.fill(f"{CARD} [name=door_after_seconds]", "20")
            page.click(f"{CARD} button:text('Apply changes…')")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"on_outage": "open", "door_after_seconds": 20}
            q = admin("GET", f"/admin/queues/{Q}")
            assert (q["on_outage"], q["door_after_seconds"], q["door_admitted_total"]) == ("open", 20, 7), q
            until(page, f"document.querySelector(\"{CARD} [data-field='on_outage']\").textContent === 'open the door after 20 s'")
            admin_put(f"/admin/queues/{Q}", {"on_outage": "hold"})
            until(page, f"document.querySelector(\"{CARD} [name=on_outage]\").value === 'hold'")
        # <<< door

        @scenario("a stale edit is refused with 412 and the form shows the settings now")
        def stale_edit():
            version = admin("GET", f"/admin/queues/{Q}")["settings_version"]
            # The form was filled from that version (a poll after the last change).
            until(page, f"document.querySelector(\"{CARD} form.controls\").dataset.version === '\"{version}\"'")
            page.fill(f"{CARD} [name=admit_per_second]", "60")
            admin_put(f"/admin/queues/{Q}", {"admit_per_second": 70})  # another operator
            time.sleep(2.5)  # a poll while editing keeps the version the edit began from
            page.click(f"{CARD} button:text('Apply changes…')")
            until(page, "document.getElementById('confirm').open")
            shown = page.inner_text("#confirm-call")
            assert f'If-Match: "{version}"' in shown, shown
            before = len(calls(page))
            page.click("#confirm-ok")
            until(page, f"document.querySelectorAll('#calls li').length > {before}")
            last = calls(page)[0]
            assert "412" in last, last
            assert admin("GET", f"/admin/queues/{Q}")["admit_per_second"] == 70
            until(page, f"document.querySelector(\"{CARD} [name=admit_per_second]\").value === '70'")
            # Made again from the settings shown now, it is written.
            page.fill(f"{CARD} [name=admit_per_second]", "60")
            page.click(f"{CARD} button:text('Apply changes…')")
            until(page, "document.getElementById('confirm').open")
            assert f'If-Match: "{version + 1}"' in page.inner_text("#confirm-call")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"admit_per_second": 60}
            assert admin("GET", f"/admin/queues/{Q}")["admit_per_second"] == 60
            # The next control's If-Match is the version now (a poll after the change).
            until(page, f"document.querySelector(\"{CARD} form.controls\").dataset.version === '\"{version + 2}\"'")

        @scenario("resume admits everyone")
        def resume():
            page.click(f"{CARD} button:text('Resume…')")
            assert confirm(page, f"PUT /admin/queues/{Q}") == {"paused": False}
            until(page, f"document.querySelector(\"{CARD} [data-field='waiting']\").textContent === '0'")
            assert field(page, "eta_last") == "nobody waiting"

        @scenario("a change that needs confirming is asked again with the reason")
        def confirm_again():
            sale = "dashsale"
            card = f"[data-queue='{sale}']"
            opens = (datetime.now(timezone.utc) + timedelta(seconds=2)).isoformat()
            admin_put(f"/admin/queues/{sale}", {"admit_per_second": 5, "opens_at": opens})
            deadline = time.monotonic() + T / 1000
            while True:  # the draw runs at opens_at (no browser joined: an empty record)
                with urllib.request.urlopen(f"{GATEWAY}/api/queues/{sale}/draw", timeout=10) as r:
                    if json.loads(r.read())["status"] == "done":
                        break
                assert time.monotonic() < deadline, "the draw did not run"
                time.sleep(0.2)
            until(page, f"document.querySelector(\"{card}\") !== null")
            page.click(f"{card} summary")
            page.fill(f"{card} [name=opens_at]", "2035-01-31T18:00")
            page.click(f"{card} button:text('Apply changes…')")
            until(page, "document.getElementById('confirm').open")
            assert "confirm" not in page.inner_text("#confirm-call").split("\n\n", 1)[1]
            before = len(calls(page))
            page.click("#confirm-ok")
            # Refused with 409: asked again, with the dispatcher's reason and "confirm": true.
            until(page, f"document.querySelectorAll('#calls li').length > {before}")
            assert "409" in calls(page)[0], calls(page)[0]
            until(page, "document.getElementById('confirm').open")
            assert "discards the draw" in page.inner_text("#confirm-text"), page.inner_text("#confirm-text")
            body = confirm(page, f"PUT /admin/queues/{sale}")
            assert body["confirm"] is True, body
            assert admin("GET", f"/admin/queues/{sale}")["opens_at"].startswith("2035-01-31")

        @scenario("close with a reason")
        def close():
            page.select_option(f"{CARD} select[aria-label='Close reason']", "sold_out")
            page.click(f"{CARD} button:text('Close…')")
            assert confirm(page, f"DELETE /admin/queues/{Q}?reason=sold_out") is None
            until(page, f"document.querySelector(\"{CARD} [data-field='state']\").textContent.startsWith('closed')")
            assert admin("GET", f"/admin/queues/{Q}")["open"] is False

        @scenario("the readiness panel shows each check and its fix")
        def readiness():
            page.fill("#readiness-form [name=crowd]", "1000")
            page.click("#readiness-form button:text('Check')")
            until(page, "!document.getElementById('readiness').hidden")
            rows = page.eval_on_selector_all(
                "#readiness tbody tr",
                "rs => rs.map(r => [r.dataset.check, r.querySelector('[data-field=outcome]').textContent,"
                " r.querySelector('[data-field=fix]').textContent])")
            report = admin("GET", "/admin/readiness?crowd=1000")
            assert [r[0] for r in rows] == [c["check"] for c in report["checks"]], rows
            shown = {r[0]: (r[1], r[2]) for r in rows}
            # This test's Redis has no AOF and there is one dispatcher.
            assert shown["persistence"][0] == "fail" and "appendonly yes" in shown["persistence"][1], shown
            assert shown["dispatcher_replicas"][0] == "fail", shown
            assert shown["eviction"] == ("pass", "—"), shown
            assert page.inner_text("#readiness-outcome") == "fail"
            page.locator("#readiness").scroll_into_view_if_needed()
            shot(page, "dashboard-readiness")

        @scenario("sign out forgets the token")
        def sign_out():
            page.click("#logout")
            until(page, "!document.getElementById('login').hidden")
            assert page.evaluate("sessionStorage.length") == 0
            assert page.query_selector(CARD) is None

        for s in [wrong_token, sign_in, create, numbers, cancel, pause, notice, states, rate,
                  no_shows, open_door, stale_edit, resume, confirm_again, close, readiness, sign_out]:
            s()
        # Chromium logs every refused call: the wrong token's 401, the stale edit's 412 and
        # the unconfirmed change's 409.
        unexpected = [e for e in errors if not any(s in e for s in ("401", "409", "412"))]
        assert not unexpected, f"console errors: {unexpected}"
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
