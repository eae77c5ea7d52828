"""Browser tests of a scheduled sale on the waiting-room page, on Debian's Chromium driven by
Playwright. Run by crates/usher-testkit/tests/browsers/browser.rs with the environment of
waiting_room.py (whose helpers it uses), against a dispatcher whose USHER_QUEUES_FILE names the
queue `void` (paused, without a sale).

Control line: `CONTROL flush-redis` (Redis loses everything; the test answers `OK`). The last
stdout line is `RESULT ok <scenarios>`; a failed check raises.
"""

import json
import re
import time
import urllib.request

from playwright.sync_api import sync_playwright

from waiting_room import (BOOKING, GW, PHONE, T, admin, check_token, control, passed, position,
                          scenario, shot, until, wait_position, wait_state)


def rfc3339(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def message(page):
    return page.inner_text("#message")


def seconds_left(page):
    """The countdown shown, in seconds ("Sales open in 0:07. …")."""
    m = re.search(r"(?:(\d+):)?(\d+):(\d\d)", message(page))
    assert m, message(page)
    h, mi, s = int(m.group(1) or 0), int(m.group(2)), int(m.group(3))
    return h * 3600 + mi * 60 + s


def main():
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,  # a loaded machine may start two Chromiums at once
        )
        new = lambda **kw: browser.new_context(locale=kw.pop("locale", "en-US"), **kw)

        @scenario("countdown, then the draw, then a position, then admission")
        def countdown():
            admin("PUT", "/admin/queues/sale", {
                "paused": True,
                "title": "Scheduled sale — usher demo",
                "booking_url": BOOKING + "/entry",
            })
            # The renderer is up before the sale's clock starts, and the sale opens 20 s out:
            # the countdown must still be running after the first screenshot and a 2.5 s wait
            # on a loaded machine.
            ctx = new(viewport=PHONE, is_mobile=True, has_touch=True)
            page = ctx.new_page()
            opens = time.time() + 20
            admin("PUT", "/admin/queues/sale", {"opens_at": rfc3339(opens)})
            posted = []
            page.on("request", lambda r: posted.append(r) if r.url.startswith(BOOKING) else None)
            page.goto(GW + "/q/sale")
            wait_state(page, "scheduled")
            until(page, "/Sales open in/.test(document.getElementById('message').textContent)")
            first = seconds_left(page)
            assert 0 < first <= 21, message(page)
            shot(page, "scheduled-countdown")
            time.sleep(2.5)
            later = seconds_left(page)
            assert later < first, (first, later)
            until(page, "/you are in the draw/.test(document.getElementById('message').textContent)",
                  timeout=max(20_000, int((opens - time.time() + 20) * 1000)))
            assert page.evaluate("document.body.dataset.state") == "scheduled"
            shot(page, "scheduled-draw")
            wait_state(page, "waiting", timeout=30_000)
            wait_position(page, 1)
            assert "You're next" in page.inner_text("#ahead")
            shot(page, "scheduled-position")
            admin("PUT", "/admin/queues/sale", {"paused": False, "admit_per_second": 5})
            # Admitted: the page POSTs the token to the booking site, which shows the entry.
            page.wait_for_selector("#entry", timeout=20_000)
            assert page.get_attribute("#entry", "data-queue") == "sale"
            form = dict(kv.split("=", 1) for kv in posted[0].post_data.split("&"))
            check_token(urllib.request.unquote(form["token"]), "sale")
            shot(page, "scheduled-admitted")
            ctx.close()

        @scenario("a draw voided by a data loss is explained, in English and Korean")
        def void():
            # The sale is scheduled through the admin API only: the queues file does not carry
            # it, so after the loss the queue comes back without a draw.
            admin("PUT", "/admin/queues/void", {"opens_at": rfc3339(time.time() + 120)})
            en_ctx, ko_ctx = new(), new(locale="ko-KR", viewport=PHONE)
            en, ko = en_ctx.new_page(), ko_ctx.new_page()
            for page in (en, ko):
                page.goto(GW + "/q/void")
                wait_state(page, "scheduled")
            time.sleep(1)  # a few heartbeats: the gateway has read the commitment
            control("flush-redis")
            for page, text in [
                (en, "The draw you joined was cancelled after a technical fault. "
                     "You keep your place in line, in the order people joined."),
                (ko, "기술적인 문제로 참여하신 추첨이 취소되었습니다. "
                     "대기열에 도착한 순서대로 자리가 유지됩니다."),
            ]:
                page.wait_for_selector("#notices li", timeout=T)
                assert page.inner_text("#notices li") == text, page.inner_text("#notices li")
                wait_state(page, "waiting")
            # No draw is held: the pre-queue keeps the order it joined in.
            wait_position(en, 1)
            wait_position(ko, 2)
            assert position(en) == 1 and position(ko) == 2
            shot(en, "draw-void")
            shot(ko, "draw-void-korean")
            en_ctx.close()
            ko_ctx.close()

        @scenario("a full pre-queue is explained, and no place is taken")
        def full():
            admin("PUT", "/admin/queues/full", {"paused": True, "max_entrants": 1})
            admin("PUT", "/admin/queues/full", {"opens_at": rfc3339(time.time() + 300)})
            first_ctx, second_ctx = new(), new(viewport=PHONE)
            first, second = first_ctx.new_page(), second_ctx.new_page()
            first.goto(GW + "/q/full")
            wait_state(first, "scheduled")
            second.goto(GW + "/q/full")
            wait_state(second, "closed")
            assert message(second) == "The draw is full: no more places can join it.", \
                message(second)
            # The page closed its stream: it does not reconnect by itself, and holds no ticket.
            assert "ticket" not in second.evaluate("JSON.stringify(localStorage)")
            shot(second, "pre-queue-full")
            first_ctx.close()
            second_ctx.close()

        for s in [countdown, void, full]:
            s()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
