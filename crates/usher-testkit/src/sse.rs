//! An SSE client over real HTTP that parses events like a browser's `EventSource`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use anyhow::Context;
use futures::{Stream, StreamExt};
use usher_sse::{Event, Item, Parser};

pub use usher_sse::Item as SseItem;

/// The longest [`SseClient::open`] waits for a response's headers, before patience: a join
/// answers once its place is taken, which takes a Redis round trip, or a few seconds while a
/// Redis restarts under a fault test.
const OPEN_LIMIT: Duration = Duration::from_secs(30);

/// Opens SSE streams against one base URL.
#[derive(Clone)]
pub struct SseClient {
    http: reqwest::Client,
    base: String,
}

/// One open stream.
pub struct SseConn {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    body: Pin<Box<dyn Stream<Item = reqwest::Result<Vec<u8>>> + Send>>,
    parser: Parser,
    pending: VecDeque<Item>,
    /// The body ended (the server closed the response).
    pub ended: bool,
    /// Text of a non-200 response.
    pub error_body: Option<String>,
}

impl SseClient {
    pub fn new(base: impl Into<String>) -> Self {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap_or_default();
        Self {
            http,
            base: base.into(),
        }
    }

    /// A client whose connections leave from `local` (e.g. `127.0.0.2`: another client address
    /// on loopback) and carry `headers` (e.g. `X-Forwarded-For`), for the per-IP limits.
    pub fn from_address(
        base: impl Into<String>,
        local: std::net::IpAddr,
        headers: reqwest::header::HeaderMap,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .local_address(local)
            .default_headers(headers)
            .build()?;
        Ok(Self {
            http,
            base: base.into(),
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET base + path` with `Accept: text/event-stream` (and `Last-Event-ID` when given).
    pub async fn open(&self, path: &str, last_event_id: Option<&str>) -> anyhow::Result<SseConn> {
        let mut req = self
            .http
            .get(format!("{}{}", self.base, path))
            .header("accept", "text/event-stream");
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        // Bounded: a server that takes the request and never sends its headers fails the test
        // with the path, rather than hanging it (the body, a stream, is read under each
        // caller's own limit).
        let resp = crate::wait::within(
            &format!("the headers of GET {path}"),
            OPEN_LIMIT,
            req.send(),
        )
        .await?
        .context("SSE request failed")?;
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        if status != 200 {
            let text = resp.text().await.unwrap_or_default();
            return Ok(SseConn {
                status,
                headers,
                body: Box::pin(futures::stream::empty()),
                parser: Parser::new(),
                pending: VecDeque::new(),
                ended: true,
                error_body: Some(text),
            });
        }
        let body = resp.bytes_stream().map(|r| r.map(|b| b.to_vec()));
        Ok(SseConn {
            status,
            headers,
            body: Box::pin(body),
            parser: Parser::new(),
            pending: VecDeque::new(),
            ended: false,
            error_body: None,
        })
    }
}

impl SseConn {
    /// The next item (event, `retry:`, comment); `Ok(None)` when the response ended.
    /// Errors when nothing arrives within `timeout` (scaled by [`crate::wait::patience`], as
    /// are the limits of every read below).
    pub async fn next_item(&mut self, timeout: Duration) -> anyhow::Result<Option<Item>> {
        let timeout = crate::wait::patient(timeout);
        self.next_item_by(tokio::time::Instant::now() + timeout)
            .await
            .with_context(|| format!("reading within {timeout:?}"))
    }

    async fn next_item_by(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<Option<Item>> {
        loop {
            if let Some(i) = self.pending.pop_front() {
                return Ok(Some(i));
            }
            if self.ended {
                return Ok(None);
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => anyhow::bail!("no SSE item in time"),
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => {
                    self.ended = true;
                    anyhow::bail!("SSE body error: {e}");
                }
                Ok(Some(Ok(bytes))) => self.pending.extend(self.parser.push(&bytes)),
            }
        }
    }

    /// The next event (skipping `retry:` and comments); `Ok(None)` when the response ended.
    pub async fn next_event(&mut self, timeout: Duration) -> anyhow::Result<Option<Event>> {
        let timeout = crate::wait::patient(timeout);
        self.next_event_by(tokio::time::Instant::now() + timeout)
            .await
            .with_context(|| format!("waiting {timeout:?} for an event"))
    }

    async fn next_event_by(
        &mut self,
        deadline: tokio::time::Instant,
    ) -> anyhow::Result<Option<Event>> {
        loop {
            match self.next_item_by(deadline).await? {
                Some(Item::Event(e)) => return Ok(Some(e)),
                Some(_) => continue,
                None => return Ok(None),
            }
        }
    }

    /// Reads events until one named `name` arrives (returning it), the stream ends, or time runs out.
    pub async fn wait_for(&mut self, name: &str, timeout: Duration) -> anyhow::Result<Event> {
        let timeout = crate::wait::patient(timeout);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match self
                .next_event_by(deadline)
                .await
                .with_context(|| format!("waiting {timeout:?} for a {name:?} event"))?
            {
                Some(e) if e.event == name => return Ok(e),
                Some(_) => continue,
                None => anyhow::bail!("stream ended before a {name:?} event"),
            }
        }
    }
}

/// A stream read in the background: every event is recorded as it arrives.
pub struct Watcher {
    pub events: std::sync::Arc<std::sync::Mutex<Vec<Event>>>,
    pub ended: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    /// Starts reading `conn` until it ends.
    pub fn spawn(conn: SseConn) -> Self {
        Self::spawn_with(conn, Vec::new())
    }

    /// Like [`Watcher::spawn`], recording `already` (events read before) first.
    pub fn spawn_with(mut conn: SseConn, already: Vec<Event>) -> Self {
        let events = std::sync::Arc::new(std::sync::Mutex::new(already));
        let ended = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ev, en) = (events.clone(), ended.clone());
        let task = tokio::spawn(async move {
            while let Ok(Some(e)) = conn.next_event(Duration::from_secs(3600)).await {
                ev.lock().unwrap_or_else(|p| p.into_inner()).push(e);
            }
            en.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        Self {
            events,
            ended,
            task,
        }
    }

    pub fn snapshot(&self) -> Vec<Event> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The newest event named `name`.
    pub fn last(&self, name: &str) -> Option<Event> {
        self.snapshot().into_iter().rev().find(|e| e.event == name)
    }

    /// Every event named `name`.
    pub fn all(&self, name: &str) -> Vec<Event> {
        self.snapshot()
            .into_iter()
            .filter(|e| e.event == name)
            .collect()
    }

    pub fn has_ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Stops reading and closes the connection (the browser goes away).
    pub fn disconnect(self) {
        self.task.abort();
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}
