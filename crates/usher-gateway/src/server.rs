//! The gateway's HTTP/1.1 server.
//!
//! A small accept loop: each connection's request head is read into a short-lived buffer and
//! parsed strictly ([`crate::request`]); no route takes a body, so none is ever read.
//! `GET /api/queues/{queue}/stream` is served right here (see [`crate::stream`]): after the
//! head is written, the connection holds no buffers at all, which keeps a waiting browser to a
//! few KiB of gateway memory. Every other request is handed to the axum router
//! ([`crate::routes`]) and its answer streamed back whatever its size (with a `Content-Length`
//! when the size is known, else chunked); connections stay alive between such requests, and
//! hold no buffer while they wait for the next one.
//!
//! Slow clients get deadlines, not per-read timeouts: the whole head (and PROXY protocol
//! header) within `--header-timeout-secs` of the connection's start (or of a later request's
//! first byte), and an idle keep-alive connection closes after `--idle-timeout-secs`. Sockets
//! are capped ([`crate::sockets`]): all of them (`--max-sockets`, the last few kept for health
//! checks), and those of one client address (`--ip-max-sockets`); when they run short, idle
//! connections and old unfinished heads give way to streams. Behind `--proxy-protocol`, the
//! wait for the PROXY header is part of the first head: it gives way the same way (one
//! reader, [`ClientConn::read_head`], reads both), so connections that never send a header
//! cannot keep browsers out.
//!
//! The routes learn who the client is from the request's [`IpKey`] extension, set here from
//! the socket's peer, the PROXY header or the trusted `X-Forwarded-For` hops (the per-IP rate
//! of status polls and leaves).

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use axum::Router;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;
use usher_http::ApiError;

use crate::client::{forwarded_for, proxy_header, IpKey, ProxyHeader};
use crate::errors::{check_ticket, parse_queue};
use crate::metrics::{self, Refusal, SocketRefusal};
use crate::request::{
    percent_decode, query_param, stream_target, ticket_param, Head, HeadReader, Parsed, MAX_HEAD,
};
use crate::respond::{write_error, write_response};
use crate::shared::Gateway;
use crate::sockets::{AddressSocket, OpenSocket, Sockets, Zone, HEAD_SHED_AGE};
use crate::stream::{self, Framing, Setup};

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
    let sockets = Arc::new(Sockets::new(
        gw.open_sockets_counter(),
        cfg.max_connections,
        cfg.max_sockets,
        cfg.health_reserve_sockets,
        cfg.ip_max_sockets,
    ));
    // The socket's peer is the client unless a proxy stands between: behind a PROXY protocol
    // header the client is counted once the header names it; behind trusted proxies that
    // write `X-Forwarded-For`, one proxy socket carries many clients, and none is counted.
    let count_peer = cfg.trusted_proxy_hops == 0 && !cfg.proxy_protocol;
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
                    // One address past its sockets is closed before it counts for anything
                    // else (it sheds nobody).
                    let address = if count_peer {
                        match sockets.of_address(IpKey::of(peer.ip(), cfg.ipv6_prefix)) {
                            Some(a) => Some(a),
                            None => {
                                metrics::socket_refused(SocketRefusal::IpSockets);
                                drop(sock);
                                continue;
                            }
                        }
                    } else {
                        None
                    };
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
                        peer, reserve: zone == Zone::Reserve, _open: open, address };
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

/// What a connection is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Awaited {
    /// The PROXY protocol header that starts every connection (`--proxy-protocol`).
    ProxyHeader,
    /// A request head.
    Head,
}

/// A new connection's start, and the deadline of its first head (and PROXY header).
#[derive(Debug, Clone, Copy)]
struct Start {
    at: Instant,
    deadline: Instant,
}

enum Read {
    Head(Head),
    /// The PROXY protocol header arrived: the client it names, when it names one.
    Proxy(Option<IpAddr>),
    /// The connection ended, or sat idle past its timeout: close quietly.
    Closed,
    /// A request head did not arrive whole in time.
    TimedOut,
    /// A head (or PROXY header) still arriving [`HEAD_SHED_AGE`] after the connection's
    /// start (or a later head's first byte) gave way when sockets ran short.
    Shed,
    /// Answer this error, then close.
    Bad(ApiError),
    /// Not a PROXY protocol header: close without an answer (only a load balancer that
    /// always sends one is in front).
    BadProxy,
}

impl Read {
    /// Counts why the connection ends here, and answers what takes an answer.
    async fn refuse(self, sock: &mut TcpStream) {
        match self {
            Read::Head(_) | Read::Proxy(_) | Read::Closed => {}
            Read::TimedOut => metrics::socket_refused(SocketRefusal::HeadTimeout),
            Read::Shed => metrics::socket_refused(SocketRefusal::SlowHead),
            Read::BadProxy => metrics::socket_refused(SocketRefusal::BadRequest),
            Read::Bad(e) => {
                metrics::socket_refused(SocketRefusal::BadRequest);
                let _ = write_error(sock, &e, None).await;
            }
        }
    }
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
    /// Counted for its client address (`--ip-max-sockets`), while it lives.
    address: Option<AddressSocket>,
}

impl ClientConn {
    async fn run(mut self, mut sock: TcpStream) {
        let cfg = self.gw.config();
        let head_timeout = if self.reserve {
            RESERVE_HEAD_TIMEOUT.min(cfg.header_timeout())
        } else {
            cfg.header_timeout()
        };
        // The first head (and the PROXY protocol header before it) has this long from now.
        let now = Instant::now();
        let mut first = Some(Start {
            at: now,
            deadline: now + head_timeout,
        });
        let mut buf = Vec::new();
        let mut peer_ip = self.peer.ip();
        if cfg.proxy_protocol {
            let sheds_seen = self.sockets.sheds();
            match self
                .read_head(&mut sock, &mut buf, Awaited::ProxyHeader, first, sheds_seen)
                .await
            {
                Read::Proxy(source) => peer_ip = source.unwrap_or(peer_ip),
                other => return other.refuse(&mut sock).await,
            }
            // The client is known now: count its sockets.
            if cfg.trusted_proxy_hops == 0 {
                match self.sockets.of_address(IpKey::of(peer_ip, cfg.ipv6_prefix)) {
                    Some(a) => self.address = Some(a),
                    None => {
                        metrics::socket_refused(SocketRefusal::IpSockets);
                        return;
                    }
                }
            }
        }
        let mut sheds_seen = self.sockets.sheds();
        loop {
            let head = match self
                .read_head(&mut sock, &mut buf, Awaited::Head, first, sheds_seen)
                .await
            {
                Read::Head(h) => h,
                other => return other.refuse(&mut sock).await,
            };
            // Later heads: idle timeout first, then the head timeout from their first byte.
            first = None;
            sheds_seen = self.sockets.sheds();
            // No route takes a body (`request` refuses a head that announces one): the
            // request is its head.
            let total = head.head_len;
            let client = IpKey::of(
                forwarded_for(
                    peer_ip,
                    usize::try_from(cfg.trusted_proxy_hops).unwrap_or(usize::MAX),
                    head.values("x-forwarded-for"),
                ),
                cfg.ipv6_prefix,
            );
            // The connection serves another request after this one, unless the client or a
            // stopping gateway says otherwise, when the response ends. (Idle connections give
            // way when descriptors run short: see `Sockets::shed_idle`.) One in the sockets
            // kept for health checks serves one answer: kept, it would wait for its next head
            // with the normal deadlines, not the reserve's, and could hold the reserve
            // (probes open a connection each anyway).
            let kept = head.keep_alive && !self.reserve;
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
                    if finished && framing == Framing::Chunked && kept && !self.gw.shutting_down() {
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
            let keep_alive = kept && !self.gw.shutting_down();
            buf.drain(..total);
            if buf.is_empty() {
                // Nothing of the next request yet: hold no buffer while waiting for it.
                buf = Vec::new();
            }
            let request = match build_request(&head, client) {
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
            let length_known = head.minor_version > 0;
            if Box::pin(write_response(
                &mut sock,
                response,
                keep_alive,
                length_known,
            ))
            .await
            .is_err()
                || !keep_alive
            {
                return;
            }
        }
    }

    /// Reads what `awaited` names into `buf`: a new connection's PROXY header and first head
    /// by its `first` deadline, or — between requests — a head within the idle timeout and
    /// then the head timeout from its first byte. Bytes after a PROXY header stay in `buf`.
    /// Gives way when sockets run short ([`Sockets::shed`]): between requests at once, and
    /// while a head or PROXY header is arriving once [`HEAD_SHED_AGE`] has passed since the
    /// connection's start (or the later head's first byte).
    async fn read_head(
        &self,
        sock: &mut TcpStream,
        buf: &mut Vec<u8>,
        awaited: Awaited,
        first: Option<Start>,
        mut sheds_seen: u64,
    ) -> Read {
        let (gw, sockets) = (&self.gw, &self.sockets);
        let mut deadline = first.map_or_else(
            || {
                Instant::now()
                    + if buf.is_empty() {
                        gw.config().idle_timeout()
                    } else {
                        gw.config().header_timeout()
                    }
            },
            |f| f.deadline,
        );
        let mut idle = first.is_none() && buf.is_empty();
        // When this head began to arrive: a new connection's at its start (its PROXY header's
        // wait included), a later one's at its first byte.
        let mut head_since = match first {
            Some(f) => Some(f.at),
            None => (!idle).then(Instant::now),
        };
        let mut reader = HeadReader::default();
        let shed = sockets.shed_wakeup();
        tokio::pin!(shed);
        loop {
            if !buf.is_empty() {
                if idle {
                    // The next request's first byte: its head has the head timeout.
                    idle = false;
                    head_since = Some(Instant::now());
                    deadline = Instant::now() + gw.config().header_timeout();
                }
                match awaited {
                    Awaited::ProxyHeader => match proxy_header(buf) {
                        ProxyHeader::Complete { len, source } => {
                            buf.drain(..len);
                            return Read::Proxy(source);
                        }
                        ProxyHeader::Partial => {}
                        ProxyHeader::Invalid => return Read::BadProxy,
                    },
                    Awaited::Head => match reader.feed(buf) {
                        Ok(Parsed::Complete(h)) => return Read::Head(h),
                        Ok(Parsed::Partial) => {}
                        Err(e) => return Read::Bad(e),
                    },
                }
            }
            // Registered for the wake-up before the count is read (see `crate::sockets`).
            shed.as_mut().enable();
            let sheds = sockets.sheds();
            if sheds != sheds_seen {
                if idle || head_since.is_some_and(|t| t.elapsed() >= HEAD_SHED_AGE) {
                    // Bytes that arrived but were not read yet count: a connection whose
                    // request is waiting in the kernel's buffer (a pooled connection reused
                    // at this moment, or a task that ran late) is served, not shed.
                    buf.reserve(chunk(buf));
                    match sock.try_read_buf(buf) {
                        Ok(n) if n > 0 => continue,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            return if idle { Read::Closed } else { Read::Shed };
                        }
                        _ => return Read::Closed,
                    }
                }
                // A head that just began: a browser's arrives whole in a moment.
                sheds_seen = sheds;
            }
            let n = tokio::select! {
                r = tokio::time::timeout_at(deadline, read_some(sock, buf)) => match r {
                    Ok(Ok(n)) => n,
                    Ok(Err(_)) => return Read::Closed,
                    Err(_) if buf.is_empty() => return Read::Closed,
                    Err(_) => return Read::TimedOut,
                },
                // Idle connections close when the gateway stops; a request under way finishes.
                () = gw.stopped().cancelled(), if buf.is_empty() => return Read::Closed,
                // Sockets ran short: the count is checked at the top of the loop.
                () = &mut shed => {
                    shed.set(sockets.shed_wakeup());
                    continue;
                }
            };
            if n == 0 {
                return Read::Closed;
            }
        }
    }

    /// Serves one stream; `true` when its response ended completely (the connection can serve
    /// another request), `false` when the browser went away or a write failed.
    ///
    /// Not an `async fn`, and its set-up boxed: a held browser's task keeps its stream's
    /// [`stream::pump`] and little else, not the request it came from nor what set it up (an
    /// `async fn` keeps its arguments, and every local in scope, for as long as it runs, and
    /// a task is as large as the largest future it awaits in place).
    fn serve_stream<'a>(
        &'a self,
        sock: &'a mut TcpStream,
        r: StreamRequest<'a>,
    ) -> impl Future<Output = bool> + Send + 'a {
        let framing = r.framing;
        let opening = Box::pin(self.open_stream(r));
        async move {
            let pumping = {
                // Boxed: the place an await's output goes is kept through the await, and a
                // whole `Setup` kept there would be in every held browser's task.
                let setup: Box<Setup> = opening.await;
                if let Setup::Failed(e) = &*setup {
                    let _ = write_error(sock, e, None).await;
                    return false;
                }
                stream::pump(&self.gw, sock, *setup, framing)
            };
            match pumping.await {
                Ok(finished) => finished,
                Err(e) => {
                    tracing::debug!(error = %e, "stream ended with an error");
                    false
                }
            }
        }
    }

    /// What to answer stream request `r` with: its queue and ticket checked, then its place
    /// taken or found ([`stream::open`]).
    async fn open_stream(&self, r: StreamRequest<'_>) -> Box<Setup> {
        let gw = &self.gw;
        let parsed = (|| {
            let q = parse_queue(&percent_decode(r.raw_queue).unwrap_or_default())?;
            let from_query = ticket_param(r.query)?;
            let pow = query_param(r.query, "pow")?;
            let proof = query_param(r.query, "proof")?;
            let join = query_param(r.query, "join")?;
            let ticket = r.last_event_id.filter(|t| !t.is_empty()).or(from_query);
            let place = ticket
                .as_deref()
                .map(|t| check_ticket(gw.ticket_key(), &q, t))
                .transpose()?;
            Ok::<_, ApiError>((q, place, ticket, pow, proof, join))
        })();
        Box::new(match parsed {
            Ok(_) if self.reserve => {
                metrics::refused(Refusal::Sockets);
                Setup::TryLater
            }
            Ok((q, place, ticket, pow, proof, join)) => {
                let asks = stream::Asks { pow, proof, join };
                stream::open(gw, q, place, ticket, asks, r.client).await
            }
            Err(e) => Setup::Failed(e),
        })
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

/// The routes served in the sockets kept for health checks.
fn is_health_check(target: &str) -> bool {
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    matches!(path, "/healthz" | "/readyz" | "/metrics")
}

/// Reads what has arrived into `buf`, up to a whole head. An empty buffer stays
/// unallocated until the socket has bytes to read: an idle connection holds no buffer.
async fn read_some(sock: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    if buf.is_empty() {
        sock.readable().await?;
    }
    // Straight into `buf`: a buffer on the stack here would be part of every connection's
    // task, for as long as the connection lives. At most `chunk` bytes, whatever spare
    // capacity the buffer has: the head reader refuses a buffer of MAX_HEAD, so it never
    // holds much more than a head.
    let want = chunk(buf);
    buf.reserve(want);
    (&mut *sock).take(want as u64).read_buf(buf).await
}

/// How much more to read into `buf`: a chunk, up to a whole head.
fn chunk(buf: &[u8]) -> usize {
    READ_CHUNK.min(MAX_HEAD.saturating_sub(buf.len())).max(1)
}

/// The request handed to the router, with its client's address as an extension (the routes'
/// per-IP rate).
fn build_request(head: &Head, client: IpKey) -> Result<axum::http::Request<Body>, ApiError> {
    let mut b = axum::http::Request::builder()
        .method(head.method.as_str())
        .uri(head.target.as_str())
        .extension(client);
    for (k, v) in head.headers.iter() {
        b = b.header(k, v);
    }
    b.body(Body::empty())
        .map_err(|e| ApiError::bad_request(format!("malformed request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of what `f` returns: for an `async fn`, its future, which is what a task
    /// spawned with it allocates, whatever state it is in.
    fn returned_size<A, B, F>(_: impl Fn(A, B) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    /// A held browser costs its connection's task, and a task is as large as the largest
    /// future it ever awaits in place: a stream set-up or a response kept inline, or an
    /// `async fn`'s arguments kept twice, would grow every waiting browser's memory (it did:
    /// 2,696 bytes in a release build, where it is now 1,168, bounded by the head reader).
    #[test]
    fn a_connections_task_stays_small() {
        let task = returned_size(ClientConn::run);
        let stream = returned_size(|c: &ClientConn, s: &mut TcpStream| {
            c.serve_stream(s, unreachable_request())
        });
        // The task's size is set by its largest state: a held stream's, or the head reader's
        // (`read_head`, about as large now).
        assert!(
            task <= 1_300,
            "a connection's task is {task} bytes: its held stream or its head reader grew"
        );
        assert!(stream <= 800, "a held stream's part is {stream} bytes");
    }

    fn unreachable_request() -> StreamRequest<'static> {
        unreachable!("only the type is asked")
    }
}
