//! The SSE stream: setting a browser's connection up (join or resume) and pumping its events.
//!
//! A held connection costs one small task: the socket, a [`crate::latest`] receiver (one pending update
//! at most, so a slow browser cannot grow memory), and a receiver of the gateway-wide keepalive
//! timer (one timer for all connections, not one per connection: [`crate::keepalive`]).
//! Buffers exist only while an event is being written.
//!
//! This module sets a connection up (its `Setup`); [`pump`] writes it until it ends.

use std::sync::Arc;
use std::time::Duration;
use usher_core::record::{JoinNote, NetworkHash};

use crate::latest;
use crate::ticket::Ticket;
use tracing::Instrument;
use usher_core::binding::{ProofRefusal, ProofRequiredEvent, Thumbprint};
use usher_core::challenge::ChallengeEvent;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::invitation::{InvitationRefusal, InvitationRefusedEvent};
use usher_core::lanes::LaneName;
use usher_core::messages::{
    eta_seconds, CloseReason, LineStatus, PreQueueFullEvent, ScheduledEvent, WaitingEvent,
};
use usher_core::store::{Asker, PlaceState, QueueConfig, StoreError};
use usher_core::time::now_ms;
use usher_http::ApiError;
use usher_runtime::SpanLink;

use crate::binding::{asker, prove, Proven, Route, Unproven};
use crate::client::IpKey;
use crate::errors::{closed_queue, logged, place_gone};
use crate::frames::{event_frame, jittered, retry_frame};
use crate::hub::{Attached, Reservation};
use crate::invitation;
use crate::joins::{Join, JoinError};
use crate::limits::{PlaceHold, StreamSlot};
use crate::metrics::{self, Refusal};
use crate::pow_gate::Gate;
use crate::shared::Gateway;
use crate::update::{admitted_event, Update};

/// How many times `retry:` a browser waits when Redis is out of memory.
const OOM_BACKOFF: u64 = 10;

/// How many times `retry:` a client that does not understand `event: challenge` waits before
/// it reconnects without a solution (the page closes its stream and solves first).
const CHALLENGE_BACKOFF: u64 = 10;

/// What to answer a stream request with.
pub(crate) enum Setup {
    /// Hold the browser: events follow as the line moves.
    Live {
        ticket: String,
        holding: Holding,
        rx: latest::Receiver<Update>,
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
    /// `event: proof_required` (a binding queue's request without a good proof of the
    /// browser key: why), then the end. A join took no place; a resume changed nothing.
    ProofRequired(ProofRequiredEvent),
    /// `event: invitation_refused` (the join's invitation, or its absence where one is
    /// required: why), then the end. No place was taken.
    InvitationRefused(InvitationRefusedEvent),
}

/// A place reserved for a connection being set up. Dropped before [`Reserved::attach`] (the
/// request was cancelled, or failed on Redis), it marks the place away, so the browser can
/// come back within the grace period and a vanished one costs no admission.
struct Reserved {
    gw: Arc<Gateway>,
    r: Option<Reservation>,
}

impl Reserved {
    /// `key`: the browser key the place was proven with (a binding queue's).
    fn new(gw: &Arc<Gateway>, q: &QueueId, place: PlaceId, key: Option<&Thumbprint>) -> Self {
        Self {
            gw: gw.clone(),
            r: Some(gw.hub().reserve(q, place, key)),
        }
    }

    /// Gives the reservation up without touching Redis (the place is admitted or gone).
    fn disarm(mut self) {
        if let Some(r) = self.r.take() {
            self.gw.hub().unreserve(&r);
        }
    }

    fn attach(mut self, first: Update) -> Option<(Attached, latest::Receiver<Update>)> {
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

/// What a stream request brings besides its ticket.
pub(crate) struct Asks {
    /// A proof-of-work solution (a join in a proof-of-work queue).
    pub(crate) pow: Option<String>,
    /// A proof of possession of the browser's key (a binding queue's).
    pub(crate) proof: Option<String>,
    /// A one-use join code (`crate::invitation`): the join is its invited account's, in the
    /// invitation's lane.
    pub(crate) join: Option<String>,
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
    asks: Asks,
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
    // from the bucket (or a resume of a place the address may hold). The place counts for
    // the address from here: `pending` lives until `setup` is over, by which time the stream
    // holds the place (or took none).
    let checked = limits.open_stream(client).and_then(|slot| {
        match place {
            Some(p) => limits.resume(client, &q, p),
            None => limits.join(client),
        }
        .map(|pending| (slot, pending))
    });
    match checked {
        Ok((slot, pending)) => {
            let set_up = setup(gw, q, place, ticket, asks, client, slot).await;
            drop(pending);
            set_up
        }
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
    Asks { pow, proof, join }: Asks,
    client: IpKey,
    slot: StreamSlot,
) -> Setup {
    let idx = gw.index();
    // A queue that binds places to the browser's key: a join records the key it proves, a
    // resume must prove the key its place joined with (before anything is reserved).
    let resumer = place.is_some().then_some(client);
    let proven = match prove(gw, &q, place, proof.as_deref(), Route::Stream, resumer).await {
        Ok(proven) => proven,
        Err(Unproven::Refused(reason)) => {
            return Setup::ProofRequired(ProofRequiredEvent { queue: q, reason })
        }
        // The place spent its proofs here (counted where refused): like a cap, try later.
        Err(Unproven::Throttled(_)) => return Setup::TryLater,
        Err(Unproven::Store(e)) => return refused_by_redis(&logged(e)),
    };
    // >>> invitations (crate::invitation): a join code makes the join its account's; an
    // account holding a live place takes it over (resumed for this browser, with a new
    // ticket), bound to this browser's key on a binding queue.
    let key = proven.as_ref().map(|p| &p.key);
    let invited = match invitation::admit(gw, &q, place.is_some(), join.as_deref(), key).await {
        Ok(invited) => invited,
        Err(invitation::Stop::Refused(reason)) => {
            metrics::refused(Refusal::Invitation);
            return Setup::InvitationRefused(InvitationRefusedEvent { queue: q, reason });
        }
        Err(invitation::Stop::Store(e)) => return refused_by_redis(&logged(e)),
    };
    let takeover = invited.as_ref().and_then(|i| i.takeover);
    let place = place.or(takeover);
    let ticket = ticket.or_else(|| takeover.map(|p| Ticket::issue(gw.ticket_key(), &q, p)));
    let proven = match (takeover, proven) {
        // The place was bound to the key this join proved (`lua/account.lua`).
        (Some(_), Some(p)) => Some(Proven {
            place_key: Some(p.key.clone()),
            key: p.key,
        }),
        (_, proven) => proven,
    };
    // The lane a join goes to: the invitation's `lane` claim (`None`: the queue's default
    // lane). Its characters were checked with the invitation (`invitation::lane_ok`, the same
    // rule as `LaneName`); a takeover keeps the lane its place joined in.
    let lane = match invited
        .as_ref()
        .and_then(|i| i.lane.clone())
        .map(LaneName::new)
    {
        None => None,
        Some(Ok(lane)) => Some(lane),
        Some(Err(_)) => {
            metrics::refused(Refusal::Invitation);
            let reason = InvitationRefusal::Invalid;
            return Setup::InvitationRefused(InvitationRefusedEvent { queue: q, reason });
        }
    };
    // <<< invitations
    let mut joined = None;
    // A resumed place that turns out to be over no longer counts for the address.
    let forget = |p: Option<PlaceId>| {
        if let Some(p) = p {
            gw.ip_limits().forget(client, &q, p);
        }
    };
    // The queue's setting (cached a second): a join's challenge, and the grace period for
    // which a place keeps counting for its address once its stream ends.
    let challenges = gw.challenges();
    let setting = match challenges.setting(gw.store(), &q).await {
        Ok(s) => s,
        Err(e) => return refused_by_redis(&logged(e)),
    };
    let grace = Duration::from_secs(
        setting
            .as_ref()
            .map_or(QueueConfig::default().grace_seconds, |s| s.grace_seconds),
    );
    // The resumed place's own key (a binding queue's), kept with the stream: after a Redis
    // data loss the place is put back with it.
    let place_key = proven.as_ref().and_then(|p| p.place_key.clone());
    let (state, reserved) = match place {
        Some(place) => {
            // Reserve first: from now on an older connection's disconnect cannot mark the
            // place away while it is being resumed.
            let reserved = Reserved::new(gw, &q, place, place_key.as_ref());
            match resume(gw, &q, place, idx, asker(proven.as_ref())).await {
                Ok(s) => {
                    metrics::resumed();
                    (s, Some(reserved))
                }
                Err(e) => return refused_by_redis(&e),
            }
        }
        None => {
            // A proof-of-work queue: the solution is checked before Redis is asked anything.
            let proof = match challenges.gate(&q, setting.as_ref(), pow.as_deref()) {
                Gate::Pass(proof) => proof,
                Gate::Refuse(puzzle) => return challenged(puzzle),
            };
            // The join's span (its queue; never its ticket, which is issued below), made only
            // when traces are exported: nothing else reads it, and nothing inside the join
            // logs (its Redis call is made by the queue's batcher task).
            let span = if usher_runtime::traces::exporting() {
                tracing::info_span!("join", queue = %q)
            } else {
                tracing::Span::none()
            };
            joined = SpanLink::of(&span);
            let key = proven.map(|p| p.key);
            // A recording queue keeps the join's network, hashed with the ticket key (which
            // Redis never holds: docs/security.md, "The fairness record"), per queue. A
            // development key is stored in Redis beside the record, and with it anyone who
            // reads Redis could reverse every /24 by trying all 2^24: no network then.
            let note = match &setting {
                Some(s) if s.record => JoinNote {
                    network: gw.dev_ticket_key().is_none().then(|| {
                        NetworkHash::of(gw.ticket_key().as_bytes(), &q, client.network_address())
                    }),
                    issue_to_join_ms: proof.as_ref().map(|p| challenges.issue_to_join_ms(p)),
                },
                _ => JoinNote::default(),
            };
            let join = Join {
                pow: proof,
                key: key.clone(),
                lane,
                note,
            };
            match gw.join(&q, join).instrument(span).await {
                Ok(s) => {
                    let reserved = match &s {
                        PlaceState::Waiting { place, .. }
                        | PlaceState::Scheduled { place, .. }
                        | PlaceState::AdmittedNow { place } => {
                            metrics::joined();
                            Some(Reserved::new(gw, &q, *place, key.as_ref()))
                        }
                        _ => None,
                    };
                    (s, reserved)
                }
                Err(JoinError::Store(e)) => {
                    if let StoreError::NoSuchLane(lane) = &*e {
                        return Setup::Failed(crate::lanes::no_such_lane(lane));
                    }
                    return refused_by_redis(&e);
                }
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
    // >>> invitations: the account's place ended between its look (`lua/account.lua`) and the
    // resume, a race of milliseconds: the page posts its invitation again (`join_code`), and
    // that join finds no place of the account and takes a new one.
    if takeover.is_some() && matches!(state, PlaceState::Gone | PlaceState::SessionEnded) {
        if let Some(r) = reserved {
            r.disarm();
        }
        let reason = usher_core::invitation::InvitationRefusal::JoinCode;
        return Setup::InvitationRefused(InvitationRefusedEvent { queue: q, reason });
    }
    // The account's one place is the one it took over or took now.
    if let Some(i) = &invited {
        let taken = match &state {
            PlaceState::Waiting { place, .. }
            | PlaceState::Scheduled { place, .. }
            | PlaceState::AdmittedNow { place } => Some(*place),
            _ => None,
        };
        // A taken-over place stays recorded by its id as recorded (a pre-queue id after
        // the draw too), which the state's id may not be.
        if let Some(p) = takeover.or(taken) {
            invitation::record(gw, &q, &i.account, p).await;
        }
    }
    // <<< invitations
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
        let entrant = matches!(first, Update::Scheduled(_));
        let Some((attached, rx)) = reserved.attach(first) else {
            // A newer connection took the place over meanwhile.
            return Setup::TryLater;
        };
        // Another gateway said it took the place over while this one was being set up: which
        // resume came last is known now (`inbox::taken_over`).
        if gw.hub().take_takeover_check(&attached) {
            tokio::spawn(crate::inbox::taken_over(gw.clone(), q.clone(), place));
        }
        if let Some(holder) = previous_gateway.filter(|h| *h != idx) {
            let (gw, q) = (gw.clone(), q.clone());
            tokio::spawn(async move {
                gw.tell_gateway(holder, &q, place, CloseReason::ResumedElsewhere)
                    .await;
            });
        }
        // A pre-queue entrant counts for the address until the draw, not only while its
        // stream lasts: hanging up cannot make room for more entrants.
        let counted = counted.unwrap_or(place);
        let hold = if entrant {
            gw.ip_limits().hold_entrant(client, &q, counted, grace)
        } else {
            gw.ip_limits().hold(client, &q, counted, grace)
        };
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
            lane,
        } => {
            let reserved = match reserved {
                // A pre-queue ticket resumed after the draw: its place has a new id in line.
                Some(r) if r.place() != Some(place) => {
                    r.disarm();
                    Reserved::new(gw, &q, place, place_key.as_ref())
                }
                Some(r) => r,
                None => return Setup::TryLater,
            };
            let ev = WaitingEvent {
                queue: q.clone(),
                position,
                waiting,
                eta_seconds: eta_seconds(position, rate),
                as_of_ms: now_ms(),
                // The inventory comes with the line's next `state` (one tick at most).
                inventory: None,
                lane,
            };
            // A stream that opens while the queue is in maintenance hears `status` before its
            // first `waiting` (a browser reconnecting may have missed the push; the page takes
            // a first `waiting` without it as "not in maintenance"). The setting is cached a
            // second at most.
            let first = match setting.as_ref().and_then(|s| s.maintenance.as_deref()) {
                Some(text) => Update::Notice {
                    notice: Update::status_frame(
                        &q,
                        LineStatus::Maintenance,
                        Some(text.to_owned()),
                    ),
                    waiting: ev,
                },
                None => Update::Waiting(ev),
            };
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
        PlaceState::PreQueueFull { max_entrants } => {
            // No place was taken. The page closes its stream on this event; a client that
            // does not know it tries again much later (the last `retry:` counts).
            disarm(reserved);
            let ev = PreQueueFullEvent {
                queue: q.clone(),
                max_entrants,
            };
            let retry = gw.config().retry_ms * CHALLENGE_BACKOFF;
            Setup::Once(retry_frame(jittered(retry)) + &event_frame("pre_queue_full", None, &ev))
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
        // The resume script's own key check (after a data loss or a restore the gateway's may
        // be stale): refused as the gateway refuses a wrong key.
        PlaceState::WrongKey => {
            disarm(reserved);
            forget(place);
            metrics::refused(Refusal::Proof);
            Setup::ProofRequired(ProofRequiredEvent {
                queue: q,
                reason: ProofRefusal::WrongKey,
            })
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

/// Resumes a place for a browser's request (`asker`: what it proved, and the place's own
/// key as the gateway knows it, a binding queue's); an admission whose token is still being
/// minted is awaited briefly.
async fn resume(
    gw: &Gateway,
    q: &QueueId,
    place: PlaceId,
    idx: u16,
    asker: Asker<'_>,
) -> Result<PlaceState, StoreError> {
    for _ in 0..20 {
        let s = gw
            .store()
            .resume_bound(q, place, idx, now_ms(), asker)
            .await
            .map_err(logged)?;
        if s != PlaceState::AdmissionPending {
            return Ok(s);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(PlaceState::AdmissionPending)
}

mod pump;

pub(crate) use pump::{pump, Framing};
