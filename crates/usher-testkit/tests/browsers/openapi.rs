//! The API description (`GET /openapi.json`) of real dispatcher and gateway processes:
//!
//! - both documents are valid OpenAPI 3.1 (PyPI `openapi-spec-validator`, installed in the
//!   browser venv by `scripts/ensure-browser.sh`; `crates/usher-testkit/openapi/validate.py`);
//! - every operation a document names is served, and no other method is served on its paths;
//!   and routes are added only through the table the document is made from (a source check,
//!   since a path nobody describes cannot be found by asking the server);
//! - real answers — JSON bodies, errors, and every frame of real event streams — validate
//!   against the schemas the documents give for their route, method, status and content type.

use anyhow::Context;
use serde_json::json;
use usher_testkit::config::admin_client;
use usher_testkit::openapi::{
    coverage_problems, document, event, has_event, validate, RawStream, Samples, WAIT,
};
use usher_testkit::procs::Proc;
use usher_testkit::tools::workspace;
use usher_testkit::wait::eventually_within;
use usher_testkit::RedisServer;

struct Servers {
    _redis: RedisServer,
    dispatcher: Proc,
    gateway: Proc,
}

async fn servers() -> anyhow::Result<Servers> {
    let redis = RedisServer::start()?;
    let dispatcher = Proc::start(
        "usher-dispatcher",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".into()),
        ],
    )
    .await?;
    let gateway = Proc::start(
        "usher-gateway",
        &[
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_KEEPALIVE_SECS", "1".into()),
        ],
    )
    .await?;
    Ok(Servers {
        _redis: redis,
        dispatcher,
        gateway,
    })
}

#[tokio::test]
async fn both_documents_are_valid_and_describe_exactly_the_served_routes() -> anyhow::Result<()> {
    let s = servers().await?;
    let d = document(&s.dispatcher.url()).await?;
    let g = document(&s.gateway.url()).await?;
    // Spot checks that the documents are the servers' own, not empty shells.
    for (doc, route) in [
        (&d, "/admin/queues/{queue}"),
        (&d, "/api/session"),
        (&d, "/.well-known/jwks.json"),
        (&g, "/api/queues/{queue}/stream"),
        (&g, "/q/{queue}"),
    ] {
        assert!(doc["paths"].get(route).is_some(), "{route} missing");
    }
    for doc in [&d, &g] {
        for route in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
            assert!(doc["paths"].get(route).is_some(), "{route} missing");
        }
        assert!(doc["components"]["schemas"].get("ErrorBody").is_some());
    }
    let stream = &g["paths"]["/api/queues/{queue}/stream"]["get"]["responses"]["200"]["content"];
    assert!(stream.get("text/event-stream").is_some(), "{stream}");
    assert_eq!(
        d["paths"]["/admin/queues/{queue}"]["put"]["security"],
        json!([{"admin_token": []}])
    );
    let mut problems = coverage_problems("dispatcher", &s.dispatcher.url(), &d).await?;
    problems.extend(coverage_problems("gateway", &s.gateway.url(), &g).await?);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    validate(json!({"dispatcher": d, "gateway": g}), Vec::new()).await
}

/// The source check behind "every served route is described": the servers' routes go through
/// `OpenApiRouter::routes` (`routes!` or `usher_http::openapi::route`), never through axum's
/// `route`, `nest` or a plain `Router`, whose routes the document would not know. A file's
/// unit-test module (`#[cfg(test)] mod tests`, kept last in a file here) serves nobody and is
/// not read: `usher-http`'s test of the write deadline serves a router of its own.
#[test]
fn routes_are_added_only_through_the_described_table() -> anyhow::Result<()> {
    let mut offenders = Vec::new();
    for dir in [
        "crates/usher-dispatcher/src",
        "crates/usher-gateway/src",
        "crates/usher-http/src",
    ] {
        let mut stack = vec![workspace().join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d)? {
                let path = entry?.path();
                if path.is_dir() {
                    stack.push(path);
                    continue;
                }
                if path.extension().is_none_or(|e| e != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path)?;
                let lines: Vec<&str> = text.lines().collect();
                let tests_at = lines
                    .windows(2)
                    .position(|w| w[0].trim() == "#[cfg(test)]" && w[1].trim() == "mod tests {")
                    .unwrap_or(lines.len());
                for (i, line) in lines[..tests_at].iter().enumerate() {
                    let plain_router = line.contains("Router::new()")
                        && !line.contains("OpenApiRouter::new()")
                        && !line.contains("MethodRouter::new()");
                    let bypass = [".route(", ".route_service(", ".nest(", ".nest_service("]
                        .iter()
                        .any(|m| line.contains(m));
                    if plain_router || bypass {
                        offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "routes added outside the described table (use `.routes(routes!(handler))` with a \
         `#[utoipa::path]` annotation):\n{}",
        offenders.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn real_answers_and_stream_frames_validate_against_the_documents() -> anyhow::Result<()> {
    let s = servers().await?;
    let (d, g) = (s.dispatcher.url(), s.gateway.url());
    let admin = admin_client();
    let anon = reqwest::Client::new();
    let mut x = Samples(Vec::new());
    const D: &str = "dispatcher";
    const G: &str = "gateway";
    let queue = "/admin/queues/{queue}";

    // The admin API: created, updated, read, refused.
    let settings = json!({"admit_per_second": 50, "paused": true, "title": "OpenAPI"});
    let put = admin.put(format!("{d}/admin/queues/oa")).json(&settings);
    assert_eq!(x.answer(D, "PUT", queue, put).await?.0, 201);
    let put = admin
        .put(format!("{d}/admin/queues/oa"))
        .json(&json!({"grace_seconds": 60}));
    assert_eq!(x.answer(D, "PUT", queue, put).await?.0, 200);
    let bad = admin
        .put(format!("{d}/admin/queues/oa"))
        .json(&json!({"admit_per_second": -1}));
    assert_eq!(x.answer(D, "PUT", queue, bad).await?.0, 400);
    let get = admin.get(format!("{d}/admin/queues/oa"));
    assert_eq!(x.answer(D, "GET", queue, get).await?.0, 200);
    let missing = admin.get(format!("{d}/admin/queues/nope"));
    assert_eq!(x.answer(D, "GET", queue, missing).await?.0, 404);
    let list = admin.get(format!("{d}/admin/queues"));
    assert_eq!(x.answer(D, "GET", "/admin/queues", list).await?.0, 200);
    let no_token = anon.get(format!("{d}/admin/queues"));
    assert_eq!(x.answer(D, "GET", "/admin/queues", no_token).await?.0, 401);
    let jwks = anon.get(format!("{d}/.well-known/jwks.json"));
    let (status, keys) = x.answer(D, "GET", "/.well-known/jwks.json", jwks).await?;
    assert_eq!(
        (status, keys["keys"].as_array().map(Vec::len)),
        (200, Some(1))
    );
    let load = anon
        .put(format!("{d}/api/backends/b1/load"))
        .json(&json!({"load": 1}));
    assert_eq!(
        x.answer(D, "PUT", "/api/backends/{name}/load", load)
            .await?
            .0,
        401
    );
    let beacon = admin
        .post(format!("{d}/admin/queues/oa/draw/beacon"))
        .json(&json!({"randomness": "00".repeat(32)}));
    let beacon_path = "/admin/queues/{queue}/draw/beacon";
    assert_eq!(x.answer(D, "POST", beacon_path, beacon).await?.0, 404);

    // A scheduled sale: its beacon, its pending draw record, a pre-queue stream's `scheduled`.
    let opens_at = (time::OffsetDateTime::now_utc() + time::Duration::hours(1))
        .format(&time::format_description::well_known::Rfc3339)?;
    let sale = json!({"opens_at": opens_at, "draw_beacon": {"drand_round": 7}});
    let put = admin.put(format!("{d}/admin/queues/sale")).json(&sale);
    assert_eq!(x.answer(D, "PUT", queue, put).await?.0, 201);
    let beacon = admin
        .post(format!("{d}/admin/queues/sale/draw/beacon"))
        .json(&json!({"randomness": "ab".repeat(32)}));
    assert_eq!(x.answer(D, "POST", beacon_path, beacon).await?.0, 200);
    let draw = anon.get(format!("{g}/api/queues/sale/draw"));
    let (code, record) = x.answer(G, "GET", "/api/queues/{queue}/draw", draw).await?;
    assert_eq!((code, &record["seed"]), (200, &serde_json::Value::Null));
    let mut pre = RawStream::open(&format!("{g}/api/queues/sale/stream")).await?;
    let pre_frames = pre.read_until(|f| has_event(f, "scheduled")).await?;
    let pre_ticket = event(&pre_frames, "scheduled")?["id"]
        .as_str()
        .context("scheduled has an id")?
        .to_owned();
    let status = anon.get(format!("{g}/api/queues/sale/status?ticket={pre_ticket}"));
    let (code, body) = x
        .answer(G, "GET", "/api/queues/{queue}/status", status)
        .await?;
    assert_eq!((code, &body["state"]), (200, &json!("scheduled")));

    // A browser joins: its stream, while the queue is paused: `retry:`, `waiting`, keepalives.
    let mut a = RawStream::open(&format!("{g}/api/queues/oa/stream")).await?;
    let so_far = a
        .read_until(|f| has_event(f, "waiting") && f.iter().any(|i| i.get("comment").is_some()))
        .await?;
    let ticket = event(&so_far, "waiting")?["id"]
        .as_str()
        .context("waiting has an id")?
        .to_owned();
    let status_path = "/api/queues/{queue}/status";
    let status = anon.get(format!("{g}/api/queues/oa/status?ticket={ticket}"));
    let (code, body) = x.answer(G, "GET", status_path, status).await?;
    assert_eq!((code, &body["state"]), (200, &json!("waiting")));
    for bad in ["", "?ticket=oa.1.forged"] {
        let r = anon.get(format!("{g}/api/queues/oa/status{bad}"));
        assert_eq!(x.answer(G, "GET", status_path, r).await?.0, 400, "{bad}");
    }
    let draw = anon.get(format!("{g}/api/queues/oa/draw"));
    assert_eq!(
        x.answer(G, "GET", "/api/queues/{queue}/draw", draw)
            .await?
            .0,
        404
    );
    let unknown = anon.get(format!("{g}/api/queues/nope/stream"));
    let stream_path = "/api/queues/{queue}/stream";
    assert_eq!(x.answer(G, "GET", stream_path, unknown).await?.0, 404);
    let gws = admin.get(format!("{d}/admin/gateways"));
    assert_eq!(x.answer(D, "GET", "/admin/gateways", gws).await?.0, 200);

    // A notice, then admission: the stream's `notice`, `waiting` again, `admitted`, its end.
    let notice = admin
        .post(format!("{d}/admin/queues/oa/notice"))
        .json(&json!({"message": "Doors open soon"}));
    let path = "/admin/queues/{queue}/notice";
    assert_eq!(x.answer(D, "POST", path, notice).await?.0, 202);
    a.read_until(|f| has_event(f, "notice")).await?;
    // Maintenance, then its end (staying paused): the stream's `status`, twice.
    for (n, body) in [
        json!({"maintenance": "Back at ten"}),
        json!({"maintenance": null, "paused": true}),
    ]
    .into_iter()
    .enumerate()
    {
        let put = admin.put(format!("{d}/admin/queues/oa")).json(&body);
        assert_eq!(x.answer(D, "PUT", queue, put).await?.0, 200);
        a.read_until(|f| f.iter().filter(|f| f["event"] == "status").count() > n)
            .await?;
    }
    let resume = admin
        .put(format!("{d}/admin/queues/oa"))
        .json(&json!({"paused": false}));
    assert_eq!(x.answer(D, "PUT", queue, resume).await?.0, 200);
    let all_a = a.read_until(|_| false).await?;
    assert!(a.ended, "the stream ends after admitted");
    let token = event(&all_a, "admitted")?["data"]["token"]
        .as_str()
        .context("a token")?
        .to_owned();
    // `admitting` until the token is stored for resumes (a fraction of a tick), then
    // `admitted`: both are samples.
    eventually_within("the status to say admitted", WAIT, async || {
        let status = anon.get(format!("{g}/api/queues/oa/status?ticket={ticket}"));
        let (code, body) = x.answer(G, "GET", status_path, status).await?;
        assert_eq!(code, 200);
        if body["state"] == "admitted" {
            return Ok(());
        }
        assert_eq!(body["state"], "admitting");
        Err(anyhow::anyhow!("still admitting"))
    })
    .await?;

    // The session API with the entry token, until the session ends.
    let session =
        |m: reqwest::Method, p: &str| anon.request(m, format!("{d}{p}")).bearer_auth(&token);
    let r = session(reqwest::Method::GET, "/api/session");
    assert_eq!(x.answer(D, "GET", "/api/session", r).await?.0, 200);
    let r = session(reqwest::Method::POST, "/api/session/touch");
    assert_eq!(x.answer(D, "POST", "/api/session/touch", r).await?.0, 200);
    let r = session(reqwest::Method::DELETE, "/api/session");
    assert_eq!(x.answer(D, "DELETE", "/api/session", r).await?.0, 204);
    let r = session(reqwest::Method::GET, "/api/session");
    assert_eq!(x.answer(D, "GET", "/api/session", r).await?.0, 410);
    let r = anon
        .get(format!("{d}/api/session"))
        .bearer_auth("not-a-token");
    assert_eq!(x.answer(D, "GET", "/api/session", r).await?.0, 401);
    let status = anon.get(format!("{g}/api/queues/oa/status?ticket={ticket}"));
    let (code, body) = x.answer(G, "GET", status_path, status).await?;
    assert_eq!((code, &body["reason"]), (200, &json!("session_ended")));

    // Another browser joins and leaves: its stream ends with `closed` `left`.
    let pause = admin
        .put(format!("{d}/admin/queues/oa"))
        .json(&json!({"paused": true}));
    assert_eq!(x.answer(D, "PUT", queue, pause).await?.0, 200);
    let mut b = RawStream::open(&format!("{g}/api/queues/oa/stream")).await?;
    let first = b.read_until(|f| has_event(f, "waiting")).await?;
    let b_ticket = event(&first, "waiting")?["id"]
        .as_str()
        .context("an id")?
        .to_owned();
    let leave = anon.delete(format!("{g}/api/queues/oa/tickets/{b_ticket}"));
    let path = "/api/queues/{queue}/tickets/{ticket}";
    assert_eq!(x.answer(G, "DELETE", path, leave).await?.0, 204);
    let all_b = b.read_until(|_| false).await?;

    // Closing as sold out, and a reason that does not exist.
    let bogus = admin.delete(format!("{d}/admin/queues/oa?reason=bogus"));
    assert_eq!(x.answer(D, "DELETE", queue, bogus).await?.0, 400);
    let close = admin.delete(format!("{d}/admin/queues/oa?reason=sold_out"));
    assert_eq!(x.answer(D, "DELETE", queue, close).await?.0, 200);
    let audit = admin.get(format!("{d}/admin/audit?limit=5"));
    assert_eq!(x.answer(D, "GET", "/admin/audit", audit).await?.0, 200);
    let health = anon.get(format!("{g}/healthz"));
    assert_eq!(x.answer(G, "GET", "/healthz", health).await?.0, 200);

    // A proof-of-work queue: a puzzle, a queue that asks none, a join without a solution.
    let pow = json!({"challenge": "pow", "pow_difficulty": 4, "passthrough": false});
    let put = admin.put(format!("{d}/admin/queues/pow")).json(&pow);
    assert_eq!(x.answer(D, "PUT", queue, put).await?.0, 201);
    let challenge_path = "/api/queues/{queue}/challenge";
    let puzzle = anon.get(format!("{g}/api/queues/pow/challenge"));
    let (code, body) = x.answer(G, "GET", challenge_path, puzzle).await?;
    assert_eq!((code, &body["difficulty"]), (200, &json!(4)));
    let none = anon.get(format!("{g}/api/queues/sale/challenge"));
    assert_eq!(x.answer(G, "GET", challenge_path, none).await?.0, 409);
    let mut c = RawStream::open(&format!("{g}/api/queues/pow/stream")).await?;
    let all_c = c.read_until(|_| false).await?;
    assert!(c.ended, "the stream ends after challenge");
    assert_eq!(event(&all_c, "challenge")?["data"]["reason"], "missing");
    assert!(event(&all_c, "challenge")?.get("id").is_none());

    // >>> invitations: a join code for a good invitation, refusals, and a join without one.
    let all_i = invitation_answers(&mut x, &admin, &anon, (&d, &g)).await?;
    // <<< invitations

    // Every frame of the streams, as the document's `text/event-stream` items.
    let mut names = Vec::new();
    for f in all_a
        .iter()
        .chain(&all_b)
        .chain(&pre_frames)
        .chain(&all_c)
        .chain(&all_i)
    {
        names.push(f["event"].as_str().unwrap_or("-").to_owned());
        x.add(G, stream_path, "GET", 200, "text/event-stream", f.clone());
    }
    for name in [
        "waiting",
        "notice",
        "status",
        "admitted",
        "closed",
        "scheduled",
        "challenge",
        "invitation_refused",
    ] {
        assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
    }
    assert!(all_a.iter().any(|f| f.get("retry").is_some()));
    assert!(all_a.iter().any(|f| f.get("comment").is_some()));
    assert_eq!(event(&all_b, "closed")?["data"]["reason"], "left");
    // The ticket rides only on the events that carry it.
    assert!(event(&all_a, "notice")?.get("id").is_none());
    assert!(event(&all_b, "closed")?.get("id").is_none());

    let documents = json!({D: document(&d).await?, G: document(&g).await?});
    validate(documents, x.0).await
}

/// Invitations (docs/sale-day.md): `POST /api/queues/{queue}/invitation` answered `200` for an
/// invitation signed with the queue's key, `401` without one or for another key's, `409` for a
/// queue that takes none; the frames of a join without a code to an invite-only queue.
async fn invitation_answers(
    x: &mut Samples,
    admin: &reqwest::Client,
    anon: &reqwest::Client,
    (d, g): (&str, &str),
) -> anyhow::Result<Vec<serde_json::Value>> {
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use ed25519_dalek::Signer;
    const D: &str = "dispatcher";
    const G: &str = "gateway";
    let shop = ed25519_dalek::SigningKey::from_bytes(&[5u8; 32]);
    let jwk = json!({"kty": "OKP", "crv": "Ed25519", "kid": "k1",
        "x": URL_SAFE_NO_PAD.encode(shop.verifying_key().as_bytes())});
    let settings =
        json!({"invitations": "required", "invitation_keys": [jwk], "passthrough": false});
    let put = admin.put(format!("{d}/admin/queues/inv")).json(&settings);
    assert_eq!(
        x.answer(D, "PUT", "/admin/queues/{queue}", put).await?.0,
        201
    );
    let signed = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(r#"{"alg":"EdDSA","kid":"k1"}"#),
        URL_SAFE_NO_PAD
            .encode(json!({"sub": "a1", "aud": "inv", "exp": 4_102_444_800u64}).to_string())
    );
    let sig = URL_SAFE_NO_PAD.encode(shop.sign(signed.as_bytes()).to_bytes());
    let path = "/api/queues/{queue}/invitation";
    let post = |q: &str, bearer: Option<String>| {
        let r = anon.post(format!("{g}/api/queues/{q}/invitation"));
        match bearer {
            Some(b) => r.bearer_auth(b),
            None => r,
        }
    };
    let (code, body) = x
        .answer(
            G,
            "POST",
            path,
            post("inv", Some(format!("{signed}.{sig}"))),
        )
        .await?;
    assert_eq!((code, &body["expires_in"]), (200, &json!(60)));
    assert_eq!(x.answer(G, "POST", path, post("inv", None)).await?.0, 401);
    let forged = format!("{signed}.{}", URL_SAFE_NO_PAD.encode([0u8; 64]));
    assert_eq!(
        x.answer(G, "POST", path, post("inv", Some(forged)))
            .await?
            .0,
        401
    );
    assert_eq!(
        x.answer(G, "POST", path, post("sale", Some(signed.clone())))
            .await?
            .0,
        409
    );
    let mut s = RawStream::open(&format!("{g}/api/queues/inv/stream")).await?;
    let frames = s.read_until(|_| false).await?;
    assert_eq!(
        event(&frames, "invitation_refused")?["data"]["reason"],
        "required"
    );
    Ok(frames)
}
