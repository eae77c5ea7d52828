"""The fairness report's page on the operator dashboard (issue 25, part 2), on Debian's
Chromium driven by Playwright.

Run by crates/usher-testkit/tests/browsers/report_page.rs, which starts Redis and a
dispatcher (with an admin token) as real processes, records a sale in the queue `concert`,
and passes in the environment:

  USHER_TEST_DISPATCHER        the dispatcher's base URL
  USHER_TEST_ADMIN_TOKEN       its admin token
  USHER_TEST_SCREENSHOTS       where screenshots go

The last stdout line is `RESULT ok <scenarios>`. Any failed check raises.
"""

import json
import os

from playwright.sync_api import sync_playwright

import driver
from driver import log

DISPATCHER = os.environ["USHER_TEST_DISPATCHER"]
TOKEN = os.environ["USHER_TEST_ADMIN_TOKEN"]
SHOTS = os.environ["USHER_TEST_SCREENSHOTS"]
T = 20_000
PLOTS = ["plot-waits", "plot-joined", "plot-order", "plot-abandon", "plot-sessions", "plot-networks"]


def main():
    os.makedirs(SHOTS, exist_ok=True)
    passed = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,
        )
        page = browser.new_page(viewport={"width": 1280, "height": 900}, locale="en-US")
        # Failed requests of the report page (the browser's own favicon request aside).
        failed = []
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}")
                if r.status >= 400 and "favicon" not in r.url else None)
        page.goto(DISPATCHER + "/admin/ui")
        page.fill("#token", TOKEN)
        page.click("#login-form button")
        driver.until(page, "!document.getElementById('app').hidden", T)
        log("--- the queue's card links to its report")
        link = "[data-queue='concert'] a[data-field='report']"
        driver.until(page, f"document.querySelector(\"{link}\") !== null", T)
        failed.clear()
        page.click(link)
        log("--- every plot drawn, with marks")
        for plot in PLOTS:
            marks = f"document.querySelectorAll('#{plot} svg rect, #{plot} svg path').length"
            driver.until(page, f"{marks} > 0", T)
        waits = page.evaluate("document.querySelectorAll('#plot-waits svg path').length")
        assert waits == 4, f"four lines (median, 90th, 99th, ETA): {waits}"
        cards = page.evaluate(
            "Object.fromEntries([...document.querySelectorAll('#cards div')]"
            ".map(d => [d.querySelector('dt').textContent, d.querySelector('dd').textContent]))")
        log(json.dumps(cards))
        assert cards["Unexplained inversions"] == "0", cards
        assert cards["Kendall's tau"] == "1.000", cards
        assert int(cards["Admitted"]) > 100, cards
        assert cards["Let through an open door"] == "0", cards
        assert "Still waiting" in cards, cards
        assert page.inner_text("#draw") .startswith("Draw"), page.inner_text("#draw")
        assert not failed, failed
        page.screenshot(path=os.path.join(SHOTS, "fairness-report.png"), full_page=True)
        passed.append("the report page draws every plot")
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
