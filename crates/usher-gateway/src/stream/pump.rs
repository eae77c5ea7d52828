//! Writing a held stream: its response head and events, each in one write, until a terminal
//! update or the browser goes away; keepalive comments on a silent stream.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::Instrument;
use usher_runtime::SpanLink;

use super::{Holding, Setup, CHALLENGE_BACKOFF, OOM_BACKOFF};
use crate::frames::{event_frame, jittered, retry_frame, waiting_frame_into, KEEPALIVE_FRAME};
use crate::metrics;
use crate::shared::Gateway;
use crate::update::Update;

/// A write to a browser that takes longer than this ends the connection (the place is kept
/// for the grace period).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// The `deliver` span of an update about to be written: for an admission made by a traced
/// tick, a child of that tick (through the stream message), linked to the browser's `join`
/// span when it joined here. Otherwise no span. It names the queue only: never the ticket
/// or the token.
fn deliver_span(u: &Update, joined: Option<&SpanLink>) -> tracing::Span {
    let Update::Admitted(a) = u else {
        return tracing::Span::none();
    };
    let Some(tick) = &a.trace else {
        return tracing::Span::none();
    };
    let span = tracing::info_span!("deliver", queue = %a.event.queue);
    usher_runtime::traces::set_parent(&span, tick);
    if let Some(j) = joined {
        j.add_to(&span);
    }
    span
}

/// The next tick of the keepalive timer `timer` (see [`crate::keepalive`]), with `timer`
/// handed back to wait for the one after. Never ready once the timer is gone (the gateway is
/// stopping).
async fn next_tick(
    mut timer: watch::Receiver<tokio::time::Instant>,
) -> (watch::Receiver<tokio::time::Instant>, tokio::time::Instant) {
    if timer.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
    let tick = *timer.borrow_and_update();
    (timer, tick)
}

/// How a stream's body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// HTTP/1.1: chunked, so the connection can serve another request after the stream.
    Chunked,
    /// HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    UntilClose,
}

impl Framing {
    /// The response head.
    fn head(self) -> &'static str {
        match self {
            Framing::Chunked => STREAM_HEAD,
            Framing::UntilClose => STREAM_HEAD_UNTIL_CLOSE,
        }
    }

    /// What ends the body.
    fn last(self) -> &'static str {
        match self {
            Framing::Chunked => LAST_CHUNK,
            Framing::UntilClose => "",
        }
    }
}

/// Writes `text` as one piece of the body (a chunk when chunked), after `prefix` (e.g. the
/// response head) and before `suffix` (e.g. the last chunk), in one write.
async fn chunk_with(
    sock: &mut TcpStream,
    framing: Framing,
    prefix: &str,
    text: &str,
    suffix: &str,
) -> std::io::Result<()> {
    let buf = framed(
        framing,
        prefix,
        |b| b.extend_from_slice(text.as_bytes()),
        suffix,
    );
    write_out(sock, buf).await
}

thread_local! {
    /// A buffer to frame writes in, reused by the connections this thread runs (see
    /// [`framed`]): a held connection keeps no buffer between its events.
    static SCRATCH: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// A reused buffer larger than this is dropped after its write rather than kept.
const SCRATCH_KEEP: usize = 16 * 1024;

/// `body` (rendered into the buffer by the closure) framed as one piece of the body (a chunk
/// when chunked), after `prefix` and before `suffix`: the bytes of one write, in this
/// thread's reused buffer (hand it to [`write_out`], which gives it back).
fn framed(
    framing: Framing,
    prefix: &str,
    body: impl FnOnce(&mut Vec<u8>),
    suffix: &str,
) -> Vec<u8> {
    use std::io::Write as _;
    let mut buf = SCRATCH.take();
    buf.clear();
    buf.extend_from_slice(prefix.as_bytes());
    let start = buf.len();
    body(&mut buf);
    let len = buf.len() - start;
    if framing == Framing::Chunked && len > 0 {
        // The chunk's size goes before its text: written after it, then moved in front.
        let mut size = [0u8; 18];
        let room = {
            let mut w = &mut size[..];
            // 16 hex digits at most, and CRLF: it fits.
            let _ = write!(w, "{len:x}\r\n");
            w.len()
        };
        let n = size.len() - room;
        buf.splice(start..start, size[..n].iter().copied());
        buf.extend_from_slice(b"\r\n");
    }
    buf.extend_from_slice(suffix.as_bytes());
    buf
}

/// Writes `buf` whole, then gives it back for reuse. Usually the socket takes it at once:
/// one `write` syscall, no timer. Otherwise (a browser that reads slowly) the rest is written
/// as the socket drains, within [`WRITE_TIMEOUT`].
async fn write_out(sock: &mut TcpStream, buf: Vec<u8>) -> std::io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match sock.try_write(&buf[done..]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                match tokio::time::timeout(WRITE_TIMEOUT, sock.write_all(&buf[done..])).await {
                    Ok(r) => r?,
                    Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
                }
                break;
            }
            Err(e) => return Err(e),
        }
    }
    if buf.capacity() <= SCRATCH_KEEP {
        SCRATCH.set(buf);
    }
    Ok(())
}

const LAST_CHUNK: &str = "0\r\n\r\n";

/// The response head of every HTTP/1.1 stream.
pub(crate) const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    cache-control: no-cache\r\nx-accel-buffering: no\r\ntransfer-encoding: chunked\r\n\r\n";

/// The response head of an HTTP/1.0 stream: the body ends when the connection closes.
const STREAM_HEAD_UNTIL_CLOSE: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    cache-control: no-cache\r\nx-accel-buffering: no\r\nconnection: close\r\n\r\n";

/// Serves a set-up stream on `sock` (the head not yet written) until it ends. The body is
/// chunked; it ends after a terminal update, or when the browser goes away. `Ok(true)` when
/// the response ended completely and nothing else was read from the connection (it can serve
/// another request).
pub(crate) async fn pump(
    gw: &Arc<Gateway>,
    sock: &mut TcpStream,
    setup: Setup,
    framing: Framing,
) -> std::io::Result<bool> {
    let retry = gw.config().retry_ms;
    let text = match setup {
        Setup::Live {
            ticket,
            holding,
            rx,
            joined,
        } => return pump_live(gw, sock, ticket, holding, rx, joined, framing).await,
        Setup::Once(frame) => retry_frame(retry) + &frame,
        Setup::TryLater | Setup::Failed(_) => retry_frame(jittered(retry)),
        Setup::TryMuchLater => retry_frame(jittered(retry * OOM_BACKOFF)),
        // No `id:`: the browser holds no ticket yet.
        Setup::Challenge(puzzle) => {
            retry_frame(jittered(retry * CHALLENGE_BACKOFF))
                + &event_frame("challenge", None, &puzzle)
        }
        // No `id:`: a join holds no ticket; a resume's browser keeps its own. The page
        // reconnects by itself with a fresh proof; other clients wait as for a challenge.
        Setup::ProofRequired(refusal) => {
            retry_frame(jittered(retry * CHALLENGE_BACKOFF))
                + &event_frame("proof_required", None, &refusal)
        }
        // No `id:`: no place was taken. The page closes its stream and says why.
        Setup::InvitationRefused(refusal) => {
            retry_frame(jittered(retry * CHALLENGE_BACKOFF))
                + &event_frame("invitation_refused", None, &refusal)
        }
    };
    // A whole response in one write: head, its only chunk, the last chunk.
    chunk_with(sock, framing, framing.head(), &text, framing.last())
        .await
        .map(|()| true)
}

/// [`pump`] for a held browser: events as the line moves, until a terminal one.
async fn pump_live(
    gw: &Arc<Gateway>,
    sock: &mut TcpStream,
    ticket: String,
    mut holding: Holding,
    mut rx: watch::Receiver<Update>,
    joined: Option<SpanLink>,
    framing: Framing,
) -> std::io::Result<bool> {
    let retry = gw.config().retry_ms;
    // The head goes out with the first chunk: one write (one TCP segment) per join.
    // The keepalive timer's next tick, kept across the loop's turns (re-armed only when it
    // fires), so a position update does not register and drop a keepalive waiter each time.
    let mut keepalive = std::pin::pin!(next_tick(
        gw.keepalive().subscribe(holding.attached.place.0)
    ));
    let first = rx.borrow_and_update().clone();
    let mut text = retry_frame(retry);
    text.push_str(&first.frame(&ticket).unwrap_or_default());
    let mut done = first.is_terminal();
    holding.ended(&first);
    let end = if done { framing.last() } else { "" };
    chunk_with(sock, framing, framing.head(), &text, end)
        .instrument(deliver_span(&first, joined.as_ref()))
        .await?;
    if let Update::Admitted(_) = &first {
        metrics::admission_delivered();
    }
    // A stream opened in maintenance starts with its `status` (a notice's way): written once.
    if let Update::Notice { notice, .. } = &first {
        gw.hub().notice_shown(&holding.attached, notice);
    }
    let mut last_write = tokio::time::Instant::now();
    // Bytes a client sent mid-stream are not a request this server can answer afterwards.
    let mut clean = true;
    while !done {
        tokio::select! {
            changed = rx.changed() => {
                let u = match changed {
                    Ok(()) => {
                        // A new position, the update nearly every write is: rendered straight
                        // from the channel (no copy of the update), and nothing else to do.
                        let rendered = {
                            let cur = rx.borrow_and_update();
                            match &*cur {
                                Update::Waiting(w) => Ok(framed(
                                    framing,
                                    "",
                                    |b| waiting_frame_into(b, &ticket, w),
                                    "",
                                )),
                                other => Err(other.clone()),
                            }
                        };
                        match rendered {
                            Ok(buf) => {
                                write_out(sock, buf).await?;
                                last_write = tokio::time::Instant::now();
                                continue;
                            }
                            Err(u) => u,
                        }
                    }
                    Err(_) => Update::superseded(),
                };
                done = u.is_terminal();
                holding.ended(&u);
                let end = if done { framing.last() } else { "" };
                let f = u.frame(&ticket).unwrap_or_default();
                chunk_with(sock, framing, "", &f, end)
                    .instrument(deliver_span(&u, joined.as_ref()))
                    .await?;
                last_write = tokio::time::Instant::now();
                if let Update::Admitted(_) = &u {
                    metrics::admission_delivered();
                }
                if let Update::Notice { notice, .. } = &u {
                    gw.hub().notice_shown(&holding.attached, notice);
                }
            }
            (timer, tick) = &mut keepalive => {
                keepalive.set(next_tick(timer));
                if gw.keepalive().due(last_write, tick) {
                    chunk_with(sock, framing, "", KEEPALIVE_FRAME, "").await?;
                    last_write = tokio::time::Instant::now();
                }
            }
            // Polled for readiness rather than awaiting `readable()`: no waiter to add and
            // remove around each event written.
            readable = std::future::poll_fn(|cx| sock.poll_read_ready(cx)) => {
                readable?;
                let mut buf = [0u8; 64];
                match sock.try_read(&mut buf) {
                    // The browser closed the connection.
                    Ok(0) => return Ok(false),
                    Ok(_) => clean = false,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    // A terminal update detached the connection already; dropping `holding` releases nothing.
    drop(holding);
    Ok(clean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(buf: Vec<u8>) -> String {
        String::from_utf8(buf).expect("utf-8")
    }

    #[test]
    fn a_frame_is_its_prefix_its_chunk_and_its_suffix() {
        let body = |b: &mut Vec<u8>| b.extend_from_slice(&[b'x'; 300]);
        let chunked = text(framed(Framing::Chunked, STREAM_HEAD, body, LAST_CHUNK));
        assert_eq!(
            chunked,
            format!("{STREAM_HEAD}12c\r\n{}\r\n0\r\n\r\n", "x".repeat(300))
        );
        let until_close = text(framed(Framing::UntilClose, "", body, ""));
        assert_eq!(until_close, "x".repeat(300));
        // An empty body is no chunk (an empty chunk would end the body).
        let empty = text(framed(Framing::Chunked, "", |_| {}, LAST_CHUNK));
        assert_eq!(empty, LAST_CHUNK);
    }

    #[tokio::test]
    async fn a_write_the_socket_cannot_take_at_once_is_finished_as_it_drains() -> std::io::Result<()>
    {
        use tokio::io::AsyncReadExt as _;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        // A reader with a small receive buffer, and twice the most a sender's buffer grows to
        // here (`tcp_wmem`, 4 MiB): the first `try_write` cannot take it all, so the rest goes
        // through the waiting `write_all`.
        let small = tokio::net::TcpSocket::new_v4()?;
        small.set_recv_buffer_size(4096)?;
        let (client, accepted) = tokio::join!(small.connect(addr), listener.accept());
        let (mut client, mut sock) = (client?, accepted?.0);
        let big: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            client.read_to_end(&mut got).await.map(|_| got)
        });
        write_out(&mut sock, big.clone()).await?;
        drop(sock);
        let got = reader.await.expect("the reader ran")?;
        assert!(got == big, "every byte, in order");
        assert_eq!(
            SCRATCH.take().capacity(),
            0,
            "a buffer over the keep size is dropped, not kept"
        );
        Ok(())
    }

    #[test]
    fn the_reused_buffer_starts_empty_each_time() {
        let first = framed(Framing::Chunked, "", |b| b.extend_from_slice(b"first"), "");
        assert_eq!(text(first.clone()), "5\r\nfirst\r\n");
        SCRATCH.set(first);
        let second = text(framed(
            Framing::Chunked,
            "",
            |b| b.extend_from_slice(b"2nd"),
            "",
        ));
        assert_eq!(second, "3\r\n2nd\r\n");
    }
}
