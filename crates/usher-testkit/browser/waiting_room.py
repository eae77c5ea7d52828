"""Browser tests of the waiting-room page, on Debian's Chromium driven by Playwright.

Run by crates/usher-testkit/tests/browsers/browser.rs, which starts Redis, a dispatcher, a
gateway and the demo booking service as real processes and passes their URLs in the environment:

  USHER_TEST_GATEWAY, USHER_TEST_DISPATCHER, USHER_TEST_BOOKING  base URLs
  USHER_TEST_SCREENSHOTS                                        where screenshots go

Control lines go to stdout (`CONTROL kill-gateway`, `CONTROL start-gateway`); the Rust test
does it and answers `OK` on stdin. The last stdout line is `RESULT ok <scenarios>`. Any
failed check raises, which exits non-zero with the traceback on stderr.
"""

import base64
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import json
import os
import threading
import time
import urllib.error
import urllib.request

from playwright.sync_api import sync_playwright

import driver
from driver import control, log

GW = os.environ["USHER_TEST_GATEWAY"]
DISPATCHER = os.environ["USHER_TEST_DISPATCHER"]
BOOKING = os.environ["USHER_TEST_BOOKING"]
SHOTS = os.environ["USHER_TEST_SCREENSHOTS"]
T = 15_000  # ms: the longest any single wait may take
PHONE = {"width": 390, "height": 760}
passed = []


def call(method, url, body=None, headers=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        raw = e.read()
        return e.code, json.loads(raw) if raw else None


def admin(method, path, body=None):
    auth = {"authorization": "Bearer " + os.environ["USHER_TEST_ADMIN_TOKEN"]}
    status, out = call(method, DISPATCHER + path, body, auth)
    assert status < 300, f"{method} {path}: {status} {out}"
    return out


def shot(page, name):
    page.screenshot(path=os.path.join(SHOTS, name + ".png"))


def until(page, expr, timeout=T):
    driver.until(page, expr, timeout)


def wait_state(page, state, timeout=T):
    until(page, f"document.body.dataset.state === {json.dumps(state)}", timeout)


def wait_conn(page, conn, timeout=T):
    until(page, f"document.getElementById('conn').dataset.conn === {json.dumps(conn)}", timeout)


def position(page):
    return int(page.evaluate("document.body.dataset.position"))


def stored(page, queue):
    return json.loads(page.evaluate(f"localStorage.getItem('usher:{queue}')") or "{}")


def wait_position(page, p):
    until(page, f"document.body.dataset.position === '{p}'")


def check_token(token, queue):
    """Verifies an entry token like a booking service: an EdDSA JWT for `queue` whose session
    the dispatcher reports active."""
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header["alg"] == "EdDSA", header
    status, body = call("GET", DISPATCHER + "/api/session", headers={"authorization": "Bearer " + token})
    assert status == 200, (status, body)
    assert body["queue"] == queue, body


def scenario(name):
    def wrap(f):
        def run(*a):
            log(f"--- {name}")
            f(*a)
            passed.append(name)
        return run
    return wrap


def parent_server(gateway_page):
    """A site on its own loopback origin that frames the page and records its postMessage."""
    html = f"""<!doctype html><body data-token="">
<iframe id=f src="{gateway_page}" width=400 height=600></iframe>
<script>
addEventListener("message", (e) => {{
  if (e.data && e.data.type === "usher:admitted") {{
    document.body.dataset.token = e.data.token;
    document.body.dataset.origin = e.origin;
  }}
}});
</script></body>""".encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(html)))
            self.end_headers()
            self.wfile.write(html)

        def log_message(self, *a):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, f"http://127.0.0.1:{srv.server_address[1]}"


def main():
    os.makedirs(SHOTS, exist_ok=True)
    admin("PUT", "/admin/queues/show", {
        "paused": True,
        "title": "Concert — usher demo",
        "booking_url": BOOKING + "/entry",
    })
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"],
            timeout=120_000,  # a loaded machine may start two Chromiums at once
        )
        new = lambda **kw: browser.new_context(locale=kw.pop("locale", "en-US"), **kw)
        ctx_a, ctx_b = new(), new()
        ctx_c = new(viewport=PHONE, is_mobile=True, has_touch=True)
        pages = {}

        @scenario("join and see the position")
        def join():
            for name, ctx, p in [("a", ctx_a, 1), ("b", ctx_b, 2), ("c", ctx_c, 3)]:
                page = ctx.new_page()
                page.goto(GW + "/q/show")
                wait_state(page, "waiting")
                wait_position(page, p)
                pages[name] = page
            c = pages["c"]
            wait_conn(c, "connected")
            assert c.title() == "Concert — usher demo"
            assert "2 people ahead of you" in c.inner_text("#ahead")
            assert c.get_attribute("#bar", "aria-valuenow") == "0"
            assert c.inner_text("#eta"), "an ETA in words"
            shot(c, "waiting")

        @scenario("reload keeps the place")
        def reload():
            c = pages["c"]
            ticket = stored(c, "show")["ticket"]
            c.reload()
            wait_state(c, "waiting")
            wait_position(c, 3)
            assert stored(c, "show")["ticket"] == ticket
            assert admin("GET", "/admin/queues/show")["waiting"] == 3, "no second place"

        @scenario("two tabs share one stream and the second takes over")
        def tabs():
            c = pages["c"]
            ticket = stored(c, "show")["ticket"]
            c2 = ctx_c.new_page()
            c2.goto(GW + "/q/show")
            wait_conn(c2, "mirror")
            wait_position(c2, 3)
            shot(c2, "second-tab")
            c.close()
            wait_conn(c2, "connected")
            wait_position(c2, 3)
            assert stored(c2, "show")["ticket"] == ticket
            assert admin("GET", "/admin/queues/show")["waiting"] == 3
            pages["c"] = c2

        @scenario("a ticket resumed elsewhere offers to continue here")
        def elsewhere():
            c = pages["c"]
            saved = json.dumps(stored(c, "show"))
            other = new()
            other.add_init_script(f"localStorage.setItem('usher:show', {json.dumps(saved)})")
            e = other.new_page()
            e.goto(GW + "/q/show")
            wait_position(e, 3)
            wait_state(c, "closed")
            assert "another tab" in c.inner_text("#message")
            assert c.is_visible("#primary")
            shot(c, "resumed-elsewhere")
            c.click("#primary")
            wait_state(c, "waiting")
            wait_position(c, 3)
            wait_state(e, "closed")
            other.close()
            assert admin("GET", "/admin/queues/show")["waiting"] == 3

        @scenario("a gateway killed under the page reconnects and keeps the place")
        def killed():
            c = pages["c"]
            control("kill-gateway")
            wait_conn(c, "reconnecting")
            shot(c, "reconnecting")
            control("start-gateway")
            wait_conn(c, "connected", timeout=30_000)
            wait_position(c, 3)
            assert admin("GET", "/admin/queues/show")["waiting"] == 3

        @scenario("the Korean page")
        def korean():
            ko = new(locale="ko-KR", viewport=PHONE, reduced_motion="reduce")
            k = ko.new_page()
            k.goto(GW + "/q/show")
            wait_state(k, "waiting")
            wait_position(k, 4)
            assert k.get_attribute("html", "lang") == "ko"
            assert k.inner_text("#pos-label") == "나의 대기 순번"
            assert "앞에 3명이 있습니다" in k.inner_text("#ahead")
            shot(k, "korean")
            bar = "getComputedStyle(document.getElementById('bar-fill')).transitionDuration"
            assert k.evaluate(bar) == "0s", "reduced motion: no animation"
            assert pages["c"].evaluate(bar) != "0s", "animated otherwise"
            assert k.evaluate("document.documentElement.scrollWidth <= innerWidth"), "fits a phone"
            en = ko.new_page()
            en.goto(GW + "/q/show?lang=en")
            assert en.get_attribute("html", "lang") == "en"
            en.close()
            pages["k"] = k

        @scenario("leave the line")
        def leave():
            k = pages["k"]
            # Keyboard only: the button takes focus, Enter opens the dialog, Escape closes it.
            k.focus("#leave")
            k.keyboard.press("Enter")
            until(k, "document.getElementById('confirm').open")
            assert k.evaluate("document.activeElement.id") == "confirm-no", "focus in the dialog"
            k.keyboard.press("Escape")
            until(k, "!document.getElementById('confirm').open")
            assert stored(k, "show").get("ticket"), "Escape keeps the place"
            k.click("#leave")
            assert k.is_visible("#confirm")
            shot(k, "leave-confirm")
            k.click("#confirm-yes")
            wait_state(k, "closed")
            assert k.inner_text("#message") == "대기를 취소했습니다."
            assert stored(k, "show") == {}, "the ticket is forgotten"
            shot(k, "left")
            deadline = time.time() + 10
            while admin("GET", "/admin/queues/show")["waiting"] != 3:
                assert time.time() < deadline, "the place was removed"
                time.sleep(0.1)

        @scenario("notices are shown as they arrive")
        def notice():
            c = pages["c"]
            admin("POST", "/admin/queues/show/notice", {"message": "Section A is sold out"})
            c.wait_for_selector("#notices li", timeout=T)
            assert c.inner_text("#notices li") == "Section A is sold out"
            shot(c, "notice")

        @scenario("admitted: the position goes down, then a POST with a token that verifies")
        def admitted():
            c = pages["c"]
            posted = []
            c.on("request", lambda r: posted.append(r) if r.url.startswith(BOOKING) else None)
            seen = [position(c)]
            admin("PUT", "/admin/queues/show", {"paused": False, "admit_per_second": 1})
            deadline = time.time() + 60
            while not c.url.startswith(BOOKING):
                assert time.time() < deadline, "admitted in time"
                try:
                    p = c.evaluate("document.body.dataset.position")
                    if p and int(p) != seen[-1]:
                        seen.append(int(p))
                except Exception:  # navigating
                    pass
                time.sleep(0.05)
            c.wait_for_selector("#entry", timeout=T)
            assert seen == sorted(seen, reverse=True) and len(seen) >= 2, seen
            assert c.url == BOOKING + "/entry", "no query string: " + c.url
            req = posted[0]
            assert req.method == "POST"
            form = dict(
                kv.split("=", 1) for kv in req.post_data.split("&")
            )
            token = urllib.request.unquote(form["token"])
            assert form["queue"] == "show"
            check_token(token, "show")
            assert c.get_attribute("#entry", "data-queue") == "show"
            shot(c, "admitted")

        @scenario("sold out")
        def sold_out():
            admin("PUT", "/admin/queues/soldout", {"paused": True})
            ctx = new()
            s = ctx.new_page()
            s.goto(GW + "/q/soldout")
            wait_state(s, "waiting")
            admin("DELETE", "/admin/queues/soldout?reason=sold_out")
            wait_state(s, "closed")
            assert s.inner_text("#message") == "Sold out. Thank you for waiting."
            shot(s, "sold-out")
            ctx.close()

        @scenario("embedded: postMessage to the embedding origin only")
        def embedded():
            srv, origin = parent_server(GW + "/q/embed")
            admin("PUT", "/admin/queues/embed", {"admit_per_second": 100, "embed_origin": origin})
            ctx = new()
            p = ctx.new_page()
            p.goto(origin + "/")
            until(p, "document.body.dataset.token !== ''")
            assert p.evaluate("document.body.dataset.origin") == GW
            check_token(p.evaluate("document.body.dataset.token"), "embed")
            shot(p, "embedded")
            other, other_origin = parent_server(GW + "/q/embed")
            q = ctx.new_page()
            q.goto(other_origin + "/")
            time.sleep(2)
            frame = q.frames[1]
            assert frame.query_selector("#usher-config") is None, "another site cannot frame it"
            assert q.evaluate("document.body.dataset.token") == ""
            ctx.close()
            srv.shutdown()
            other.shutdown()

        for s in [join, reload, tabs, elsewhere, killed, korean, leave, notice, admitted,
                  sold_out, embedded]:
            s()
        browser.close()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    main()
