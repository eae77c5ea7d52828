"""The waiting-room page on an invite-only queue (docs/sale-day.md, "Invitations"), in
Debian's Chromium driven by Playwright.

Run by crates/usher-testkit/tests/browsers/invitations_page.rs, which starts Redis, a
dispatcher, a gateway and the demo booking service as real processes and passes their URLs in
the environment (as waiting_room.py, whose helpers this reuses). Invitations are signed here
with a fresh Ed25519 key by PyJWT, as a shop's Python would. The last stdout line is
`RESULT ok <scenarios>`.
"""

import base64
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from waiting_room import (  # noqa: E402
    DISPATCHER, GW, PHONE, admin, log, passed, scenario, shot, until, wait_state,
)
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey  # noqa: E402
from cryptography.hazmat.primitives import serialization  # noqa: E402
import jwt  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

Q = "presale"
SHOP = Ed25519PrivateKey.generate()
RAW = SHOP.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
JWK = {"kty": "OKP", "crv": "Ed25519", "kid": "shop-1",
       "x": base64.urlsafe_b64encode(RAW).decode().rstrip("=")}


def invite(account, exp_in=3600):
    return jwt.encode({"sub": account, "aud": Q, "exp": int(time.time()) + exp_in},
                      SHOP, algorithm="EdDSA", headers={"kid": "shop-1"})


def waiting():
    return admin("GET", f"/admin/queues/{Q}")["waiting"]


def main():
    admin("PUT", f"/admin/queues/{Q}", {
        "paused": True, "passthrough": False, "title": "Presale — usher demo",
        "invitations": "required", "invitation_keys": [JWK],
    })
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,
        )
        held = {}

        def open_page(fragment=""):
            ctx = browser.new_context(locale="en-US", viewport=PHONE)
            page = ctx.new_page()
            requests = []
            page.on("request", lambda r: requests.append(r))
            page.goto(GW + f"/q/{Q}" + fragment)
            return page, requests

        @scenario("an invitation in the link joins; it leaves neither the address bar nor a URL")
        def join():
            token = invite("acct-7")
            page, requests = open_page("#invitation=" + token)
            wait_state(page, "waiting")
            assert page.evaluate("document.body.dataset.position") == "1"
            assert "invitation" not in page.url, page.url
            assert waiting() == 1, "one place"
            streams = [r.url for r in requests if "/stream" in r.url]
            posts = [r for r in requests if r.url.endswith(f"/api/queues/{Q}/invitation")]
            assert streams and all("join=" in u and token not in u for u in streams), streams
            assert all(token not in r.url for r in requests), "the invitation is in no URL"
            assert len(posts) == 1 and posts[0].method == "POST", posts
            assert posts[0].headers.get("authorization") == "Bearer " + token
            held["first"] = page
            shot(page, "invitation-waiting")

        @scenario("a second browser of the same account takes the place over")
        def second_device():
            page, _ = open_page("#invitation=" + invite("acct-7"))
            wait_state(page, "waiting")
            assert page.evaluate("document.body.dataset.position") == "1"
            wait_state(held["first"], "closed")
            msg = held["first"].text_content("#message")
            assert "another tab or window" in msg, msg
            assert waiting() == 1, "still one place"

        @scenario("no invitation on an invite-only queue: the page says so")
        def uninvited():
            page, _ = open_page()
            wait_state(page, "closed")
            msg = page.text_content("#message")
            assert "by invitation only" in msg, msg
            assert waiting() == 1, "no place taken"
            shot(page, "invitation-required")

        @scenario("an expired invitation: the page says so")
        def expired():
            page, _ = open_page("#invitation=" + invite("acct-8", exp_in=-120))
            wait_state(page, "closed")
            msg = page.text_content("#message")
            assert "expired" in msg, msg
            assert waiting() == 1, "no place taken"

        @scenario("the dashboard shows the queue's invitation setting")
        def dashboard():
            page = browser.new_context(locale="en-US").new_page()
            page.goto(DISPATCHER + "/admin/ui")
            page.fill("#token", os.environ["USHER_TEST_ADMIN_TOKEN"])
            page.click("#login-form button")
            field = f"[data-queue='{Q}'] [data-field='invitations']"
            until(page, f"(document.querySelector(\"{field}\") || {{}}).textContent === 'required (keys shop-1)'")

        join()
        second_device()
        uninvited()
        expired()
        dashboard()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("FAILED")
        raise
