//! The SSE stream: setting a browser's connection up (join or resume) and pumping its events.
//!
//! A held connection costs one small task: the socket, a `watch` receiver (one pending update
//! at most, so a slow browser cannot grow memory), and a receiver of the gateway-wide keepalive
//! timer (one timer for all connections, not one per connection: [`crate::keepalive`]).
//! Buffers exist only while an event is being written.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::watch;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{eta_seconds, CloseReason, ScheduledEvent, WaitingEvent};
use usher_core::store::{PlaceState, StoreError};
use usher_core::ticket::Ticket;
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::errors::{closed_queue, logged, place_gone};
use crate::frames::{event_frame, jittered, retry_frame, KEEPALIVE_FRAME};
use crate::gateway::Gateway;
use crate::hub::{Attached, Reservation};
use crate::metrics::{self, Refusal};
use crate::update::{admitted_event, Update};

/// A write to a browser that takes longer than this ends the connection (the place is kept
/// for the grace period).
const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// What to answer a stream request with.
pub(crate) enum Setup {
    /// Hold the browser: events follow as the line moves.
    Live {
        ticket: String,
        holding: Holding,
        rx: watch::Receiver<Update>,
    },
    /// One event, then the end (an admission re-sent on resume).
    Once(String),
    /// `retry:` with jitter, then the end: try again shortly, maybe elsewhere.
    TryLater,
    /// A permanent error status.
    Failed(ApiError),
}

/// A place reserved for a connection being set up. Dropped before [`Reserved::attach`] (the
/// request was cancelled, or failed on Redis), it marks the place away, so the browser can
/// come back within the grace period and a vanished one costs no admission.
struct Reserved {
    gw: Arc<Gateway>,
    r: Option<Reservation>,
}

impl Reserved {
    fn new(gw: &Arc<Gateway>, q: &QueueId, place: PlaceId) -> Self {
        Self {
            gw: gw.clone(),
            r: Some(gw.hub().reserve(q, place)),
        }
    }

    /// Gives the reservation up without touching Redis (the place is admitted or gone).
    fn disarm(mut self) {
        if let Some(r) = self.r.take() {
            self.gw.hub().unreserve(&r);
        }
    }

    fn attach(mut self, first: Update) -> Option<(Attached, watch::Receiver<Update>)> {
        let r = self.r.take()?;
        self.gw.hub().attach_with(r, first)
    }

    /// The place reserved (`None` once given up).
    fn place(&self) -> Option<PlaceId> {
        self.r.as_ref().map(|r| r.place)
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Some(r) = self.r.take() {
            if self.gw.hub().unreserve(&r) {
                self.gw.mark_away(r.queue, r.place);
            }
        }
    }
}

/// Marks the place away when a connection that still owns it goes away.
pub(crate) struct Holding {
    gw: Arc<Gateway>,
    attached: Attached,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if self.gw.hub().detach(&self.attached) {
            self.gw
                .mark_away(self.attached.queue.clone(), self.attached.place);
        }
    }
}

/// Sets a stream up: joins the queue, or resumes the place `ticket` names.
///
/// The caller must run this to completion (the gateway's own connection task does: nothing
/// cancels it when the browser hangs up mid-request). A place taken or resumed is then either
/// attached, or — when the browser is gone by the time the stream starts — marked away by the
/// stream's guard, never leaked as a ghost place.
pub(crate) async fn open(
    gw: &Arc<Gateway>,
    q: QueueId,
    place: Option<PlaceId>,
    ticket: Option<String>,
) -> Setup {
    if gw.shutting_down() {
        metrics::refused(Refusal::Draining);
        return Setup::TryLater;
    }
    if gw.hub().connections() >= gw.config().max_connections {
        metrics::refused(Refusal::Cap);
        return Setup::TryLater;
    }
    setup(gw, q, place, ticket).await
}

async fn setup(
    gw: &Arc<Gateway>,
    q: QueueId,
    place: Option<PlaceId>,
    ticket: Option<String>,
) -> Setup {
    let idx = gw.index();
    let (state, reserved) = match place {
        Some(place) => {
            // Reserve first: from now on an older connection's disconnect cannot mark the
            // place away while it is being resumed.
            let reserved = Reserved::new(gw, &q, place);
            match resume(gw, &q, place, idx).await {
                Ok(s) => {
                    metrics::resumed();
                    (s, Some(reserved))
                }
                Err(_) => return refused_by_redis(),
            }
        }
        None => match gw.join(&q).await {
            Ok(s) => {
                let reserved = match &s {
                    PlaceState::Waiting { place, .. } | PlaceState::Scheduled { place, .. } => {
                        metrics::joined();
                        Some(Reserved::new(gw, &q, *place))
                    }
                    _ => None,
                };
                (s, reserved)
            }
            Err(_) => return refused_by_redis(),
        },
    };
    let disarm = |r: Option<Reserved>| {
        if let Some(r) = r {
            r.disarm();
        }
    };
    match state {
        PlaceState::Waiting {
            place,
            position,
            waiting,
            rate,
            previous_gateway,
        } => {
            let reserved = match reserved {
                // A pre-queue ticket resumed after the draw: its place has a new id in line.
                Some(r) if r.place() != Some(place) => {
                    r.disarm();
                    Reserved::new(gw, &q, place)
                }
                Some(r) => r,
                None => return Setup::TryLater,
            };
            let first = Update::Waiting(WaitingEvent {
                queue: q.clone(),
                position,
                waiting,
                eta_seconds: eta_seconds(position, rate),
                as_of_ms: now_ms(),
            });
            live(gw, &q, place, ticket, reserved, first, previous_gateway)
        }
        PlaceState::Scheduled {
            place,
            opens_at_ms,
            previous_gateway,
        } => {
            let Some(reserved) = reserved else {
                return Setup::TryLater;
            };
            let first = Update::Scheduled(ScheduledEvent::new(q.clone(), opens_at_ms));
            live(gw, &q, place, ticket, reserved, first, previous_gateway)
        }
        PlaceState::Admitted(rec) => {
            disarm(reserved);
            metrics::admission_delivered();
            let ticket = ticket.unwrap_or_default();
            Setup::Once(event_frame(
                "admitted",
                Some(&ticket),
                &admitted_event(&q, &rec),
            ))
        }
        PlaceState::AdmissionPending => {
            disarm(reserved);
            Setup::TryLater
        }
        PlaceState::QueueClosed(reason) => {
            disarm(reserved);
            Setup::Failed(closed_queue(&q, reason))
        }
        PlaceState::Gone => {
            disarm(reserved);
            Setup::Failed(place_gone())
        }
        PlaceState::SessionEnded => {
            disarm(reserved);
            let ended = Update::closed(&q, CloseReason::SessionEnded);
            Setup::Once(ended.frame(&ticket.unwrap_or_default()).unwrap_or_default())
        }
    }
}

/// Holds a browser whose place is reserved: its stream starts with `first`. The ticket is the
/// one the browser presented (a pre-queue ticket keeps naming its drawn place), or a new one.
fn live(
    gw: &Arc<Gateway>,
    q: &QueueId,
    place: PlaceId,
    ticket: Option<String>,
    reserved: Reserved,
    first: Update,
    previous_gateway: Option<u16>,
) -> Setup {
    let ticket = ticket.unwrap_or_else(|| Ticket::issue(gw.ticket_key(), q, place));
    let Some((attached, rx)) = reserved.attach(first) else {
        // A newer connection took the place over meanwhile.
        return Setup::TryLater;
    };
    if let Some(holder) = previous_gateway.filter(|h| *h != gw.index()) {
        let (gw, q) = (gw.clone(), q.clone());
        tokio::spawn(async move {
            gw.tell_gateway(holder, &q, place, CloseReason::ResumedElsewhere)
                .await;
        });
    }
    Setup::Live {
        ticket,
        holding: Holding {
            gw: gw.clone(),
            attached,
        },
        rx,
    }
}

/// A stream Redis could not set up: `retry:`, counted as refused.
fn refused_by_redis() -> Setup {
    metrics::refused(Refusal::Redis);
    Setup::TryLater
}

/// Resumes a place; an admission whose token is still being minted is awaited briefly.
async fn resume(
    gw: &Gateway,
    q: &QueueId,
    place: PlaceId,
    idx: u16,
) -> Result<PlaceState, StoreError> {
    for _ in 0..20 {
        let s = gw
            .store()
            .resume(q, place, idx, now_ms())
            .await
            .map_err(logged)?;
        if s != PlaceState::AdmissionPending {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(PlaceState::AdmissionPending)
}

/// Writes one chunk of a chunked body, after `prefix` (e.g. the response head) and before
/// `suffix` (e.g. the last chunk), in one write.
async fn chunk_with(
    sock: &mut TcpStream,
    prefix: &str,
    text: &str,
    suffix: &str,
) -> std::io::Result<()> {
    use std::fmt::Write as _;
    let mut framed = String::with_capacity(prefix.len() + text.len() + suffix.len() + 20);
    framed.push_str(prefix);
    if !text.is_empty() {
        // Writing to a String cannot fail.
        let _ = write!(framed, "{:x}\r\n", text.len());
        framed.push_str(text);
        framed.push_str("\r\n");
    }
    framed.push_str(suffix);
    match tokio::time::timeout(WRITE_TIMEOUT, sock.write_all(framed.as_bytes())).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
    }
}

async fn chunk(sock: &mut TcpStream, text: &str) -> std::io::Result<()> {
    chunk_with(sock, "", text, "").await
}

const LAST_CHUNK: &str = "0\r\n\r\n";

/// The response head of every stream.
pub(crate) const STREAM_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
    cache-control: no-cache\r\nx-accel-buffering: no\r\ntransfer-encoding: chunked\r\n\r\n";

/// Serves a set-up stream on `sock` (the head not yet written) until it ends. The body is
/// chunked; it ends after a terminal update, or when the browser goes away. `Ok(true)` when
/// the response ended completely and nothing else was read from the connection (it can serve
/// another request).
pub(crate) async fn pump(
    gw: &Arc<Gateway>,
    sock: &mut TcpStream,
    setup: Setup,
) -> std::io::Result<bool> {
    let retry = gw.config().retry_ms;
    let text = match setup {
        Setup::Live {
            ticket,
            holding,
            rx,
        } => return pump_live(gw, sock, ticket, holding, rx).await,
        Setup::Once(frame) => retry_frame(retry) + &frame,
        Setup::TryLater | Setup::Failed(_) => retry_frame(jittered(retry)),
    };
    // A whole response in one write: head, its only chunk, the last chunk.
    chunk_with(sock, STREAM_HEAD, &text, LAST_CHUNK)
        .await
        .map(|()| true)
}

/// [`pump`] for a held browser: events as the line moves, until a terminal one.
async fn pump_live(
    gw: &Arc<Gateway>,
    sock: &mut TcpStream,
    ticket: String,
    holding: Holding,
    mut rx: watch::Receiver<Update>,
) -> std::io::Result<bool> {
    let retry = gw.config().retry_ms;
    // The head goes out with the first chunk: one write (one TCP segment) per join.
    let mut keepalive = gw.keepalive().subscribe(holding.attached.place.0);
    let first = rx.borrow_and_update().clone();
    let mut text = retry_frame(retry);
    text.push_str(&first.frame(&ticket).unwrap_or_default());
    let mut done = first.is_terminal();
    chunk_with(sock, STREAM_HEAD, &text, if done { LAST_CHUNK } else { "" }).await?;
    if let Update::Admitted(_) = &first {
        metrics::admission_delivered();
    }
    let mut last_write = tokio::time::Instant::now();
    // Bytes a client sent mid-stream are not a request this server can answer afterwards.
    let mut clean = true;
    while !done {
        tokio::select! {
            changed = rx.changed() => {
                let u = match changed {
                    Ok(()) => rx.borrow_and_update().clone(),
                    Err(_) => Update::superseded(),
                };
                done = u.is_terminal();
                let end = if done { LAST_CHUNK } else { "" };
                let f = u.frame(&ticket).unwrap_or_default();
                chunk_with(sock, "", &f, end).await?;
                last_write = tokio::time::Instant::now();
                if let Update::Admitted(_) = &u {
                    metrics::admission_delivered();
                }
                if let Update::Notice { notice, .. } = &u {
                    gw.hub().notice_shown(&holding.attached, notice);
                }
            }
            _ = keepalive.changed() => {
                let tick = *keepalive.borrow_and_update();
                if gw.keepalive().due(last_write, tick) {
                    chunk(sock, KEEPALIVE_FRAME).await?;
                    last_write = tokio::time::Instant::now();
                }
            }
            readable = sock.readable() => {
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
