"""Lanes on the operator dashboard (issue 24, item 2), on Debian's Chromium driven by
Playwright.

Run by crates/usher-testkit/tests/browsers/lanes_page.rs, which starts Redis, a dispatcher
(with an admin token) and a gateway as real processes and passes in the environment:

  USHER_TEST_DISPATCHER        the dispatcher's base URL
  USHER_TEST_ADMIN_TOKEN       its admin token
  USHER_TEST_SCREENSHOTS       where screenshots go

Control lines go to stdout (`CONTROL join <queue> <n>`: the Rust test starts n simulated
browsers waiting in the queue's default lane, and answers `OK` on stdin). The last stdout
line is `RESULT ok <scenarios>`. Any failed check raises.
"""

import json
import os
import urllib.request

from playwright.sync_api import sync_playwright

import driver
from driver import control, log

DISPATCHER = os.environ["USHER_TEST_DISPATCHER"]
TOKEN = os.environ["USHER_TEST_ADMIN_TOKEN"]
SHOTS = os.environ["USHER_TEST_SCREENSHOTS"]
T = 20_000
Q = "laned"
CARD = f"[data-queue='{Q}']"


def admin_put(path, body):
    req = urllib.request.Request(DISPATCHER + path, method="PUT", data=json.dumps(body).encode(),
                                 headers={"authorization": "Bearer " + TOKEN,
                                          "content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def main():
    os.makedirs(SHOTS, exist_ok=True)
    passed = []
    # The queue admits nobody during the test (a rate must be above zero).
    admin_put(f"/admin/queues/{Q}", {
        "admit_per_second": 0.000001, "open": True, "passthrough": False,
        "lanes": [{"name": "general", "share": 70}, {"name": "members", "share": 30}]})
    control(f"join {Q} 3")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,
        )
        page = browser.new_page(viewport={"width": 1280, "height": 800}, locale="en-US")
        page.goto(DISPATCHER + "/admin/ui")
        page.fill("#token", TOKEN)
        page.click("#login-form button")
        driver.until(page, "!document.getElementById('app').hidden", T)
        log("--- each lane's share and count")
        lanes = f"document.querySelector(\"{CARD} [data-field='lanes']\")"
        expected = "general* 70 %: 3 · members 30 %: 0"
        driver.until(page, f"{lanes} !== null && {lanes}.textContent === {json.dumps(expected)}", T)
        assert page.inner_text(f"{CARD} [data-field='waiting']") == "3"
        page.locator(CARD).screenshot(path=os.path.join(SHOTS, "dashboard-lanes.png"))
        passed.append("the dashboard shows each lane's share and count")
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
