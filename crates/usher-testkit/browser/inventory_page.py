"""Browser test of admission that knows the inventory (issue 24, item 3) on the waiting-room
page, on Debian's Chromium driven by Playwright. Run by
crates/usher-testkit/tests/browsers/inventory_page.rs with the environment of waiting_room.py
(whose helpers it uses), plus USHER_TEST_SERVICE_TOKEN, the dispatcher's service token.

The last stdout line is `RESULT ok <scenarios>`; a failed check raises.
"""

import json
import os

from playwright.sync_api import sync_playwright

from waiting_room import DISPATCHER, GW, PHONE, T, admin, call, passed, scenario, shot, wait_position, wait_state


def report(queue, remaining):
    """What is left, as the booking service reports it (`PUT /api/queues/{q}/inventory`)."""
    auth = {"authorization": "Bearer " + os.environ["USHER_TEST_SERVICE_TOKEN"]}
    status, out = call("PUT", f"{DISPATCHER}/api/queues/{queue}/inventory",
                       {"remaining": remaining}, auth)
    assert status == 200, (status, out)


def inventory_text(page, want):
    """Waits until the page's inventory line says `want`; returns it."""
    page.wait_for_function(
        "w => { const e = document.getElementById('inventory'); "
        "return !e.hidden && e.textContent === w; }", arg=want, timeout=T)
    return page.inner_text("#inventory")


def main():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,
        )

        @scenario("each place reads how many are left and its honest chance, sold out at once")
        def honest():
            # Paused: nobody is admitted, so the three places keep positions 1, 2 and 3.
            admin("PUT", "/admin/queues/seats", {"paused": True, "passthrough": False,
                                                 "title": "Seats — usher demo"})
            pages = []
            for p in (1, 2, 3):
                ctx = browser.new_context(locale="en-US", viewport=PHONE, is_mobile=True)
                page = ctx.new_page()
                page.goto(GW + "/q/seats")
                wait_state(page, "waiting")
                wait_position(page, p)
                pages.append(page)
            assert pages[0].is_hidden("#inventory"), "no report: nothing said"
            report("seats", 2)
            inventory_text(pages[0], "2 left; your place is likely to get one.")
            inventory_text(pages[1], "2 left; your place is likely to get one.")
            inventory_text(pages[2], "2 left; your place is unlikely to get one.")
            shot(pages[2], "inventory-unlikely")
            report("seats", 0)
            for page in pages:
                inventory_text(page, "Sold out for now: seats may come back from abandoned carts.")
                assert page.evaluate("document.body.dataset.state") == "waiting", "the place is kept"
                assert page.inner_text("#eta") == "Waiting time not known yet", page.inner_text("#eta")
            shot(pages[0], "inventory-sold-out")

        @scenario("the dashboard shows what is left and the report's age, and sets the basket")
        def dashboard():
            ctx = browser.new_context(locale="en-US", viewport={"width": 1280, "height": 800})
            page = ctx.new_page()
            page.goto(DISPATCHER + "/admin/ui")
            page.fill("#token", os.environ["USHER_TEST_ADMIN_TOKEN"])
            page.click("#login-form button")
            card = "[data-queue='seats']"
            page.wait_for_function(
                f"() => document.querySelector(\"{card} [data-field='inventory_remaining']\")"
                "?.textContent === '0'", timeout=T)
            report("seats", 7)
            page.wait_for_function(
                f"() => document.querySelector(\"{card} [data-field='inventory_remaining']\")"
                "?.textContent === '7'", timeout=T)
            age = page.inner_text(f"{card} [data-field='inventory_report_age_seconds']")
            assert age.isdigit() and int(age) < 60, age
            assert page.inner_text(f"{card} [data-field='basket_size']") == "1"
            # The basket size is set from the card's settings: only it is sent.
            page.click(f"{card} summary")
            page.fill(f"{card} [name=basket_size]", "2")
            page.click(f"{card} button:text('Apply changes…')")
            page.wait_for_function("() => document.getElementById('confirm').open", timeout=T)
            shown = page.inner_text("#confirm-call")
            assert shown.startswith("PUT /admin/queues/seats"), shown
            assert json.loads(shown.split("\n\n", 1)[1]) == {"basket_size": 2}, shown
            page.click("#confirm-ok")
            page.wait_for_function(
                f"() => document.querySelector(\"{card} [data-field='basket_size']\")"
                "?.textContent === '2'", timeout=T)
            assert admin("GET", "/admin/queues/seats")["basket_size"] == 2
            shot(page, "inventory-dashboard")
            ctx.close()

        honest()
        dashboard()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
