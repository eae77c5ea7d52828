//! The joins floor: a server that answers every stream request with one fixed `waiting`
//! event and then holds the stream open, with no queue behind it.
//!
//! It is what a gateway's join costs this machine when none of usher's logic runs: the same
//! runtime setup (`usher_runtime::runtime`, the `usher_http::listen` listener with its backlog and
//! `TCP_NODELAY`), the same request path and the same bytes on the wire — the gateway's stream
//! head, a `retry:` frame and a `waiting` event with the same fields and a ticket-shaped id,
//! all in one chunk, in one write. The load generator driven against it at a rate measures the
//! kernel's accept, receive and send, the runtime's wake-ups and the load generator itself;
//! usher's join latency above that floor is usher's (request handling, Redis, the hub).
//!
//! Deliberately left out: Redis, tickets (the id is the same string for every stream), the
//! gateway's connection limit and drain, the hub. Kept: keepalive comments, so a held stream
//! is never silent for longer than on a gateway.
//!
//! Two variants wait for Redis before answering ([`Before`]): the **round-trip floor**, one
//! `PING` (what any join that keeps its place in Redis pays at least), and the **join floor**,
//! usher's own join (`Store::join_many`: the join script, one place a call): what the
//! gateway's Redis work costs with none of the gateway's logic around it.
//!
//! A third knob spends CPU on each join ([`FloorSettings::burn`]): the **CPU floor**, given
//! the CPU a gateway spends on a join beyond a plain stand-in's, costs the machine what the
//! gateways' share of a join costs it (not Redis's), with no wait of any kind behind it. Its
//! latency over the plain floor's is what that CPU alone adds on these cores.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use usher_core::ids::QueueId;
use usher_core::messages::WaitingEvent;
use usher_core::store::{Joined, Store};

/// How the floor answers.
#[derive(Debug, Clone)]
pub struct FloorSettings {
    /// The `retry:` sent before the event, as a gateway sends its configured one.
    pub retry_ms: u64,
    /// A held stream gets a `: keepalive` comment this often; `None` never.
    pub keepalive: Option<Duration>,
    /// What every stream waits for before it is answered.
    pub before: Before,
    /// CPU this stand-in spends on each stream before it answers (after `before`), on its
    /// own thread, spinning; `None` none. It holds up every other connection of the thread
    /// meanwhile, as a gateway's own work on a join does.
    pub burn: Option<Duration>,
}

/// What a stream waits for before it is answered. A stream whose wait fails is closed
/// unanswered.
#[derive(Clone)]
pub enum Before {
    /// Nothing: the plain floor, no Redis.
    Nothing,
    /// One Redis round trip (`PING`) on this shared, pipelining connection: the round-trip
    /// floor, a lower bound on what a gateway that keeps a place in Redis before answering
    /// pays (a `PING` writes nothing, and a stream never waits for a call under way).
    Ping(redis::aio::MultiplexedConnection),
    /// usher's own join: a place taken in the request's queue by [`Store::join_many`], one
    /// place a call, the calls pipelined on the store's connection, for gateway index
    /// [`JOIN_FLOOR_GATEWAY`]: the join floor, what the gateway's Redis work costs with none
    /// of its logic (no batching, tickets, hub or limits). The queue must be open; the answer
    /// is still the fixed event, so the bytes on the wire are the other floors'.
    Join(Store),
}

impl std::fmt::Debug for Before {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Before::Nothing => "Nothing",
            Before::Ping(_) => "Ping",
            Before::Join(_) => "Join",
        })
    }
}

/// The gateway index the join floor's places are taken for: 0, which no gateway is ever given
/// (a gateway registers with an index from 1 to 65535), so no gateway's stream hears of them.
pub const JOIN_FLOOR_GATEWAY: u16 = 0;

impl Before {
    /// Waits for what a stream in queue `q` waits for; `false` when it failed.
    async fn wait(&self, q: &QueueId) -> bool {
        match self {
            Before::Nothing => true,
            Before::Ping(conn) => {
                let mut conn = conn.clone();
                let pong: redis::RedisResult<()> = redis::cmd("PING").query_async(&mut conn).await;
                pong.is_ok()
            }
            Before::Join(store) => matches!(
                store.join_many(q, JOIN_FLOOR_GATEWAY, now_ms(), 1).await,
                Ok(Joined::Places { .. })
            ),
        }
    }
}

/// Longest request head accepted, as on the gateway.
const MAX_HEAD: usize = 16 * 1024;
/// Time allowed for a request head to arrive.
const HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes read at a time.
const READ_CHUNK: usize = 1024;

/// The gateway's response head for every stream (`usher-gateway`'s `stream::STREAM_HEAD`).
pub const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    cache-control: no-cache\r\nx-accel-buffering: no\r\ntransfer-encoding: chunked\r\n\r\n";

/// The place every stream is told it has.
const POSITION: u64 = 1;
/// The fixed tag of the ticket-shaped event id: as long as a real ticket's (16 bytes of MAC
/// in unpadded base64), so the event is as long as a gateway's.
const TICKET_TAG: &str = "AAAAAAAAAAAAAAAAAAAAAA";
/// A chunk with a keepalive comment.
const KEEPALIVE_CHUNK: &[u8] = b"d\r\n: keepalive\n\n\r\n";

/// Accepts connections on `listener` until `stop` resolves. Streams still open then end when
/// the runtime is dropped: the floor has no place to give back, so no drain.
pub async fn serve(listener: TcpListener, settings: FloorSettings, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok((sock, _)) => {
                    tokio::spawn(connection(sock, settings.clone()));
                }
                // E.g. out of file descriptors: back off instead of spinning.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    Stream(QueueId),
    Health,
    BadQueue,
    NotFound,
}

fn route(method: &str, target: &str) -> Route {
    if method != "GET" {
        return Route::NotFound;
    }
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if matches!(path, "/healthz" | "/readyz") {
        return Route::Health;
    }
    let Some(queue) = path
        .strip_prefix("/api/queues/")
        .and_then(|p| p.strip_suffix("/stream"))
    else {
        return Route::NotFound;
    };
    QueueId::new(queue).map_or(Route::BadQueue, Route::Stream)
}

async fn connection(mut sock: TcpStream, settings: FloorSettings) {
    let Some((method, target)) = read_head(&mut sock).await else {
        return;
    };
    let answered = match route(&method, &target) {
        Route::Stream(q) => {
            if !settings.before.wait(&q).await {
                return;
            }
            if let Some(cpu) = settings.burn {
                burn(cpu);
            }
            let response = stream_response(&q, settings.retry_ms, now_ms());
            match sock.write_all(&response).await {
                Ok(()) => hold(&mut sock, settings.keepalive).await,
                Err(e) => Err(e),
            }
        }
        Route::Health => sock.write_all(&plain(200, "OK", "ok\n")).await,
        Route::BadQueue => {
            sock.write_all(&plain(400, "Bad Request", "bad queue\n"))
                .await
        }
        Route::NotFound => {
            sock.write_all(&plain(404, "Not Found", "not found\n"))
                .await
        }
    };
    // A failed write means the client is gone: nothing to report to anyone.
    drop(answered);
}

/// Spins until this thread has used `cpu` more CPU time (its own clock, so time the thread
/// spends preempted does not count: the machine pays all of `cpu`). The thread's CPU clock is
/// a system call to read, so the spin runs on the wall clock (read without one) in slices of
/// at most [`BURN_SLICE`], and the CPU clock is read between them: most of the burn is this
/// process's own time, as a gateway's work is, not the kernel's.
fn burn(cpu: Duration) {
    let until = thread_cpu() + cpu;
    loop {
        let used = thread_cpu();
        if used >= until {
            return;
        }
        let slice = (until - used).min(BURN_SLICE);
        let start = std::time::Instant::now();
        while start.elapsed() < slice {
            std::hint::spin_loop();
        }
    }
}

/// The longest spin between two reads of the thread's CPU clock in [`burn`].
const BURN_SLICE: Duration = Duration::from_micros(10);

/// The CPU time this thread has used so far.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    // The kernel's clock is never negative, and its nanoseconds are under a second.
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// Reads and parses a request head; `None` when the connection ends, times out or sends
/// something that is not one.
async fn read_head(sock: &mut TcpStream) -> Option<(String, String)> {
    let deadline = tokio::time::Instant::now() + HEAD_TIMEOUT;
    let mut buf = Vec::with_capacity(READ_CHUNK);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; 48];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(_)) => {
                return Some((req.method?.to_owned(), req.path?.to_owned()));
            }
            Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {}
            _ => return None,
        }
        buf.reserve(READ_CHUNK);
        match tokio::time::timeout_at(deadline, sock.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return None,
        }
    }
}

/// Holds an answered stream open until the client goes away, writing keepalive comments.
async fn hold(sock: &mut TcpStream, keepalive: Option<Duration>) -> std::io::Result<()> {
    let mut next = keepalive.map(|k| tokio::time::Instant::now() + k);
    loop {
        tokio::select! {
            () = sleep_until(next) => {
                sock.write_all(KEEPALIVE_CHUNK).await?;
                next = next.zip(keepalive).map(|(at, k)| at + k);
            }
            readable = sock.readable() => {
                readable?;
                let mut scratch = [0u8; 64];
                match sock.try_read(&mut scratch) {
                    // The client closed the connection.
                    Ok(0) => return Ok(()),
                    // Bytes sent mid-stream are not a request a stream can answer: ignored,
                    // as the gateway ignores them until the stream ends.
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The whole answer to a stream request, head included: what a gateway writes for a join, in
/// one chunk (`retry:`, then the `waiting` event whose id is the ticket).
pub fn stream_response(queue: &QueueId, retry_ms: u64, as_of_ms: u64) -> Vec<u8> {
    let event = WaitingEvent {
        queue: queue.clone(),
        position: POSITION,
        waiting: POSITION,
        eta_seconds: Some(0),
        as_of_ms,
        inventory: None,
        lane: None,
    };
    // A struct of a string and numbers always serializes.
    let data = serde_json::to_string(&event).unwrap_or_default();
    let text = format!(
        "retry: {retry_ms}\n\nevent: waiting\nid: {queue}.{POSITION}.{TICKET_TAG}\ndata: {data}\n\n"
    );
    format!("{STREAM_HEAD}{:x}\r\n{text}\r\n", text.len()).into_bytes()
}

/// A short plain-text response that closes the connection.
fn plain(status: u16, reason: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

fn now_ms() -> u64 {
    crate::conn::now_us() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::{parse_head, BodyDecoder, Framing};
    use usher_sse::{Item, Parser};

    #[test]
    fn routes_stream_requests_like_the_gateway() {
        let q = |s: &str| QueueId::new(s).map(Route::Stream).ok();
        assert_eq!(
            Some(route("GET", "/api/queues/q1/stream")),
            q("q1"),
            "a stream"
        );
        assert_eq!(
            Some(route("GET", "/api/queues/q1/stream?ticket=x")),
            q("q1")
        );
        assert_eq!(route("GET", "/api/queues/a/b/stream"), Route::BadQueue);
        assert_eq!(route("GET", "/api/queues/q1/status"), Route::NotFound);
        assert_eq!(route("POST", "/api/queues/q1/stream"), Route::NotFound);
        assert_eq!(route("GET", "/readyz"), Route::Health);
    }

    /// The response reads, with the load generator's own head parser, chunk decoder and SSE
    /// parser, as a gateway's join does: 200, an event stream, `retry:` and one `waiting`
    /// event carrying a ticket-shaped id and the event's fields.
    #[test]
    fn the_response_is_a_gateway_join() -> Result<(), Box<dyn std::error::Error>> {
        let q = QueueId::new("demo")?;
        let bytes = stream_response(&q, 3000, 1_700_000_000_000);
        let head = parse_head(&bytes)?.ok_or("a complete head")?;
        assert_eq!(head.status, 200);
        assert_eq!(head.content_type.as_deref(), Some("text/event-stream"));
        assert_eq!(head.framing, Framing::Chunked);
        let (mut body, mut sse, mut items) = (
            BodyDecoder::new(&Framing::Chunked),
            Parser::new(),
            Vec::new(),
        );
        body.decode(&bytes[head.len..], &mut |p| sse.push_into(p, &mut items))?;
        let [Item::Retry(3000), Item::Event(e)] = items.as_slice() else {
            return Err(format!("retry and one event: {items:?}").into());
        };
        assert_eq!(e.event, "waiting");
        assert_eq!(e.id.split('.').count(), 3, "queue.place.tag: {}", e.id);
        let w: WaitingEvent = serde_json::from_str(&e.data)?;
        assert_eq!((w.queue, w.position, w.as_of_ms), (q, 1, 1_700_000_000_000));
        // The stream stays open: no last chunk.
        assert!(!body.is_done());
        Ok(())
    }

    #[test]
    fn a_burn_spends_at_least_the_cpu_asked_of_it() {
        let before = thread_cpu();
        burn(Duration::from_millis(20));
        let spent = thread_cpu() - before;
        assert!(spent >= Duration::from_millis(20), "{spent:?}");
    }

    #[test]
    fn a_keepalive_is_one_comment_in_one_chunk() -> Result<(), Box<dyn std::error::Error>> {
        let (mut body, mut sse, mut items) = (
            BodyDecoder::new(&Framing::Chunked),
            Parser::new(),
            Vec::new(),
        );
        body.decode(KEEPALIVE_CHUNK, &mut |p| sse.push_into(p, &mut items))?;
        assert!(
            matches!(items.as_slice(), [Item::Comment(c)] if c.trim() == "keepalive"),
            "{items:?}"
        );
        Ok(())
    }
}
