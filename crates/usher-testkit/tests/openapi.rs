//! The API description (`GET /openapi.json`) of real dispatcher and gateway processes:
//!
//! - both documents are valid OpenAPI 3.1 (PyPI `openapi-spec-validator`, installed in the
//!   browser venv by `scripts/ensure-browser.sh`; `crates/usher-testkit/openapi/validate.py`);
//! - every operation a document names is served, and no other method is served on its paths;
//!   and routes are added only through the table the document is made from (a source check,
//!   since a path nobody describes cannot be found by asking the server);
//! - real answers — JSON bodies, errors, and every frame of real event streams — validate
//!   against the schemas the documents give for their route, method, status and content type.

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};
use usher_testkit::config::admin_client;
use usher_testkit::procs::Proc;
use usher_testkit::tools::{browser_venv, workspace};
use usher_testkit::RedisServer;

/// Methods probed on every documented path (`HEAD` and `OPTIONS` are the framework's).
const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "PATCH"];
const WAIT: Duration = Duration::from_secs(15);

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

async fn document(base: &str) -> anyhow::Result<Value> {
    let r = reqwest::get(format!("{base}/openapi.json")).await?;
    anyhow::ensure!(r.status() == 200, "GET /openapi.json: {}", r.status());
    let ct = content_type(&r);
    anyhow::ensure!(ct == "application/json", "content-type {ct}");
    let doc: Value = r.json().await?;
    anyhow::ensure!(
        doc["openapi"] == "3.1.0",
        "not OpenAPI 3.1: {}",
        doc["openapi"]
    );
    Ok(doc)
}

fn content_type(r: &reqwest::Response) -> String {
    let v = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    v.split(';').next().unwrap_or_default().trim().to_owned()
}

/// Every `(path template, METHOD)` the document names.
fn operations(doc: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        for method in METHODS {
            if item.get(method.to_ascii_lowercase()).is_some() {
                out.push((path.clone(), method.to_owned()));
            }
        }
    }
    out
}

/// A concrete path for a template: every `{param}` filled with a well-formed value.
fn concrete(template: &str) -> String {
    template
        .replace("{queue}", "probe")
        .replace("{ticket}", "probe.1.forged")
        .replace("{name}", "probe")
}

/// Whether an answer is the router's own refusal (unknown path or method), rather than a
/// handler's (which may be a 404 too, but says what it did not find).
async fn refused_by_router(r: reqwest::Response) -> bool {
    let status = r.status().as_u16();
    if status == 405 {
        return true;
    }
    if status != 404 || content_type(&r) != "application/json" {
        return false;
    }
    let body: Value = r.json().await.unwrap_or_default();
    body["error"] == "not found"
}

/// Problems with `doc`'s coverage of the server at `base`: a documented operation the server
/// does not serve, or a method it serves on a documented path that the document omits.
async fn coverage_problems(name: &str, base: &str, doc: &Value) -> anyhow::Result<Vec<String>> {
    // The admin token goes with every probe, so an admin route answers its handler's error
    // rather than the token check's.
    let http = admin_client();
    let documented = operations(doc);
    let mut problems = Vec::new();
    for (path, _) in &documented {
        for method in METHODS {
            let url = format!("{base}{}", concrete(path));
            let r = http
                .request(method.parse()?, &url)
                .timeout(WAIT)
                .send()
                .await
                .with_context(|| format!("{method} {url}"))?;
            let status = r.status();
            let is_documented = documented.iter().any(|(p, m)| p == path && m == method);
            // A stream answers at once and stays open: dropping it here closes it.
            let served = !refused_by_router(r).await;
            match (is_documented, served) {
                (true, false) => problems.push(format!(
                    "{name}: {method} {path} is in the document but not served ({status})"
                )),
                (false, true) => problems.push(format!(
                    "{name}: {method} {path} is served ({status}) but not in the document"
                )),
                _ => {}
            }
        }
    }
    Ok(problems)
}

/// One real answer, to be validated against the document's schema for it.
struct Samples(Vec<Value>);

impl Samples {
    fn add(
        &mut self,
        document: &str,
        path: &str,
        method: &str,
        status: u16,
        ct: &str,
        body: Value,
    ) {
        self.0.push(json!({
            "document": document, "path": path, "method": method.to_ascii_lowercase(),
            "status": status, "content_type": ct, "body": body,
        }));
    }

    /// Sends `req`, records its answer (JSON, or text as a JSON string) as a sample of
    /// `document`'s `METHOD path`, and returns its status and body.
    async fn answer(
        &mut self,
        document: &str,
        method: &str,
        path: &str,
        req: reqwest::RequestBuilder,
    ) -> anyhow::Result<(u16, Value)> {
        let r = req.timeout(WAIT).send().await?;
        let status = r.status().as_u16();
        let ct = content_type(&r);
        let text = r.text().await?;
        let body = if ct == "application/json" {
            serde_json::from_str(&text).with_context(|| format!("{method} {path}: {text}"))?
        } else {
            Value::String(text)
        };
        if text_is_empty(&body) {
            // No content: the validator checks only that the status is documented.
            self.add(document, path, method, status, "", Value::Null);
        } else {
            self.add(document, path, method, status, &ct, body.clone());
        }
        Ok((status, body))
    }
}

fn text_is_empty(body: &Value) -> bool {
    body.as_str().is_some_and(str::is_empty)
}

/// Runs the validator on `documents` and `samples`; its output when something fails.
async fn validate(documents: Value, samples: Vec<Value>) -> anyhow::Result<()> {
    let venv = browser_venv()?;
    let script = workspace().join("crates/usher-testkit/openapi/validate.py");
    let mut child = tokio::process::Command::new(venv.join("bin/python"))
        .arg(&script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("cannot run validate.py")?;
    let input = serde_json::to_vec(&json!({"documents": documents, "samples": samples}))?;
    let mut stdin = child.stdin.take().context("validator stdin")?;
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &input).await?;
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .context("the validator did not finish")??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success() && stdout.lines().any(|l| l == "RESULT ok"),
        "the API descriptions or answers do not validate:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprint!("{stdout}");
    Ok(())
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
/// `route`, `nest` or a plain `Router`, whose routes the document would not know.
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
                for (i, line) in text.lines().enumerate() {
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

/// The frames of an event stream's text as the document's `StreamItem` shapes: `{"event",
/// "id"?, "data"}` (the `id` only when the frame has an `id:` line), `{"retry"}`,
/// `{"comment"}`.
fn frames(text: &str) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for frame in text.split("\n\n").filter(|f| !f.trim().is_empty()) {
        let mut item = serde_json::Map::new();
        for line in frame.lines() {
            if let Some(c) = line.strip_prefix(':') {
                item.insert("comment".into(), c.trim().into());
            } else if let Some((field, value)) = line.split_once(": ") {
                let value = match field {
                    "retry" => Value::from(value.parse::<u64>()?),
                    "data" => serde_json::from_str(value)?,
                    _ => Value::from(value),
                };
                item.insert(field.into(), value);
            } else {
                anyhow::bail!("not an SSE line: {line:?}");
            }
        }
        out.push(Value::Object(item));
    }
    Ok(out)
}

/// An event stream read as raw text, so the test sees exactly which lines each frame has.
struct RawStream {
    response: reqwest::Response,
    text: String,
    ended: bool,
}

impl RawStream {
    async fn open(url: &str) -> anyhow::Result<Self> {
        let response = reqwest::Client::new()
            .get(url)
            .header("accept", "text/event-stream")
            .send()
            .await?;
        anyhow::ensure!(response.status() == 200, "{url}: {}", response.status());
        anyhow::ensure!(content_type(&response) == "text/event-stream");
        Ok(Self {
            response,
            text: String::new(),
            ended: false,
        })
    }

    /// Reads until `done(frames so far)` holds or the stream ends.
    async fn read_until(&mut self, done: impl Fn(&[Value]) -> bool) -> anyhow::Result<Vec<Value>> {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let complete = &self.text[..self.text.rfind("\n\n").map_or(0, |i| i + 2)];
            let f = frames(complete)?;
            if done(&f) || self.ended {
                return Ok(f);
            }
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Err(_) => {
                    anyhow::bail!("stream: condition not met in time; so far:\n{}", self.text)
                }
                Ok(Ok(Some(bytes))) => self.text.push_str(&String::from_utf8_lossy(&bytes)),
                Ok(Ok(None)) => self.ended = true,
                Ok(Err(e)) => return Err(e.into()),
            }
        }
    }
}

fn has_event(frames: &[Value], name: &str) -> bool {
    frames.iter().any(|f| f["event"] == name)
}

fn event<'a>(frames: &'a [Value], name: &str) -> anyhow::Result<&'a Value> {
    frames
        .iter()
        .find(|f| f["event"] == name)
        .with_context(|| format!("no {name} event in {frames:?}"))
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
    let path = "/admin/queues/{queue}/draw/beacon";
    assert_eq!(x.answer(D, "POST", path, beacon).await?.0, 404);

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
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = anon.get(format!("{g}/api/queues/oa/status?ticket={ticket}"));
        let (code, body) = x.answer(G, "GET", status_path, status).await?;
        assert_eq!(code, 200);
        if body["state"] == "admitted" {
            break;
        }
        assert_eq!(body["state"], "admitting");
        assert!(tokio::time::Instant::now() < deadline, "still admitting");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

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

    // Every frame of both streams, as the document's `text/event-stream` items.
    let mut names = Vec::new();
    for f in all_a.iter().chain(&all_b) {
        names.push(f["event"].as_str().unwrap_or("-").to_owned());
        x.add(G, stream_path, "GET", 200, "text/event-stream", f.clone());
    }
    for name in ["waiting", "notice", "admitted", "closed"] {
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
