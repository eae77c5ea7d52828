//! Writing a held stream: its response head and events, each in one write, until a terminal
//! update or the browser goes away; keepalive comments on a silent stream.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::future::Either;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tracing::Instrument;
use usher_runtime::SpanLink;

use super::{Holding, Setup, CHALLENGE_BACKOFF, OOM_BACKOFF};
use crate::frames::{event_frame, jittered, retry_frame, waiting_frame_into, KEEPALIVE_FRAME};
use crate::latest;
use crate::metrics;
use crate::respond::send;
use crate::shared::Gateway;
use crate::update::Update;

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
/// response head) and before `suffix` (e.g. the last chunk), in one write: see [`write_out`].
fn chunk_with<'a>(
    sock: &'a mut TcpStream,
    framing: Framing,
    prefix: &str,
    text: &str,
    suffix: &str,
) -> Finish<'a> {
    let buf = framed(
        framing,
        prefix,
        |b| b.extend_from_slice(text.as_bytes()),
        suffix,
    );
    write_out(sock, buf)
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

/// What is left of a write the socket could not take at once (a browser that reads slowly).
type Rest<'a> = Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + 'a>>;

/// A write made as far as the socket took it, and what finishes it: ready when every byte
/// went (or the write failed: the error), else the rest, which goes as the socket drains.
type Finish<'a> = Either<std::future::Ready<std::io::Result<()>>, Rest<'a>>;

/// Writes `buf` whole, then gives it back for reuse. Usually the socket takes it at once, here
/// and now: one `write` syscall, no timer, and nothing of the write in the connection's task.
/// Otherwise (a browser that reads slowly) the rest is written as the socket drains, within
/// [`crate::respond::WRITE_TIMEOUT`] ([`send`]), by a future boxed for the purpose: a held
/// connection's task is as large as the largest future it awaits in place, so the rare slow
/// write must not size them all.
fn write_out(sock: &mut TcpStream, buf: Vec<u8>) -> Finish<'_> {
    let mut done = 0;
    while done < buf.len() {
        match sock.try_write(&buf[done..]) {
            Ok(0) => return done_with(Err(std::io::ErrorKind::WriteZero.into())),
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Either::Right(Box::pin(async move {
                    send(sock, &buf[done..]).await?;
                    recycle(buf);
                    Ok(())
                }));
            }
            Err(e) => return done_with(Err(e)),
        }
    }
    recycle(buf);
    done_with(Ok(()))
}

/// A write over, with its result.
fn done_with<'a>(r: std::io::Result<()>) -> Finish<'a> {
    Either::Left(std::future::ready(r))
}

/// Keeps `buf` for this thread's next write, unless it grew too large to keep.
fn recycle(buf: Vec<u8>) {
    if buf.capacity() <= SCRATCH_KEEP {
        SCRATCH.set(buf);
    }
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
///
/// Not an `async fn`: an `async fn` keeps its arguments for as long as it runs, and a held
/// browser's [`Setup`] would size its connection's task twice over. The set-up is taken apart
/// here, and the future returned keeps only what its stream needs.
pub(crate) fn pump<'a>(
    gw: &'a Arc<Gateway>,
    sock: &'a mut TcpStream,
    setup: Setup,
    framing: Framing,
) -> impl Future<Output = std::io::Result<bool>> + Send + 'a {
    let retry = gw.config().retry_ms;
    let text = match setup {
        Setup::Live {
            ticket,
            holding,
            rx,
            joined,
        } => {
            let live = Live {
                ticket,
                holding,
                rx,
                joined,
            };
            return Either::Left(pump_live(gw, sock, live, framing));
        }
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
    let written = chunk_with(sock, framing, framing.head(), &text, framing.last());
    Either::Right(async move { written.await.map(|()| true) })
}

/// A held browser's part of its [`Setup`].
struct Live {
    ticket: String,
    holding: Holding,
    rx: latest::Receiver<Update>,
    /// The browser's `join` span, when it joined here with traces on.
    joined: Option<SpanLink>,
}

/// [`pump`] for a held browser: events as the line moves, until a terminal one.
///
/// Its future is what a waiting browser costs for as long as it waits, so it is kept small:
/// an `async` block over its arguments (an `async fn` would keep a second copy of them), the
/// first event's locals scoped to their block, and every write made in place, with only a
/// write the socket cannot take at once boxed ([`write_out`]).
// Not `async fn` on purpose (above): its arguments would be kept twice.
#[allow(clippy::manual_async_fn)]
fn pump_live<'a>(
    gw: &'a Arc<Gateway>,
    sock: &'a mut TcpStream,
    mut live: Live,
    framing: Framing,
) -> impl Future<Output = std::io::Result<bool>> + Send + 'a {
    // The block uses `live`'s fields where they are: a `let Live { .. } = live` would keep
    // them twice.
    async move {
        // The keepalive timer's next tick, kept across the loop's turns (re-armed only when it
        // fires), so a position update does not register and drop a keepalive waiter each time.
        let mut keepalive = std::pin::pin!(next_tick(
            gw.keepalive().subscribe(live.holding.attached.place.0)
        ));
        // The head goes out with the first event: one write (one TCP segment) per join.
        let first = live.rx.borrow_and_update().clone();
        let (mut done, written) = write_update(gw, sock, &mut live, first, framing, true);
        written.await?;
        let mut last_write = tokio::time::Instant::now();
        // Bytes a client sent mid-stream are not a request this server can answer afterwards.
        let mut clean = true;
        while !done {
            tokio::select! {
                changed = live.rx.changed() => {
                    let u = match changed {
                        // A new position, the update nearly every write is: rendered
                        // straight from the channel (no copy of the update), and nothing
                        // else to do.
                        Ok(()) => match write_position(sock, framing, &mut live) {
                            Ok(written) => {
                                written.await?;
                                last_write = tokio::time::Instant::now();
                                continue;
                            }
                            Err(u) => u,
                        },
                        Err(_) => Update::superseded(),
                    };
                    let written;
                    (done, written) = write_update(gw, sock, &mut live, u, framing, false);
                    written.await?;
                    last_write = tokio::time::Instant::now();
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
        // A terminal update detached the connection already; dropping `holding` releases
        // nothing.
        drop(live.holding);
        Ok(clean)
    }
}

/// Writes the position the channel holds now (the update nearly every write is), rendered
/// straight from the channel: no copy of the update. Any other update is handed back, to be
/// written by [`write_update`].
fn write_position<'a>(
    sock: &'a mut TcpStream,
    framing: Framing,
    live: &mut Live,
) -> Result<Finish<'a>, Update> {
    // Rendered under the channel's lock, written after it is released: the hub sends (the
    // same lock) while it holds its own lock, which must never wait for a socket.
    let buf = {
        let cur = live.rx.borrow_and_update();
        match &*cur {
            Update::Waiting(w) => {
                framed(framing, "", |b| waiting_frame_into(b, &live.ticket, w), "")
            }
            other => return Err(other.clone()),
        }
    };
    Ok(write_out(sock, buf))
}

/// Writes update `u` in its `deliver` span (after the response head when `first`, and before
/// the last chunk when it is terminal). A terminal update first ends the place's count for its
/// address; once the write is whole, an admission is counted delivered and a notice (a stream
/// opened in maintenance starts with its `status`, a notice's way) is marked shown, so it is
/// written once. Whether `u` ended the stream, and what finishes the write.
///
/// The write is made here and now, and usually all of it: the future handed back is then
/// ready, and keeps neither the update nor its frame (in the stream's future, they would size
/// every held connection's task). Only a write the socket cannot take at once is boxed.
fn write_update<'a>(
    gw: &'a Gateway,
    sock: &'a mut TcpStream,
    live: &'a mut Live,
    u: Update,
    framing: Framing,
    first: bool,
) -> (bool, Finish<'a>) {
    let done = u.is_terminal();
    live.holding.ended(&u);
    let span = deliver_span(&u, live.joined.as_ref());
    let written = span.in_scope(|| {
        let prefix = if first { framing.head() } else { "" };
        let suffix = if done { framing.last() } else { "" };
        // Rendered straight into the write's buffer: an admission's token is copied once.
        let buf = framed(
            framing,
            prefix,
            |b| {
                if first {
                    b.extend_from_slice(retry_frame(gw.config().retry_ms).as_bytes());
                }
                u.frame_into(b, &live.ticket);
            },
            suffix,
        );
        write_out(sock, buf)
    });
    let admitted = matches!(u, Update::Admitted(_));
    let notice = match u {
        Update::Notice { notice, .. } => Some(notice),
        _ => None,
    };
    let attached = &live.holding.attached;
    let after = move || {
        if admitted {
            metrics::admission_delivered();
        }
        if let Some(notice) = notice {
            gw.hub().notice_shown(attached, &notice);
        }
    };
    (done, then_after(written, span, after))
}

/// `written`, then `after` once the write is whole: at once when the socket took it all, else
/// only when the rest has gone as the socket drained (in `span`). Never after a write that
/// failed. (An admission is counted delivered, a notice marked shown, only once the browser
/// can read all of it.)
fn then_after<'a>(
    written: Finish<'a>,
    span: tracing::Span,
    after: impl FnOnce() + Send + 'a,
) -> Finish<'a> {
    match written {
        Either::Left(done) => {
            let r = done.into_inner();
            if r.is_ok() {
                after();
            }
            done_with(r)
        }
        Either::Right(rest) => Either::Right(Box::pin(async move {
            rest.instrument(span).await?;
            after();
            Ok(())
        }) as Rest<'a>),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

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

    /// A browser's socket with a small receive buffer (`.0`), and the gateway's end (`.1`).
    async fn slow_reader() -> std::io::Result<(TcpStream, TcpStream)> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let small = tokio::net::TcpSocket::new_v4()?;
        small.set_recv_buffer_size(4096)?;
        let (client, accepted) = tokio::join!(small.connect(addr), listener.accept());
        Ok((client?, accepted?.0))
    }

    /// `n` bytes that are not all alike.
    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i % 251) as u8).collect()
    }

    #[tokio::test]
    async fn a_write_the_socket_cannot_take_at_once_is_finished_as_it_drains() -> std::io::Result<()>
    {
        use tokio::io::AsyncReadExt as _;
        // A reader with a small receive buffer, and twice the most a sender's buffer grows to
        // here (`tcp_wmem`, 4 MiB): the first `try_write` cannot take it all, so the rest goes
        // through the waiting `write_all`.
        let (mut client, mut sock) = slow_reader().await?;
        let big = bytes(8 << 20);
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

    /// What the browser reads before the write is polled again: far less than a socket takes
    /// at once on loopback (a send buffer grows to megabytes there), so the read ends.
    const FIRST_READ: usize = 64 << 10;

    /// `io`'s output, or an error naming `what` after 10 s: a kernel that takes less than the
    /// test expects fails the test instead of hanging it.
    async fn within<T>(
        what: &str,
        io: impl Future<Output = std::io::Result<T>>,
    ) -> std::io::Result<T> {
        tokio::time::timeout(Duration::from_secs(10), io)
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other(format!("{what}: no end in 10 s"))))
    }

    /// An admission's frame that the socket cannot take at once (a browser that reads
    /// slowly) is counted delivered only once the rest has gone as the browser's reads drained
    /// the socket, and once; a rest that fails (the browser went away) counts nothing.
    /// (`write_update` hands its effects to `then_after`; the gateway's `/metrics` counting
    /// admissions written at once: `metrics::metrics_count_what_browsers_did_and_name_no_ticket`
    /// in `usher-testkit`.)
    #[tokio::test(flavor = "current_thread")]
    async fn an_admission_written_as_the_socket_drains_is_counted_once_it_is_whole(
    ) -> std::io::Result<()> {
        use tokio::io::AsyncReadExt as _;
        // Counted here, not in the process's recorder: this thread runs the whole test.
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let scrape = recorder.handle();
        let _local = ::metrics::set_default_local_recorder(&recorder);
        let delivered = || {
            let text = scrape.render();
            let line = text
                .lines()
                .find_map(|l| l.strip_prefix(metrics::ADMISSIONS_DELIVERED));
            line.map_or(0, |n| n.trim().parse::<u64>().expect("a count"))
        };

        // Four times the most the gateway's send buffer grows to here (`tcp_wmem`, 4 MiB): the
        // socket cannot take it at once, nor the rest after the browser's first reads.
        let (mut browser, mut sock) = slow_reader().await?;
        let frame = bytes(16 << 20);
        let mut finish = then_after(
            write_out(&mut sock, frame.clone()),
            tracing::Span::none(),
            metrics::admission_delivered,
        );
        assert!(matches!(finish, Either::Right(_)), "taken at once");
        // The browser reads nothing, then a little (far less than the socket took at once:
        // the write is not polled meanwhile): the rest waits, and nothing is counted.
        assert!(futures::poll!(&mut finish).is_pending());
        assert_eq!(delivered(), 0, "counted before the browser read anything");
        let mut got = vec![0; frame.len()];
        within("the first read", browser.read_exact(&mut got[..FIRST_READ])).await?;
        assert!(futures::poll!(&mut finish).is_pending());
        assert_eq!(delivered(), 0, "counted before the rest was written");
        // The browser reads the rest: the write is whole, and counted once.
        let (read, written) = tokio::join!(
            within(
                "the rest's read",
                browser.read_exact(&mut got[FIRST_READ..])
            ),
            within("the rest's write", finish)
        );
        read?;
        written?;
        assert!(got == frame, "every byte, in order");
        assert_eq!(delivered(), 1);

        // A browser that goes away before the rest is written: not counted.
        let (browser, mut sock) = slow_reader().await?;
        let mut finish = then_after(
            write_out(&mut sock, bytes(16 << 20)),
            tracing::Span::none(),
            metrics::admission_delivered,
        );
        assert!(futures::poll!(&mut finish).is_pending());
        drop(browser);
        let failed = tokio::time::timeout(Duration::from_secs(10), finish).await;
        assert!(
            matches!(failed, Ok(Err(_))),
            "the rest reached a closed socket: {failed:?}"
        );
        assert_eq!(delivered(), 1, "a write that failed was counted");
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
