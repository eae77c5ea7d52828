"""Browser tests of the states people see on the waiting-room page (issue 24, item 6), on
Debian's Chromium driven by Playwright. Run by crates/usher-testkit/tests/browsers/states_page.rs
with the environment of waiting_room.py (whose helpers it uses).

The last stdout line is `RESULT ok <scenarios>`; a failed check raises.
"""

from datetime import datetime, timezone
import json
import time
from zoneinfo import ZoneInfo

from playwright.sync_api import sync_playwright

from waiting_room import (BOOKING, GW, PHONE, T, admin, passed, scenario, shot, until,
                          wait_position, wait_state)


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def clock(t, zone):
    """`t` as en-US `timeStyle: "short"` writes it in `zone` ("3:05 PM")."""
    d = datetime.fromtimestamp(t, timezone.utc).astimezone(ZoneInfo(zone))
    return f"{d.hour % 12 or 12}:{d.minute:02d} {'AM' if d.hour < 12 else 'PM'}"


def text(page, selector):
    """The element's text, ICU's narrow and no-break spaces as plain ones."""
    return page.inner_text(selector).replace("\u202f", " ").replace("\u00a0", " ")


def main():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,
        )
        new = lambda **kw: browser.new_context(locale=kw.pop("locale", "en-US"), **kw)

        @scenario("the opening time in the browser's time zone, and the draw explained")
        def opening():
            admin("PUT", "/admin/queues/drop", {"paused": True})
            opens = int(time.time()) + 3 * 3600 + 17 * 60  # minutes that differ by zone
            admin("PUT", "/admin/queues/drop", {"opens_at": rfc3339(opens)})
            for zone in ["Asia/Seoul", "America/New_York"]:
                ctx = new(timezone_id=zone, viewport=PHONE, is_mobile=True)
                page = ctx.new_page()
                page.goto(GW + "/q/drop")
                wait_state(page, "scheduled")
                page.wait_for_selector("#opens:not([hidden])", timeout=T)
                shown = text(page, "#opens")
                assert clock(opens, zone) in shown, (zone, clock(opens, zone), shown)
                assert "(your time)" in shown, shown
                assert "random order (a draw)" in shown, shown
                assert "Sales open in" in text(page, "#message"), text(page, "#message")
                if zone == "Asia/Seoul":
                    shot(page, "scheduled-opening-time")
                ctx.close()

        @scenario("maintenance is shown at once with its text, places kept, and cleared")
        def maintenance():
            admin("PUT", "/admin/queues/gig", {"paused": True})
            ctx = new(viewport=PHONE, is_mobile=True)
            page = ctx.new_page()
            page.goto(GW + "/q/gig")
            wait_state(page, "waiting")
            wait_position(page, 1)
            words = "We are fixing the seat map. Back at 10:30."
            admin("PUT", "/admin/queues/gig", {"maintenance": words})
            page.wait_for_selector("#status:not([hidden])", timeout=T)
            assert words in text(page, "#status"), text(page, "#status")
            assert "You keep your place." in text(page, "#status"), text(page, "#status")
            assert page.evaluate("document.body.dataset.state") == "waiting"
            assert page.evaluate("document.body.dataset.position") == "1"
            assert text(page, "#eta") == "Waiting time not known yet", text(page, "#eta")
            shot(page, "maintenance")
            # A page loaded during maintenance shows it from the start.
            late = ctx.new_page()
            late.goto(GW + "/q/gig")
            late.wait_for_selector("#status:not([hidden])", timeout=T)
            assert words in text(late, "#status")
            late.close()
            admin("PUT", "/admin/queues/gig", {"maintenance": None})
            until(page, "document.getElementById('status').hidden")
            assert page.evaluate("document.body.dataset.position") == "1"
            ctx.close()

        @scenario("an ended sale shows the operator's text, also after a reload")
        def ended():
            admin("PUT", "/admin/queues/tour", {"paused": True})
            ctx = new(viewport=PHONE, is_mobile=True)
            page = ctx.new_page()
            page.goto(GW + "/q/tour")
            wait_state(page, "waiting")
            words = "The tour is sold out. Thank you for waiting!"
            admin("PUT", "/admin/queues/tour", {"ended": words})
            wait_state(page, "closed")
            assert text(page, "#message") == words, text(page, "#message")
            shot(page, "ended")
            r = page.goto(GW + "/q/tour")
            assert r.status == 410, r.status
            wait_state(page, "closed")
            assert text(page, "#message") == words, text(page, "#message")
            ctx.close()

        @scenario("a wrong link shows a page, not JSON")
        def unknown():
            ctx = new(viewport=PHONE, is_mobile=True)
            page = ctx.new_page()
            r = page.goto(GW + "/q/nosuch")
            assert r.status == 404, r.status
            shown = text(page, "body")
            assert "There is no waiting line at this address" in shown, shown
            assert "{" not in shown, shown
            shot(page, "unknown-queue")
            ctx.close()

        @scenario("the demo shop fits a phone: landing, the line, booking")
        def books():
            admin("PUT", "/admin/queues/shop", {
                "paused": False, "admit_per_second": 5, "booking_url": BOOKING + "/entry",
            })
            ctx = new(viewport=PHONE, is_mobile=True, has_touch=True)
            page = ctx.new_page()
            page.goto(BOOKING + "/")
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            shot(page, "demo-landing")
            page.click("text=Join the queue")
            page.wait_for_selector("#entry", timeout=20_000)
            fits = page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            assert fits, "the entry page is wider than the phone"
            assert page.evaluate("window.innerWidth") == PHONE["width"], "the viewport applies"
            shot(page, "demo-entry")
            page.select_option("select[name=seat]", "B1")
            page.click("text=Book this seat")
            page.wait_for_selector("#booked", timeout=T)
            assert text(page, "#booked") == "Booked: seat B1 in shop", text(page, "#booked")
            shot(page, "demo-booked")
            ctx.close()

        for s in [opening, maintenance, ended, unknown, books]:
            s()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
