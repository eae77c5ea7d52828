//! The gateway's HTTP/1.1 server.
//!
//! A small accept loop: each connection's request head is read into a short-lived buffer and
//! parsed with `httparse`. `GET /api/queues/{queue}/stream` is served right here (see
//! [`crate::stream`]): after the head is written, the connection holds no buffers at all, which
//! keeps a waiting browser to a few KiB of gateway memory. Every other request is handed to the
//! axum router ([`crate::routes`]) and answered with a `Content-Length` body; connections stay
//! alive between such requests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use usher_http::ApiError;

use crate::errors::{check_ticket, parse_queue};
use crate::gateway::Gateway;
use crate::stream::{self, Setup};

/// Longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Longest request body accepted (the API takes none; this is generous).
const MAX_BODY: usize = 64 * 1024;
/// Longest response body forwarded from the router.
const MAX_RESPONSE: usize = 1024 * 1024;
/// Time allowed for a request head to arrive on a new connection.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read at a time.
const READ_CHUNK: usize = 1024;
/// An idle keep-alive connection is closed after this long.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// Accepts connections until `stop` resolves, then stops accepting and waits for open
/// connections to finish (streams are ended by the drain; idle connections close at once).
pub(crate) async fn serve(
    listener: TcpListener,
    gw: Arc<Gateway>,
    app: Router,
    stop: impl std::future::Future<Output = ()>,
) {
    let sockets = Arc::new(Sockets::new(
        gw.config().max_connections,
        gw.open_sockets_counter(),
    ));
    let tracker = TaskTracker::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, _)) => {
                    // On Linux the socket inherits TCP_NODELAY from the listener
                    // (usher_http::listen).
                    #[cfg(not(target_os = "linux"))]
                    let _ = sock.set_nodelay(true);
                    let open = OpenSocket::new(&sockets);
                    if sockets.over_cap() {
                        sockets.shed();
                    }
                    tracker.spawn(connection(gw.clone(), sockets.clone(), app.clone(), sock, open));
                }
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
    drop(listener);
    tracker.close();
    tracker.wait().await;
}

/// The client connections open, against the cap on streams.
struct Sockets {
    /// Shared with the gateway, which reports it on `/metrics`.
    open: Arc<AtomicU64>,
    max: u64,
    /// How many times idle connections were told to close: a connection compares it with
    /// the count it saw when its last request began (see [`Sockets::shed`]).
    sheds: AtomicU64,
    /// Wakes idle keep-alive connections to close (descriptors are needed for streams).
    shed_idle: Notify,
}

impl Sockets {
    fn new(max: u64, open: Arc<AtomicU64>) -> Self {
        Self {
            open,
            max,
            sheds: AtomicU64::new(0),
            shed_idle: Notify::new(),
        }
    }

    /// Tells every connection that is idle now, or that turns idle after the request it is
    /// serving, to close. The count goes up before the wake-up, and an idle connection
    /// registers for the wake-up before it reads the count (`read_head`), so a connection
    /// that was not yet waiting when the wake-up went out still sees the count and closes:
    /// whether it closes never depends on how far its task had got.
    fn shed(&self) {
        self.sheds.fetch_add(1, Ordering::SeqCst);
        self.shed_idle.notify_waiters();
    }

    fn sheds(&self) -> u64 {
        self.sheds.load(Ordering::SeqCst)
    }

    /// Whether more connections are open than the stream cap allows (a new one counted). Then
    /// the new connection tells the idle ones to close ([`Sockets::shed`]), so idle keep-alive
    /// connections never keep descriptors from streams.
    fn over_cap(&self) -> bool {
        self.open.load(Ordering::Relaxed) > self.max
    }
}

/// Counts an open client connection for as long as it lives.
struct OpenSocket(Arc<Sockets>);

impl OpenSocket {
    fn new(sockets: &Arc<Sockets>) -> Self {
        sockets.open.fetch_add(1, Ordering::Relaxed);
        Self(sockets.clone())
    }
}

impl Drop for OpenSocket {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

struct Head {
    method: String,
    target: String,
    keep_alive: bool,
    last_event_id: Option<String>,
    headers: Vec<(String, Vec<u8>)>,
    content_length: usize,
    head_len: usize,
}

enum Read {
    Head(Head),
    /// The connection ended or timed out: close quietly.
    Closed,
    /// Answer this error, then close.
    Bad(ApiError),
}

async fn read_head(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    first: bool,
    gw: &Gateway,
    sockets: &Sockets,
    sheds_seen: u64,
) -> Read {
    let timeout = if first { HEAD_TIMEOUT } else { IDLE_TIMEOUT };
    let deadline = tokio::time::Instant::now() + timeout;
    // An idle connection (between requests) gives way when descriptors are needed: when told
    // to while it waits, or when it was told to since its last request began. It registers for
    // the wake-up before it reads the count (see `Sockets::shed`).
    let shed = sockets.shed_idle.notified();
    tokio::pin!(shed);
    if !first && buf.is_empty() {
        shed.as_mut().enable();
        if sockets.sheds() != sheds_seen {
            return Read::Closed;
        }
    }
    loop {
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; 48];
            let mut req = httparse::Request::new(&mut headers);
            match req.parse(buf) {
                Ok(httparse::Status::Complete(head_len)) => {
                    return Read::Head(head_of(&req, head_len))
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => {
                    return Read::Bad(ApiError::bad_request(format!("malformed request: {e}")))
                }
            }
        }
        if buf.len() >= MAX_HEAD {
            return Read::Bad(ApiError::new(
                axum::http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request head too large",
            ));
        }
        // Straight into `buf`: a buffer on the stack here would be part of every
        // connection's task, for as long as the connection lives.
        buf.reserve(READ_CHUNK);
        let n = tokio::select! {
            r = tokio::time::timeout_at(deadline, sock.read_buf(buf)) => match r {
                Ok(Ok(n)) => n,
                _ => return Read::Closed,
            },
            // Idle connections close when the gateway stops; a request under way finishes.
            () = gw.stopped().cancelled(), if buf.is_empty() => return Read::Closed,
            // ... and when their descriptors are needed (only between requests).
            () = &mut shed, if !first && buf.is_empty() => return Read::Closed,
        };
        if n == 0 {
            return Read::Closed;
        }
    }
}

fn head_of(req: &httparse::Request<'_, '_>, head_len: usize) -> Head {
    let mut keep_alive = req.version == Some(1);
    let mut last_event_id = None;
    let mut content_length = 0;
    let mut headers = Vec::with_capacity(req.headers.len());
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        match name.as_str() {
            "connection" => {
                let v = String::from_utf8_lossy(h.value).to_ascii_lowercase();
                if v.contains("close") {
                    keep_alive = false;
                } else if v.contains("keep-alive") {
                    keep_alive = true;
                }
            }
            "last-event-id" => {
                last_event_id = std::str::from_utf8(h.value).ok().map(str::to_owned);
            }
            "content-length" => {
                content_length = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(usize::MAX);
            }
            "transfer-encoding" => content_length = usize::MAX,
            _ => {}
        }
        headers.push((name, h.value.to_vec()));
    }
    Head {
        method: req.method.unwrap_or("").to_owned(),
        target: req.path.unwrap_or("/").to_owned(),
        keep_alive,
        last_event_id,
        headers,
        content_length,
        head_len,
    }
}

async fn connection(
    gw: Arc<Gateway>,
    sockets: Arc<Sockets>,
    app: Router,
    mut sock: TcpStream,
    _open: OpenSocket,
) {
    let mut buf = Vec::with_capacity(1024);
    let mut first = true;
    let mut sheds_seen = sockets.sheds();
    loop {
        let head = match read_head(&mut sock, &mut buf, first, &gw, &sockets, sheds_seen).await {
            Read::Head(h) => h,
            Read::Closed => return,
            Read::Bad(e) => {
                let _ = write_error(&mut sock, &e, false).await;
                return;
            }
        };
        first = false;
        sheds_seen = sockets.sheds();
        if head.content_length > MAX_BODY {
            let e = ApiError::new(
                axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                "request bodies are limited to 64 KiB and must have a Content-Length",
            );
            let _ = write_error(&mut sock, &e, false).await;
            return;
        }
        let total = head.head_len + head.content_length;
        while buf.len() < total {
            buf.reserve((total - buf.len()).min(16 * READ_CHUNK));
            match tokio::time::timeout(HEAD_TIMEOUT, sock.read_buf(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
        }
        // The connection serves another request after this one, unless the client or a
        // stopping gateway says otherwise, when the response ends. (Idle connections give way
        // when descriptors run short: see `Sockets::shed_idle`.)
        if head.method == "GET" {
            if let Some((queue, query)) = stream_target(&head.target) {
                // The head is parsed: free the buffer before the long wait (keeping any bytes
                // a client sent after it).
                let rest = buf.split_off(total);
                drop(std::mem::replace(&mut buf, rest));
                let finished = serve_stream(&gw, &mut sock, queue, query, head.last_event_id).await;
                // A stream that ended (admitted, closed, try later) leaves a reusable
                // connection, as any complete HTTP/1.1 response does: the browser keeps it in
                // its pool, and neither side pays for a teardown at the busiest moment (an
                // admission tick).
                if finished && head.keep_alive && !gw.shutting_down() {
                    continue;
                }
                return;
            }
        }
        let keep_alive = head.keep_alive && !gw.shutting_down();
        let body = buf[head.head_len..total].to_vec();
        buf.drain(..total);
        let request = match build_request(&head, body) {
            Ok(r) => r,
            Err(e) => {
                let _ = write_error(&mut sock, &e, false).await;
                return;
            }
        };
        // Boxed, like the stream setup below: a connection's task is as large as the largest
        // future it ever awaits in place, and these short-lived ones would otherwise size
        // every long-lived stream's task.
        let response = match Box::pin(app.clone().oneshot(request)).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        if Box::pin(write_response(&mut sock, response, keep_alive))
            .await
            .is_err()
            || !keep_alive
        {
            return;
        }
    }
}

/// `Some((queue, query))` for `/api/queues/{queue}/stream[?query]`.
fn stream_target(target: &str) -> Option<(&str, &str)> {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let queue = path.strip_prefix("/api/queues/")?.strip_suffix("/stream")?;
    (!queue.contains('/')).then_some((queue, query))
}

/// The `ticket` query parameter; duplicates or undecodable values are errors.
fn ticket_param(query: &str) -> Result<Option<String>, ApiError> {
    let mut ticket = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        if k == "ticket" {
            if ticket.is_some() {
                return Err(ApiError::bad_request("duplicate ticket parameter"));
            }
            ticket = Some(
                percent_decode(v).ok_or_else(|| ApiError::bad_request("malformed query string"))?,
            );
        }
    }
    Ok(ticket)
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Serves one stream; `true` when its response ended completely (the connection can serve
/// another request), `false` when the browser went away or a write failed.
async fn serve_stream(
    gw: &Arc<Gateway>,
    sock: &mut TcpStream,
    raw_queue: &str,
    query: &str,
    last_event_id: Option<String>,
) -> bool {
    let parsed = (|| {
        let q = parse_queue(&percent_decode(raw_queue).unwrap_or_default())?;
        let from_query = ticket_param(query)?;
        let ticket = last_event_id.filter(|t| !t.is_empty()).or(from_query);
        let place = ticket
            .as_deref()
            .map(|t| check_ticket(gw.ticket_key(), &q, t))
            .transpose()?;
        Ok::<_, ApiError>((q, place, ticket))
    })();
    let setup = match parsed {
        Ok((q, place, ticket)) => Box::pin(stream::open(gw, q, place, ticket)).await,
        Err(e) => Setup::Failed(e),
    };
    if let Setup::Failed(e) = &setup {
        let _ = write_error(sock, e, false).await;
        return false;
    }
    match stream::pump(gw, sock, setup).await {
        Ok(finished) => finished,
        Err(e) => {
            tracing::debug!(error = %e, "stream ended with an error");
            false
        }
    }
}

fn build_request(head: &Head, body: Vec<u8>) -> Result<axum::http::Request<Body>, ApiError> {
    let mut b = axum::http::Request::builder()
        .method(head.method.as_str())
        .uri(head.target.as_str());
    for (k, v) in &head.headers {
        b = b.header(k.as_str(), v.as_slice());
    }
    b.body(Body::from(body))
        .map_err(|e| ApiError::bad_request(format!("malformed request: {e}")))
}

async fn write_response(
    sock: &mut TcpStream,
    response: axum::response::Response,
    keep_alive: bool,
) -> std::io::Result<()> {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, MAX_RESPONSE)
        .await
        .unwrap_or_default();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        parts.status.as_u16(),
        parts.status.canonical_reason().unwrap_or("")
    );
    for (k, v) in &parts.headers {
        if matches!(
            k.as_str(),
            "content-length" | "transfer-encoding" | "connection"
        ) {
            continue;
        }
        out.push_str(k.as_str());
        out.push_str(": ");
        out.push_str(v.to_str().unwrap_or(""));
        out.push_str("\r\n");
    }
    out.push_str(&format!("content-length: {}\r\n", body.len()));
    if !keep_alive {
        out.push_str("connection: close\r\n");
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(&body);
    sock.write_all(&bytes).await
}

async fn write_error(sock: &mut TcpStream, e: &ApiError, keep_alive: bool) -> std::io::Result<()> {
    use axum::response::IntoResponse;
    Box::pin(write_response(sock, e.clone().into_response(), keep_alive)).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_stream_targets() {
        assert_eq!(stream_target("/api/queues/q1/stream"), Some(("q1", "")));
        assert_eq!(
            stream_target("/api/queues/q1/stream?ticket=a.1.b"),
            Some(("q1", "ticket=a.1.b"))
        );
        assert_eq!(stream_target("/api/queues/q1/status"), None);
        assert_eq!(stream_target("/api/queues/a/b/stream"), None);
    }

    #[test]
    fn ticket_parameters() {
        assert_eq!(ticket_param("").ok().flatten(), None);
        assert_eq!(
            ticket_param("x=1&ticket=a.1.b").ok().flatten(),
            Some("a.1.b".into())
        );
        assert!(ticket_param("ticket=a&ticket=b").is_err());
        assert!(ticket_param("ticket=%zz").is_err());
        assert_eq!(percent_decode("a%2Eb"), Some("a.b".into()));
    }
}
