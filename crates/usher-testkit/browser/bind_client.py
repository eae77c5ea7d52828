"""A client of a queue that binds places to the browser's key (`bind: "browser_key"`), written
the way any non-browser client would be: its own P-256 key (`cryptography`) and its own proofs
of possession (ES256 compact JWS made with PyJWT), over plain HTTP and SSE (urllib).

Run by crates/usher-testkit/tests/browsers/bind.rs, which starts Redis, a dispatcher, a gateway
and the demo booking service as real processes and passes their URLs in the environment (as the
page drivers). The last stdout line is `RESULT ok <scenarios>`; any failed check raises.
"""

import base64
import hashlib
import json
import os
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

GW = os.environ["USHER_TEST_GATEWAY"]
DISPATCHER = os.environ["USHER_TEST_DISPATCHER"]
BOOKING = os.environ["USHER_TEST_BOOKING"]
Q = "bound-client"
STREAM = f"/api/queues/{Q}/stream"
STATUS = f"/api/queues/{Q}/status"
passed = []


def log(*a):
    print(*a, file=__import__("sys").stderr, flush=True)


def b64url(raw):
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class Key:
    """A P-256 key pair: its public JWK, its RFC 7638 thumbprint, and proofs made with PyJWT."""

    def __init__(self):
        self.private = ec.generate_private_key(ec.SECP256R1())
        numbers = self.private.public_key().public_numbers()
        self.jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": b64url(numbers.x.to_bytes(32, "big")),
            "y": b64url(numbers.y.to_bytes(32, "big")),
        }
        canonical = json.dumps(
            {k: self.jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":"))
        self.thumbprint = b64url(hashlib.sha256(canonical.encode()).digest())

    def proof(self, htm, htu, iat=None, jti=None, **extra):
        claims = {"jti": jti or b64url(os.urandom(16)), "iat": int(iat or time.time()),
                  "htm": htm, "htu": htu, **extra}
        return jwt.encode(claims, self.private, algorithm="ES256",
                          headers={"typ": "usher-pop+jwt", "jwk": self.jwk})


def call(method, url, body=None, headers=None, form=None):
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = json.dumps(body).encode()
        headers["content-type"] = "application/json"
    if form is not None:
        data = urllib.parse.urlencode(form).encode()
        headers["content-type"] = "application/x-www-form-urlencoded"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, raw
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def admin(method, path, body=None):
    auth = {"authorization": "Bearer " + os.environ["USHER_TEST_ADMIN_TOKEN"]}
    status, raw = call(method, DISPATCHER + path, body, auth)
    assert status < 300, f"{method} {path}: {status} {raw!r}"
    return json.loads(raw) if raw else None


def first_event(until=None, **params):
    return first_event_of(Q, until, **params)


def first_event_of(queue, until=None, **params):
    """Opens the stream with `params` and returns its first event (name, id, data), or with
    `until` the first event of that name, then hangs up (a held place is marked away, as when
    a browser goes; an away place is not admitted until its browser is back)."""
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    stream = f"/api/queues/{queue}/stream"
    with urllib.request.urlopen(GW + stream + ("?" + query if query else ""), timeout=30) as r:
        assert r.status == 200, r.status
        event = {}
        for raw in r:
            line = raw.decode().rstrip("\n")
            if not line:
                if "event" in event and until in (None, event["event"]):
                    return event.get("event"), event.get("id"), json.loads(event["data"])
                event = {}
                continue
            name, _, value = line.partition(": ")
            event[name] = value
    raise AssertionError(f"the stream ended without the event: {params}")


def bound_len():
    """How many browser keys the queue's `bound` hash holds (redis-cli, from the test)."""
    out = subprocess.run(os.environ["USHER_TEST_REDIS_CLI"].split()
                         + ["HLEN", os.environ["USHER_TEST_BOUND_KEY"]],
                         capture_output=True, text=True, check=True).stdout
    return int(out.strip())


def status(ticket, proof=None):
    query = {"ticket": ticket}
    if proof:
        query["proof"] = proof
    code, raw = call("GET", GW + STATUS + "?" + urllib.parse.urlencode(query))
    return code, json.loads(raw)


DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs")


def doc_python(page, heading):
    """The first ```python block after `heading` in docs/<page>: run as printed."""
    text = open(os.path.join(DOCS, page), encoding="utf-8").read()
    after = text[text.index(heading):]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


# docs/booking-services.md, "Tokens bound to the browser": the booking side's check.
exec(doc_python("booking-services.md", "## Tokens bound to the browser"))


def scenario(name):
    def wrap(f):
        def run(*a):
            log(f"--- {name}")
            f(*a)
            passed.append(name)
        return run
    return wrap


def main():
    admin("PUT", f"/admin/queues/{Q}", {
        "paused": True, "passthrough": False, "bind": "browser_key",
        "booking_url": BOOKING + "/entry",
    })
    assert admin("GET", f"/admin/queues/{Q}")["bind"] == "browser_key"
    key, thief = Key(), Key()
    held = {}

    @scenario("a join without a proof takes no place")
    def join_without():
        name, _, data = first_event()
        assert (name, data["reason"]) == ("proof_required", "missing"), (name, data)
        assert admin("GET", f"/admin/queues/{Q}")["waiting"] == 0

    @scenario("a join with a proof takes a place bound to the key")
    def join():
        name, ticket, data = first_event(proof=key.proof("GET", STREAM))
        assert name == "waiting" and data["position"] == 1, (name, data)
        held["ticket"] = ticket

    @scenario("a resume needs a fresh proof by the same key")
    def resume():
        ticket = held["ticket"]
        for params, reason in [
            ({}, "missing"),
            ({"proof": thief.proof("GET", STREAM)}, "wrong_key"),
            ({"proof": key.proof("GET", STREAM, iat=time.time() - 120)}, "expired"),
            ({"proof": key.proof("GET", STATUS)}, "invalid"),
        ]:
            name, _, data = first_event(ticket=ticket, **params)
            assert (name, data.get("reason")) == ("proof_required", reason), (params, name, data)
        once = key.proof("GET", STREAM)
        name, got, data = first_event(ticket=ticket, proof=once)
        assert (name, got, data["position"]) == ("waiting", ticket, 1), (name, data)
        name, _, data = first_event(ticket=ticket, proof=once)
        assert (name, data["reason"]) == ("proof_required", "replayed"), (name, data)
        assert admin("GET", f"/admin/queues/{Q}")["waiting"] == 1, "still one place"

    @scenario("the status route answers only with a proof by the key")
    def polls():
        ticket = held["ticket"]
        code, body = status(ticket)
        assert code == 403 and "missing" in body["error"], (code, body)
        code, body = status(ticket, thief.proof("GET", STATUS))
        assert code == 403 and "wrong_key" in body["error"], (code, body)
        code, body = status(ticket, key.proof("GET", STATUS))
        assert code == 200 and body["state"] == "waiting", (code, body)

    @scenario("a copied ticket cannot make its owner leave")
    def leave():
        path = f"/api/queues/{Q}/tickets/" + held["ticket"]
        for proof, reason in [(None, "missing"), (thief.proof("DELETE", path), "wrong_key"),
                              (key.proof("GET", path), "invalid")]:
            query = "?proof=" + proof if proof else ""
            code, raw = call("DELETE", GW + path + query)
            assert code == 403 and reason in json.loads(raw)["error"], (code, raw)
        assert admin("GET", f"/admin/queues/{Q}")["waiting"] == 1, "still in line"

    @scenario("admitted: the token carries the key's thumbprint, shown only with a proof")
    def admitted():
        ticket = held["ticket"]
        admin("PUT", f"/admin/queues/{Q}", {"paused": False})
        # Held open (with a fresh proof) until the admission comes.
        name, _, data = first_event(until="admitted", ticket=ticket, proof=key.proof("GET", STREAM))
        token = data["token"]
        # The status route shows it once the token's record is stored (`admitting` until then).
        deadline = time.time() + 10
        while True:
            code, body = status(ticket, key.proof("GET", STATUS))
            if body.get("state") != "admitting":
                break
            assert time.time() < deadline, ("the token's record in time", code, body)
            time.sleep(0.05)
        assert (code, body["state"], body["token"]) == (200, "admitted", token), (code, body)
        claims = jwt.decode(token, options={"verify_signature": False})
        assert claims["cnf"] == {"jkt": key.thumbprint}, claims
        code, body = status(ticket)
        assert code == 403 and "token" not in body, "no token without the key"
        name, _, data = first_event(ticket=ticket, proof=thief.proof("GET", STREAM))
        assert (name, data["reason"]) == ("proof_required", "wrong_key"), (name, data)
        name, _, data = first_event(ticket=ticket, proof=key.proof("GET", STREAM))
        assert name == "admitted" and data["token"] == token, (name, data)
        held["token"] = token

    @scenario("the booking site takes the token only with a proof by the key, once; "
              "its ended place's key is forgotten")
    def booking():
        token, url = held["token"], BOOKING + "/entry"
        ath = b64url(hashlib.sha256(token.encode()).digest())
        # A copied token alone books nothing: the bearer routes refuse a bound token.
        bearer = {"authorization": "Bearer " + token}
        code, raw = call("POST", BOOKING + "/api/bookings", body={"queue": Q}, headers=bearer)
        assert code == 401 and b"bound" in raw, ("a bound token at a bearer route", code, raw[:200])
        code, raw = call("GET", BOOKING + "/api/seats?queue=" + Q, headers=bearer)
        assert code == 403 and b"bound" in raw, ("a bound token at the layer", code, raw[:200])
        form = {"token": token, "queue": Q}
        for proof, want in [
            (None, 403),
            (thief.proof("POST", url, ath=ath), 403),
            (key.proof("POST", url, ath=b64url(b"another token")), 403),
            (key.proof("POST", url + "x", ath=ath), 403),
        ]:
            code, raw = call("POST", url, form=dict(form, **({"proof": proof} if proof else {})))
            assert code == want, (proof is not None, code, raw[:200])
        # A good proof is taken once: the same form sent again (a replay) is refused.
        once = key.proof("POST", url, ath=ath)
        code, raw = call("POST", url, form=dict(form, proof=once))
        assert code == 200, (code, raw[:200])
        code, raw = call("POST", url, form=dict(form, proof=once))
        assert code == 403 and b"used already" in raw, ("a replayed proof", code, raw[:200])
        # The dispatcher's session API asks for the proof too: the browser's, passed on (`DPoP`)
        # with the request it was made for (`X-Original-*`; the query is not signed), once.
        session = DISPATCHER + "/api/session?queue=" + Q
        code, raw = call("GET", session, headers=bearer)
        assert code == 401 and b"proof_required: missing" in raw, ("token alone", code, raw)
        seats = BOOKING + "/api/seats"
        passed_on = dict(bearer, **{"dpop": key.proof("GET", seats, ath=ath),
                                    "x-original-method": "GET",
                                    "x-original-url": seats + "?queue=" + Q})
        code, raw = call("GET", session, headers=passed_on)
        assert code == 200, ("the browser's proof passed on", code, raw[:200])
        code, raw = call("GET", session, headers=passed_on)
        assert code == 401 and b"proof_required: replayed" in raw, ("passed on twice", code, raw)
        thiefs = dict(passed_on, dpop=thief.proof("GET", seats, ath=ath))
        code, raw = call("GET", session, headers=thiefs)
        assert code == 401 and b"proof_required: wrong_key" in raw, ("a thief's", code, raw)
        # Its own browser ends the session with a proof (DELETE the ticket): 204.
        path = f"/api/queues/{Q}/tickets/" + held["ticket"]
        code, _ = call("DELETE", GW + path + "?proof=" + key.proof("DELETE", path))
        assert code == 204, code
        # The session ended: the dispatcher forgets the key (the queue's only place), and a
        # resume by the key then hears the session ended, not `wrong_key`.
        deadline = time.time() + 10
        while bound_len() != 0:
            assert time.time() < deadline, "the ended place's key forgotten in time"
            time.sleep(0.1)
        name, _, data = first_event(ticket=held["ticket"], proof=key.proof("GET", STREAM))
        assert (name, data.get("reason")) == ("closed", "session_ended"), (name, data)
        # The docs' check for any language agrees: the good proof passes, the thief's fails.
        claims = jwt.decode(token, options={"verify_signature": False})
        good = key.proof("POST", url, ath=ath)
        assert check_proof(token, claims, good, "POST", url) == jwt.decode(
            good, options={"verify_signature": False})["jti"]
        try:
            check_proof(token, claims, thief.proof("POST", url, ath=ath), "POST", url)
            raise RuntimeError("the docs' check took another key's proof")
        except AssertionError:
            pass

    @scenario("a scheduled sale: the drawn place's token carries the key's thumbprint")
    def sale():
        sale_q = "bound-sale"
        stream = f"/api/queues/{sale_q}/stream"
        opens = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3))
        admin("PUT", f"/admin/queues/{sale_q}", {
            "passthrough": False, "bind": "browser_key", "opens_at": opens})
        name, ticket, data = first_event_of(sale_q, proof=key.proof("GET", stream))
        assert name == "scheduled", (name, data)
        # The draw gives the place a new id in line; the ticket keeps its pre-queue id.
        deadline = time.time() + 30
        while True:
            code, raw = call("GET", GW + f"/api/queues/{sale_q}/draw")
            if code == 200 and json.loads(raw).get("seed"):
                break
            assert time.time() < deadline, ("the draw in time", code, raw[:200])
            time.sleep(0.1)
        name, _, data = first_event_of(sale_q, ticket=ticket, proof=key.proof("GET", stream))
        assert name in ("waiting", "admitted"), ("the resume after the draw", name, data)
        name, _, data = first_event_of(
            sale_q, until="admitted", ticket=ticket, proof=key.proof("GET", stream))
        claims = jwt.decode(data["token"], options={"verify_signature": False})
        assert claims.get("cnf") == {"jkt": key.thumbprint}, claims

    @scenario("the docs' client example joins as printed")
    def docs_client():
        admin("PUT", "/admin/queues/concert", {"paused": True, "bind": "browser_key"})
        scope = {}
        exec(doc_python("security.md", "## Places and tokens bound to the browser"), scope)
        name, _, data = first_event_of("concert", proof=scope["proof"])
        assert name == "waiting", (name, data)

    join_without()
    join()
    resume()
    polls()
    leave()
    admitted()
    booking()
    sale()
    docs_client()
    print("RESULT ok " + json.dumps(passed), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        log("FAILED")
        raise
