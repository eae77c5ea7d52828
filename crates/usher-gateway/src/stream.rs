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
use tracing::Instrument;
use usher_core::challenge::ChallengeEvent;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{eta_seconds, CloseReason, ScheduledEvent, WaitingEvent};
use usher_core::store::{PlaceState, StoreError};
use usher_core::ticket::Ticket;
use usher_core::time::now_ms;
use usher_http::ApiError;
use usher_runtime::SpanLink;

use crate::challenge::Gate;
use crate::client::IpKey;
use crate::errors::{closed_queue, logged, place_gone};
use crate::frames::{event_frame, jittered, retry_frame, KEEPALIVE_FRAME};
use crate::gateway::Gateway;
use crate::hub::{Attached, Reservation};
use crate::joins::JoinError;
use crate::limits::{PlaceHold, StreamSlot};
use crate::metrics::{self, Refusal};
use crate::update::{admitted_event, Update};

/// How many times `retry:` a browser waits when Redis is out of memory.
const OOM_BACKOFF: u64 = 10;

/// How many times `retry:` a client that does not understand `event: challenge` waits before
/// it reconnects without a solution (the page closes its stream and solves first).
const CHALLENGE_BACKOFF: u64 = 10;

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
        /// The browser's `join` span, when it joined here with traces on: its delivery
        /// links to it.
        joined: Option<SpanLink>,
    },
    /// One event, then the end (an admission re-sent on resume).
    Once(String),
    /// `retry:` with jitter, then the end: try again shortly, maybe elsewhere.
    TryLater,
    /// Like `TryLater`, [`OOM_BACKOFF`] times later: Redis is out of memory, and a retry
    /// helps only once memory is freed (a queue closed, sessions ended).
    TryMuchLater,
    /// A permanent error status.
    Failed(ApiError),
    /// `event: challenge` (a fresh puzzle, and why the join took no place), then the end.
    Challenge(ChallengeEvent),
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
        self.gw.hub().attach(r, first)
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
    /// The place, counted for the client's address while the stream lasts (and a while after).
    place: Option<PlaceHold>,
    /// The stream, counted against the client address's cap.
    _slot: StreamSlot,
}

impl Holding {
    /// `u` ended the place for good (admitted, or closed for a reason other than a newer
    /// connection taking it over): it stops counting for the client's address.
    fn ended(&mut self, u: &Update) {
        let over = match u {
            Update::Admitted(_) => true,
            Update::Closed(c) => c.reason != CloseReason::ResumedElsewhere,
            _ => false,
        };
        if over {
            if let Some(p) = self.place.take() {
                p.finished();
            }
        }
    }
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
    pow: Option<String>,
    client: IpKey,
) -> Setup {
    if gw.shutting_down() {
        metrics::refused(Refusal::Draining);
        return Setup::TryLater;
    }
    if gw.hub().connections() >= gw.config().max_connections {
        metrics::refused(Refusal::Cap);
        return Setup::TryLater;
    }
    let limits = gw.ip_limits();
    // The per-IP limits, before Redis is asked anything: a stream slot, then a join drawn
    // from the bucket (or a resume of a place the address may hold).
    let checked = limits.open_stream(client).and_then(|slot| {
        match place {
            Some(p) => limits.resume(client, &q, p),
            None => limits.join(client),
        }
        .map(|()| slot)
    });
    match checked {
        Ok(slot) => setup(gw, q, place, ticket, pow, client, slot).await,
        Err(exceeded) => {
            metrics::refused(exceeded.refusal());
            tracing::debug!(%client, ?exceeded, "stream refused by a per-IP limit");
            Setup::TryLater
        }
    }
}

async fn setup(
    gw: &Arc<Gateway>,
    q: QueueId,
    place: Option<PlaceId>,
    ticket: Option<String>,
    pow: Option<String>,
    client: IpKey,
    slot: StreamSlot,
) -> Setup {
    let idx = gw.index();
    let mut joined = None;
    // A resumed place that turns out to be over no longer counts for the address.
    let forget = |p: Option<PlaceId>| {
        if let Some(p) = p {
            gw.ip_limits().forget(client, &q, p);
        }
    };
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
                Err(e) => return refused_by_redis(&e),
            }
        }
        None => {
            // A proof-of-work queue: the solution is checked before Redis is asked anything.
            let challenges = gw.challenges();
            let setting = match challenges.setting(gw.store(), &q).await {
                Ok(s) => s,
                Err(e) => return refused_by_redis(&logged(e)),
            };
            let proof = match challenges.gate(&q, setting, pow.as_deref()) {
                Gate::Pass(proof) => proof,
                Gate::Refuse(puzzle) => return challenged(puzzle),
            };
            // The join's span (its queue; never its ticket, which is issued below).
            let span = tracing::info_span!("join", queue = %q);
            joined = SpanLink::of(&span);
            match gw.join(&q, proof).instrument(span).await {
                Ok(s) => {
                    let reserved = match &s {
                        PlaceState::Waiting { place, .. }
                        | PlaceState::Scheduled { place, .. }
                        | PlaceState::AdmittedNow { place } => {
                            metrics::joined();
                            Some(Reserved::new(gw, &q, *place))
                        }
                        _ => None,
                    };
                    (s, reserved)
                }
                Err(JoinError::Store(e)) => return refused_by_redis(&e),
                Err(JoinError::Abandoned) => {
                    metrics::refused(Refusal::Redis);
                    return Setup::TryLater;
                }
                Err(JoinError::Refused(reason)) => {
                    return match challenges.refused(gw.store(), &q, reason).await {
                        Ok(puzzle) => challenged(puzzle),
                        Err(e) => refused_by_redis(&logged(e)),
                    };
                }
            }
        }
    };
    let disarm = |r: Option<Reserved>| {
        if let Some(r) = r {
            r.disarm();
        }
    };
    // Holds a browser whose place is reserved: its stream starts with `first`. The ticket is
    // the one the browser presented (a pre-queue ticket keeps naming its pre-queue place,
    // which the draw maps to its place in line), or a new one for a join; the client's address
    // is charged for the ticket's place, as the per-IP check before Redis was.
    let counted = place;
    let live = |ticket: Option<String>,
                reserved: Reserved,
                place: PlaceId,
                first: Update,
                previous_gateway: Option<u16>| {
        let ticket = ticket.unwrap_or_else(|| Ticket::issue(gw.ticket_key(), &q, place));
        let Some((attached, rx)) = reserved.attach(first) else {
            // A newer connection took the place over meanwhile.
            return Setup::TryLater;
        };
        if let Some(holder) = previous_gateway.filter(|h| *h != idx) {
            let (gw, q) = (gw.clone(), q.clone());
            tokio::spawn(async move {
                gw.tell_gateway(holder, &q, place, CloseReason::ResumedElsewhere)
                    .await;
            });
        }
        let hold = gw.ip_limits().hold(client, &q, counted.unwrap_or(place));
        Setup::Live {
            ticket,
            holding: Holding {
                gw: gw.clone(),
                attached,
                place: Some(hold),
                _slot: slot,
            },
            rx,
            joined,
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
            live(ticket, reserved, place, first, previous_gateway)
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
            live(ticket, reserved, place, first, previous_gateway)
        }
        PlaceState::AdmittedNow { place } => {
            // Admitted by the join (passthrough): the stream opens with nothing to show, and
            // its first event is the `admitted` the dispatcher sends once woken. Counted like
            // a waiting place until its `admitted` is written.
            let Some(reserved) = reserved else {
                return Setup::TryLater;
            };
            live(ticket, reserved, place, Update::Admitting, None)
        }
        PlaceState::Admitted(rec) => {
            disarm(reserved);
            forget(place);
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
            forget(place);
            Setup::Failed(closed_queue(&q, reason))
        }
        PlaceState::Gone => {
            disarm(reserved);
            forget(place);
            Setup::Failed(place_gone())
        }
        PlaceState::SessionEnded => {
            disarm(reserved);
            forget(place);
            let ended = Update::closed(&q, CloseReason::SessionEnded);
            Setup::Once(ended.frame(&ticket.unwrap_or_default()).unwrap_or_default())
        }
    }
}

/// A join refused for its proof of work: a fresh puzzle, counted as refused.
fn challenged(puzzle: ChallengeEvent) -> Setup {
    metrics::refused(Refusal::Challenge);
    tracing::debug!(queue = %puzzle.queue, reason = ?puzzle.reason, "join refused: proof of work");
    Setup::Challenge(puzzle)
}

/// A stream Redis could not set up: `retry:`, counted as refused; a longer one when Redis is
/// out of memory.
fn refused_by_redis(e: &StoreError) -> Setup {
    metrics::refused(Refusal::Redis);
    if e.is_out_of_memory() {
        Setup::TryMuchLater
    } else {
        Setup::TryLater
    }
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
    use std::fmt::Write as _;
    let mut framed = String::with_capacity(prefix.len() + text.len() + suffix.len() + 20);
    framed.push_str(prefix);
    match framing {
        Framing::Chunked if !text.is_empty() => {
            // Writing to a String cannot fail.
            let _ = write!(framed, "{:x}\r\n", text.len());
            framed.push_str(text);
            framed.push_str("\r\n");
        }
        Framing::Chunked => {}
        Framing::UntilClose => framed.push_str(text),
    }
    framed.push_str(suffix);
    match tokio::time::timeout(WRITE_TIMEOUT, sock.write_all(framed.as_bytes())).await {
        Ok(r) => r,
        Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
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
    let mut keepalive = gw.keepalive().subscribe(holding.attached.place.0);
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
            _ = keepalive.changed() => {
                let tick = *keepalive.borrow_and_update();
                if gw.keepalive().due(last_write, tick) {
                    chunk_with(sock, framing, "", KEEPALIVE_FRAME, "").await?;
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
