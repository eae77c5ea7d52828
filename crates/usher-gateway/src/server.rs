//! The gateway's HTTP/1.1 server.
//!
//! A small accept loop: each connection's request head is read into a short-lived buffer and
//! parsed strictly ([`crate::request`]). `GET /api/queues/{queue}/stream` is served right here
//! (see [`crate::stream`]): after the head is written, the connection holds no buffers at all,
//! which keeps a waiting browser to a few KiB of gateway memory. Every other request is handed
//! to the axum router ([`crate::routes`]) and answered with a `Content-Length` body;
//! connections stay alive between such requests.
//!
//! Slow clients get deadlines, not per-read timeouts: the whole head (and PROXY protocol
//! header) within `--header-timeout-secs` of the connection's start (or of a later request's
//! first byte), the whole body within `--body-timeout-secs`, and an idle keep-alive connection
//! closes after `--idle-timeout-secs`. Sockets are capped (`--max-sockets`), the last few kept
//! for health checks.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::Router;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use usher_http::ApiError;

use crate::client::{forwarded_for, proxy_header, IpKey, ProxyHeader};
use crate::errors::{check_ticket, parse_queue};
use crate::metrics::{self, Refusal, SocketRefusal};
use crate::request::{
    self, percent_decode, query_param, stream_target, ticket_param, Head, Parsed, MAX_HEAD,
};
use crate::shared::Gateway;
use crate::stream::{self, Framing, Setup};

/// Longest response body forwarded from the router.
const MAX_RESPONSE: usize = 1024 * 1024;
/// Bytes read at a time.
const READ_CHUNK: usize = 1024;
/// The head timeout of a connection in the sockets kept for health checks: a health check
/// sends its request at once, and a slow client must not hold the reserve.
const RESERVE_HEAD_TIMEOUT: Duration = Duration::from_secs(2);
/// `Retry-After` (seconds) of a request refused by the socket cap.
const RETRY_AFTER_SECS: u64 = 5;

/// Accepts connections until `stop` resolves, then stops accepting and waits for open
/// connections to finish (streams are ended by the drain; idle connections close at once).
pub(crate) async fn serve(
    listener: TcpListener,
    gw: Arc<Gateway>,
    app: Router,
    stop: impl std::future::Future<Output = ()>,
) {
    let cfg = gw.config();
    let sockets = Arc::new(Sockets {
        open: gw.open_sockets_counter(),
        max_streams: cfg.max_connections,
        max: cfg.max_sockets,
        reserve_from: cfg.max_sockets.saturating_sub(cfg.health_reserve_sockets),
        sheds: AtomicU64::new(0),
        shed_idle: Notify::new(),
    });
    let tracker = TaskTracker::new();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, peer)) => {
                    // On Linux the socket inherits TCP_NODELAY from the listener
                    // (usher_http::listen).
                    #[cfg(not(target_os = "linux"))]
                    let _ = sock.set_nodelay(true);
                    let open = OpenSocket::new(&sockets);
                    let zone = sockets.zone();
                    if zone != Zone::Normal || sockets.over_stream_cap() {
                        sockets.shed();
                    }
                    if zone == Zone::Over {
                        // Closed at once: the descriptor goes back at once, and the client
                        // sees a closed connection rather than one that hangs.
                        metrics::socket_refused(SocketRefusal::Cap);
                        drop(sock);
                        continue;
                    }
                    let conn = ClientConn { gw: gw.clone(), sockets: sockets.clone(), app: app.clone(),
                        peer, reserve: zone == Zone::Reserve, _open: open };
                    tracker.spawn(conn.run(sock));
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

/// Where a new connection falls against `--max-sockets`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zone {
    Normal,
    /// In the sockets kept for health checks.
    Reserve,
    /// Past the cap: closed at once.
    Over,
}

/// The client connections open, against the caps on sockets and on streams.
struct Sockets {
    /// Shared with the gateway, which reports it on `/metrics`.
    open: Arc<AtomicU64>,
    /// `--max-connections`: streams.
    max_streams: u64,
    /// `--max-sockets`.
    max: u64,
    /// Past this many open sockets, a new one is in the health-check reserve.
    reserve_from: u64,
    /// How many times idle connections were told to close: a connection compares it with
    /// the count it saw when its last request began (see [`Sockets::shed`]).
    sheds: AtomicU64,
    /// Wakes idle keep-alive connections to close (descriptors are needed for streams).
    shed_idle: Notify,
}

impl Sockets {
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
    fn over_stream_cap(&self) -> bool {
        self.open.load(Ordering::Relaxed) > self.max_streams
    }

    /// Where the newest connection (counted) falls against the socket cap.
    fn zone(&self) -> Zone {
        let open = self.open.load(Ordering::Relaxed);
        if open > self.max {
            Zone::Over
        } else if open > self.reserve_from {
            Zone::Reserve
        } else {
            Zone::Normal
        }
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

enum Read {
    Head(Head),
    /// The connection ended, or sat idle past its timeout: close quietly.
    Closed,
    /// A request head did not arrive whole in time.
    TimedOut,
    /// Answer this error, then close.
    Bad(ApiError),
}

/// One client connection.
struct ClientConn {
    gw: Arc<Gateway>,
    sockets: Arc<Sockets>,
    app: Router,
    peer: SocketAddr,
    /// In the sockets kept for health checks: only health checks are served.
    reserve: bool,
    _open: OpenSocket,
}

impl ClientConn {
    async fn run(self, mut sock: TcpStream) {
        let cfg = self.gw.config();
        let head_timeout = if self.reserve {
            RESERVE_HEAD_TIMEOUT.min(cfg.header_timeout())
        } else {
            cfg.header_timeout()
        };
        // The first head (and the PROXY protocol header before it) has this long from now.
        let mut deadline = Some(Instant::now() + head_timeout);
        let mut buf = Vec::with_capacity(1024);
        let mut peer_ip = self.peer.ip();
        if cfg.proxy_protocol {
            match read_proxy_header(&mut sock, &mut buf, deadline).await {
                Some(source) => peer_ip = source.unwrap_or(peer_ip),
                None => return,
            }
        }
        let mut sheds_seen = self.sockets.sheds();
        loop {
            let head = match self
                .read_head(&mut sock, &mut buf, deadline, sheds_seen)
                .await
            {
                Read::Head(h) => h,
                Read::Closed => return,
                Read::TimedOut => {
                    metrics::socket_refused(SocketRefusal::HeadTimeout);
                    return;
                }
                Read::Bad(e) => {
                    metrics::socket_refused(SocketRefusal::BadRequest);
                    let _ = write_error(&mut sock, &e, None).await;
                    return;
                }
            };
            // Later heads: idle timeout first, then the head timeout from their first byte.
            deadline = None;
            sheds_seen = self.sockets.sheds();
            let total = head.head_len + head.content_length;
            let body_deadline = Instant::now() + cfg.body_timeout();
            while buf.len() < total {
                buf.reserve((total - buf.len()).min(16 * READ_CHUNK));
                match tokio::time::timeout_at(body_deadline, sock.read_buf(&mut buf)).await {
                    Ok(Ok(n)) if n > 0 => {}
                    Ok(_) => return,
                    Err(_) => {
                        metrics::socket_refused(SocketRefusal::BodyTimeout);
                        let e = ApiError::new(
                            StatusCode::REQUEST_TIMEOUT,
                            "the request body did not arrive in time",
                        );
                        let _ = write_error(&mut sock, &e, None).await;
                        return;
                    }
                }
            }
            let client = IpKey::of(forwarded_for(
                peer_ip,
                usize::try_from(cfg.trusted_proxy_hops).unwrap_or(usize::MAX),
                head.values("x-forwarded-for"),
            ));
            // The connection serves another request after this one, unless the client or a
            // stopping gateway says otherwise, when the response ends. (Idle connections give
            // way when descriptors run short: see `Sockets::shed_idle`.)
            if head.method == "GET" {
                if let Some((queue, query)) = stream_target(&head.target) {
                    // The head is parsed: free the buffer before the long wait (keeping any
                    // bytes a client sent after it).
                    let rest = buf.split_off(total);
                    drop(std::mem::replace(&mut buf, rest));
                    let framing = if head.minor_version == 0 {
                        Framing::UntilClose
                    } else {
                        Framing::Chunked
                    };
                    let request = StreamRequest {
                        raw_queue: queue,
                        query,
                        last_event_id: head.last_event_id.clone(),
                        client,
                        framing,
                    };
                    let finished = self.serve_stream(&mut sock, request).await;
                    // A stream that ended (admitted, closed, try later) leaves a reusable
                    // connection, as any complete HTTP/1.1 response does: the browser keeps
                    // it in its pool, and neither side pays for a teardown at the busiest
                    // moment (an admission tick).
                    if finished
                        && framing == Framing::Chunked
                        && head.keep_alive
                        && !self.gw.shutting_down()
                    {
                        continue;
                    }
                    return;
                }
            }
            if self.reserve && !is_health_check(&head.target) {
                metrics::socket_refused(SocketRefusal::Reserve);
                let e = ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too many connections; try again shortly",
                );
                let _ = write_error(&mut sock, &e, Some(RETRY_AFTER_SECS)).await;
                return;
            }
            let keep_alive = head.keep_alive && !self.gw.shutting_down();
            let body = buf[head.head_len..total].to_vec();
            buf.drain(..total);
            let request = match build_request(&head, body) {
                Ok(r) => r,
                Err(e) => {
                    let _ = write_error(&mut sock, &e, None).await;
                    return;
                }
            };
            // Boxed, like the stream setup below: a connection's task is as large as the
            // largest future it ever awaits in place, and these short-lived ones would
            // otherwise size every long-lived stream's task.
            let response = match Box::pin(self.app.clone().oneshot(request)).await {
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

    /// Reads a request head into `buf`, by `deadline` (a new connection's), or — between
    /// requests — within the idle timeout and then the head timeout from its first byte.
    async fn read_head(
        &self,
        sock: &mut TcpStream,
        buf: &mut Vec<u8>,
        deadline: Option<Instant>,
        sheds_seen: u64,
    ) -> Read {
        let (gw, sockets) = (&self.gw, &self.sockets);
        let between = deadline.is_none();
        let mut deadline = deadline.unwrap_or_else(|| {
            Instant::now()
                + if buf.is_empty() {
                    gw.config().idle_timeout()
                } else {
                    gw.config().header_timeout()
                }
        });
        let mut idle = between && buf.is_empty();
        // An idle connection (between requests) gives way when descriptors are needed: when
        // told to while it waits, or when it was told to since its last request began. It
        // registers for the wake-up before it reads the count (see `Sockets::shed`).
        let shed = sockets.shed_idle.notified();
        tokio::pin!(shed);
        if idle {
            shed.as_mut().enable();
            if sockets.sheds() != sheds_seen {
                return Read::Closed;
            }
        }
        loop {
            if !buf.is_empty() {
                if idle {
                    // The next request's first byte: its head has the head timeout.
                    idle = false;
                    deadline = Instant::now() + gw.config().header_timeout();
                }
                match request::parse(buf) {
                    Ok(Parsed::Complete(h)) => return Read::Head(h),
                    Ok(Parsed::Partial) => {}
                    Err(e) => return Read::Bad(e),
                }
            }
            // Straight into `buf`: a buffer on the stack here would be part of every
            // connection's task, for as long as the connection lives.
            buf.reserve(READ_CHUNK.min(MAX_HEAD - buf.len()).max(1));
            let n = tokio::select! {
                r = tokio::time::timeout_at(deadline, sock.read_buf(buf)) => match r {
                    Ok(Ok(n)) => n,
                    Ok(Err(_)) => return Read::Closed,
                    Err(_) if buf.is_empty() => return Read::Closed,
                    Err(_) => return Read::TimedOut,
                },
                // Idle connections close when the gateway stops; a request under way finishes.
                () = gw.stopped().cancelled(), if buf.is_empty() => return Read::Closed,
                // ... and when their descriptors are needed (only between requests).
                () = &mut shed, if between && buf.is_empty() => return Read::Closed,
            };
            if n == 0 {
                return Read::Closed;
            }
        }
    }

    /// Serves one stream; `true` when its response ended completely (the connection can serve
    /// another request), `false` when the browser went away or a write failed.
    async fn serve_stream(&self, sock: &mut TcpStream, r: StreamRequest<'_>) -> bool {
        let gw = &self.gw;
        let parsed = (|| {
            let q = parse_queue(&percent_decode(r.raw_queue).unwrap_or_default())?;
            let from_query = ticket_param(r.query)?;
            let pow = query_param(r.query, "pow")?;
            let proof = query_param(r.query, "proof")?;
            let ticket = r.last_event_id.filter(|t| !t.is_empty()).or(from_query);
            let place = ticket
                .as_deref()
                .map(|t| check_ticket(gw.ticket_key(), &q, t))
                .transpose()?;
            Ok::<_, ApiError>((q, place, ticket, pow, proof))
        })();
        let setup = match parsed {
            Ok(_) if self.reserve => {
                metrics::refused(Refusal::Sockets);
                Setup::TryLater
            }
            Ok((q, place, ticket, pow, proof)) => {
                Box::pin(stream::open(gw, q, place, ticket, pow, proof, r.client)).await
            }
            Err(e) => Setup::Failed(e),
        };
        if let Setup::Failed(e) = &setup {
            let _ = write_error(sock, e, None).await;
            return false;
        }
        match stream::pump(gw, sock, setup, r.framing).await {
            Ok(finished) => finished,
            Err(e) => {
                tracing::debug!(error = %e, "stream ended with an error");
                false
            }
        }
    }
}

/// A stream request, as read from its head.
struct StreamRequest<'a> {
    raw_queue: &'a str,
    query: &'a str,
    last_event_id: Option<String>,
    client: IpKey,
    framing: Framing,
}

/// Reads the PROXY protocol header that starts the connection, by `deadline`, and leaves any
/// bytes after it in `buf`. `Some(source)` (the client, when the header names one); `None`
/// when the connection must close: no valid header in time.
async fn read_proxy_header(
    sock: &mut TcpStream,
    buf: &mut Vec<u8>,
    deadline: Option<Instant>,
) -> Option<Option<IpAddr>> {
    let deadline = deadline?;
    loop {
        if !buf.is_empty() {
            match proxy_header(buf) {
                ProxyHeader::Complete { len, source } => {
                    buf.drain(..len);
                    return Some(source);
                }
                ProxyHeader::Partial => {}
                ProxyHeader::Invalid => {
                    metrics::socket_refused(SocketRefusal::BadRequest);
                    return None;
                }
            }
        }
        buf.reserve(256);
        match tokio::time::timeout_at(deadline, sock.read_buf(buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return None,
            Err(_) => {
                metrics::socket_refused(SocketRefusal::HeadTimeout);
                return None;
            }
        }
    }
}

/// The routes served in the sockets kept for health checks.
fn is_health_check(target: &str) -> bool {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    matches!(path, "/healthz" | "/readyz" | "/metrics")
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
    let headers: Vec<(&str, &str)> = parts
        .headers
        .iter()
        .filter(|(k, _)| {
            !matches!(
                k.as_str(),
                "content-length" | "transfer-encoding" | "connection"
            )
        })
        .map(|(k, v)| (k.as_str(), v.to_str().unwrap_or("")))
        .collect();
    let bytes = request::response_bytes(parts.status, &headers, &body, keep_alive);
    sock.write_all(&bytes).await
}

/// Writes an error answer (`Retry-After` when given) and closes the connection after it.
async fn write_error(
    sock: &mut TcpStream,
    e: &ApiError,
    retry_after: Option<u64>,
) -> std::io::Result<()> {
    sock.write_all(&request::error_bytes(e, retry_after, false))
        .await
}
