//! The API descriptions' test support (`tests/browsers/openapi.rs`): fetch a server's
//! `/openapi.json`, probe which documented operations it serves, record real answers, read an
//! event stream frame by frame as the document describes it, and run the validator
//! (`crates/usher-testkit/openapi/validate.py`, with PyPI `openapi-spec-validator` and
//! `jsonschema` from the browser venv).

use std::time::Duration;

use anyhow::Context;
use serde_json::{json, Value};

use crate::config::admin_client;
use crate::tools::{browser_venv, workspace};

/// Methods probed on every documented path (`HEAD` and `OPTIONS` are the framework's).
pub const METHODS: [&str; 5] = ["GET", "PUT", "POST", "DELETE", "PATCH"];
/// How long a request or a stream condition may take.
pub const WAIT: Duration = Duration::from_secs(15);

pub async fn document(base: &str) -> anyhow::Result<Value> {
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

pub fn content_type(r: &reqwest::Response) -> String {
    let v = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    v.split(';').next().unwrap_or_default().trim().to_owned()
}

/// Every `(path template, METHOD)` the document names.
pub fn operations(doc: &Value) -> Vec<(String, String)> {
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
pub fn concrete(template: &str) -> String {
    template
        .replace("{queue}", "probe")
        .replace("{ticket}", "probe.1.forged")
        .replace("{name}", "probe")
}

/// Whether an answer is the router's own refusal (unknown path or method), rather than a
/// handler's (which may be a 404 too, but says what it did not find).
pub async fn refused_by_router(r: reqwest::Response) -> bool {
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
pub async fn coverage_problems(name: &str, base: &str, doc: &Value) -> anyhow::Result<Vec<String>> {
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
                .timeout(crate::wait::patient(WAIT))
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
pub struct Samples(pub Vec<Value>);

impl Samples {
    pub fn add(
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
    pub async fn answer(
        &mut self,
        document: &str,
        method: &str,
        path: &str,
        req: reqwest::RequestBuilder,
    ) -> anyhow::Result<(u16, Value)> {
        let r = req.timeout(crate::wait::patient(WAIT)).send().await?;
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
pub async fn validate(documents: Value, samples: Vec<Value>) -> anyhow::Result<()> {
    run_validator(json!({"documents": documents, "samples": samples})).await
}

/// Runs the validator on `documents` and request bodies (`{"document", "path", "method",
/// "at", "body"}`, what the docs' `curl` examples send); its output when something fails.
pub async fn validate_requests(documents: Value, requests: Vec<Value>) -> anyhow::Result<()> {
    run_validator(json!({"documents": documents, "samples": [], "requests": requests})).await
}

async fn run_validator(input: Value) -> anyhow::Result<()> {
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
    let input = serde_json::to_vec(&input)?;
    let mut stdin = child.stdin.take().context("validator stdin")?;
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &input).await?;
    drop(stdin);
    let out = tokio::time::timeout(
        crate::wait::patient(Duration::from_secs(120)),
        child.wait_with_output(),
    )
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

/// The frames of an event stream's text as the document's `StreamItem` shapes: `{"event",
/// "id"?, "data"}` (the `id` only when the frame has an `id:` line), `{"retry"}`,
/// `{"comment"}`.
pub fn frames(text: &str) -> anyhow::Result<Vec<Value>> {
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
pub struct RawStream {
    response: reqwest::Response,
    text: String,
    pub ended: bool,
}

impl RawStream {
    pub async fn open(url: &str) -> anyhow::Result<Self> {
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
    pub async fn read_until(
        &mut self,
        done: impl Fn(&[Value]) -> bool,
    ) -> anyhow::Result<Vec<Value>> {
        let deadline = tokio::time::Instant::now() + crate::wait::patient(WAIT);
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

pub fn has_event(frames: &[Value], name: &str) -> bool {
    frames.iter().any(|f| f["event"] == name)
}

pub fn event<'a>(frames: &'a [Value], name: &str) -> anyhow::Result<&'a Value> {
    frames
        .iter()
        .find(|f| f["event"] == name)
        .with_context(|| format!("no {name} event in {frames:?}"))
}
