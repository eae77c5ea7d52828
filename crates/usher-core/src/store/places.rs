//! A browser's place in line once taken, as the gateways handle it: resume, status and leave
//! (joins are `joins`, a dropped connection's grace period `away`).

use redis::Value;

use super::binding::Asker;
use super::decode::{array, rate_of, status, text, u};
use super::dispatch::records::TokenRecord;
use super::gateways::GWS_TTL_MS;
use super::lanes::lane_in;
use super::reply::{LeaveStatus, PlaceStatus};
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;
use crate::lanes::LaneName;
use crate::messages::CloseReason;

/// Where a place stands when a browser joins, resumes or polls.
#[derive(Debug, Clone, PartialEq)]
pub enum PlaceState {
    Waiting {
        place: PlaceId,
        position: u64,
        waiting: u64,
        rate: f64,
        /// The gateway that held the place before this call, when another one did (resume only).
        previous_gateway: Option<u16>,
        /// The place's lane when it is not in the queue's default lane (crate::lanes):
        /// `position` and `waiting` count that lane only. `None`: the default lane (or a queue
        /// without lanes).
        lane: Option<LaneName>,
    },
    Admitted(TokenRecord),
    /// Admitted a moment ago; the token is being minted. Ask again shortly.
    AdmissionPending,
    /// The queue is closed or unknown; an unknown queue's reason is `queue_closed`.
    QueueClosed(CloseReason),
    /// The place no longer exists (left, expired, or the queue was emptied).
    Gone,
    /// The place was admitted and its session ended (released or expired): its token is
    /// never shown again.
    SessionEnded,
    /// A binding queue's place that is not the requester's ([`Asker::Ticket`]): nothing was
    /// done, and nothing of the place is told.
    WrongKey,
    /// No place: the scheduled sale's pre-queue holds its `max_entrants` already.
    PreQueueFull {
        max_entrants: u64,
    },
    /// In a scheduled sale's pre-queue: the draw at `opens_at_ms` puts it in line.
    Scheduled {
        place: PlaceId,
        opens_at_ms: u64,
        /// The gateway that held the place before this call, when another one did (resume only).
        previous_gateway: Option<u16>,
    },
    /// Admitted by the join itself (passthrough): nobody was waiting. The dispatcher mints
    /// its token and sends `admitted` to the gateway that holds it, once woken
    /// ([`Store::wake`]).
    AdmittedNow {
        place: PlaceId,
    },
}
/// What a leave removed.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaveOutcome {
    /// A waiting (or pre-queue) place was removed; `gateway` held it. `place` is its id in
    /// the line (a pre-queue ticket's drawn place after a scheduled sale's draw).
    Left {
        gateway: Option<u16>,
        place: PlaceId,
    },
    /// An admitted session was given up.
    Released,
    NotFound,
    /// Nothing: a binding queue's place that is not the requester's ([`Asker::Ticket`]).
    WrongKey,
}
impl Store {
    /// Resumes `place` for a browser now held by gateway `gw` (moving the place's routing to
    /// it when another gateway held it, and ending its grace period).
    pub async fn resume(
        &self,
        q: &QueueId,
        place: PlaceId,
        gw: u16,
        now_ms: u64,
    ) -> Result<PlaceState> {
        self.resume_bound(q, place, gw, now_ms, Asker::Gateway)
            .await
    }

    /// [`Store::resume`] for a browser's request (`asker`), on a binding queue: refused
    /// ([`PlaceState::WrongKey`]) unless it proved the place's key. The place's key as the
    /// gateway knows it (`known`: from `bound`, or from the stream it held the place with;
    /// never merely the key of the request's proof) is given to a live place without one, and
    /// a place Redis lost is put back only with one (without, it is gone: `lua/resume.lua`).
    pub async fn resume_bound(
        &self,
        q: &QueueId,
        place: PlaceId,
        gw: u16,
        now_ms: u64,
        asker: Asker<'_>,
    ) -> Result<PlaceState> {
        let (asked, proven, known) = asker.args();
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .resume
            .key(&k.meta)
            .key(&k.seq)
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.gws)
            .key(&k.away)
            .key(&k.ended)
            .key(&k.pre)
            .key(&k.drawn)
            .key(&k.pre_away)
            .key(&k.parked)
            .key(&k.bound)
            .lane_keys(&k)
            .arg(place.0)
            .arg(gw)
            .arg(now_ms)
            .arg(GWS_TTL_MS)
            .arg(known)
            .arg(asked)
            .arg(proven)
            .invoke_async(&mut self.c())
            .await?;
        Self::place_state(place, array(v)?, true)
    }

    /// The state of `place` without changing anything (unchecked: [`Asker::Gateway`]).
    pub async fn status(&self, q: &QueueId, place: PlaceId, now_ms: u64) -> Result<PlaceState> {
        self.status_as(q, place, now_ms, Asker::Gateway).await
    }

    /// [`Store::status`] for `asker`: a browser's request on a binding queue is answered
    /// [`PlaceState::WrongKey`] unless it proved the place's key (checked in the same call).
    pub async fn status_as(
        &self,
        q: &QueueId,
        place: PlaceId,
        now_ms: u64,
        asker: Asker<'_>,
    ) -> Result<PlaceState> {
        let (asked, proven, known) = asker.args();
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .status
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.ended)
            .key(&k.pre)
            .key(&k.drawn)
            .key(&k.parked)
            .key(&k.bound)
            .lane_keys(&k)
            .arg(place.0)
            .arg(now_ms)
            .arg(asked)
            .arg(proven)
            .arg(known)
            .invoke_async(&mut self.c())
            .await?;
        Self::place_state(place, array(v)?, false)
    }

    /// Decodes a `resume` or `status` reply; only `resume`'s says which gateway held the
    /// place before.
    fn place_state(
        place: PlaceId,
        a: Vec<Value>,
        with_previous_gateway: bool,
    ) -> Result<PlaceState> {
        let bad = || protocol(format!("place reply {a:?}"));
        match status(&a, PlaceStatus::from_code) {
            Some(PlaceStatus::QueueClosed) => Ok(PlaceState::QueueClosed(
                a.get(1)
                    .and_then(text)
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(CloseReason::QueueClosed),
            )),
            Some(PlaceStatus::Gone) => Ok(PlaceState::Gone),
            Some(PlaceStatus::WrongKey) => Ok(PlaceState::WrongKey),
            Some(PlaceStatus::SessionEnded) => Ok(PlaceState::SessionEnded),
            Some(PlaceStatus::AdmissionPending) => Ok(PlaceState::AdmissionPending),
            Some(PlaceStatus::Scheduled) => Ok(PlaceState::Scheduled {
                place,
                opens_at_ms: a.get(1).map(u).transpose()?.unwrap_or(0),
                previous_gateway: if with_previous_gateway {
                    gateway_index(a.get(2))
                } else {
                    None
                },
            }),
            Some(PlaceStatus::Admitted) => a
                .get(1)
                .and_then(text)
                .and_then(|s| TokenRecord::parse(&s))
                .map(PlaceState::Admitted)
                .ok_or_else(bad),
            Some(PlaceStatus::Waiting) => {
                let (rate_at, before) = if with_previous_gateway {
                    (4, gateway_index(a.get(3)))
                } else {
                    (3, None)
                };
                if a.len() < rate_at + 2 {
                    return Err(bad());
                }
                // The place's id in the line: a pre-queue ticket's drawn place (resume only).
                let place = match a.get(rate_at + 2) {
                    Some(v) if with_previous_gateway => PlaceId(u(v)?),
                    _ => place,
                };
                // The lane: after the rates (status) or after the place id (resume).
                let lane = lane_in(a.get(rate_at + 2 + usize::from(with_previous_gateway)));
                Ok(PlaceState::Waiting {
                    place,
                    position: u(&a[1])?,
                    waiting: u(&a[2])?,
                    rate: rate_of(&a[rate_at], &a[rate_at + 1]),
                    previous_gateway: before,
                    lane,
                })
            }
            // Only a join answers this.
            Some(PlaceStatus::Challenged | PlaceStatus::PreQueueFull | PlaceStatus::NoSuchLane)
            | None => Err(bad()),
        }
    }

    /// The browser leaves the line (or gives up its admitted session, which then ends: its
    /// slot frees and a resume hears `session_ended`).
    /// Unchecked ([`Asker::Gateway`]): see [`Store::leave_as`] for a browser's request.
    pub async fn leave(&self, q: &QueueId, place: PlaceId) -> Result<LeaveOutcome> {
        self.leave_as(q, place, Asker::Gateway).await
    }

    /// [`Store::leave`] at `now_ms` of a given clock (a rehearsal's virtual one): a released
    /// session is remembered in `ended` from then, not from the wall clock's now.
    pub async fn leave_at(&self, q: &QueueId, place: PlaceId, now_ms: u64) -> Result<LeaveOutcome> {
        self.leave_as_at(q, place, Asker::Gateway, now_ms).await
    }

    /// [`Store::leave`] for `asker`: a browser's request on a binding queue leaves nothing
    /// ([`LeaveOutcome::WrongKey`]) unless it proved the place's key (checked in the same
    /// call).
    pub async fn leave_as(
        &self,
        q: &QueueId,
        place: PlaceId,
        asker: Asker<'_>,
    ) -> Result<LeaveOutcome> {
        self.leave_as_at(q, place, asker, crate::time::now_ms())
            .await
    }

    /// [`Store::leave_as`] at `now_ms` (see [`Store::leave_at`]).
    pub async fn leave_as_at(
        &self,
        q: &QueueId,
        place: PlaceId,
        asker: Asker<'_>,
        now_ms: u64,
    ) -> Result<LeaveOutcome> {
        let (asked, proven, known) = asker.args();
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .leave
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.away)
            .key(&k.meta)
            .key(&k.ended)
            .key(&k.pre)
            .key(&k.drawn)
            .key(&k.parked)
            .key(&k.bound)
            .lane_keys(&k)
            .arg(place.0)
            .arg(now_ms)
            .arg(asked)
            .arg(proven)
            .arg(known)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match status(&a, LeaveStatus::from_code) {
            Some(LeaveStatus::Left) => Ok(LeaveOutcome::Left {
                gateway: gateway_index(a.get(1)),
                place: a.get(2).map(u).transpose()?.map_or(place, PlaceId),
            }),
            Some(LeaveStatus::Released) => Ok(LeaveOutcome::Released),
            Some(LeaveStatus::NotFound) => Ok(LeaveOutcome::NotFound),
            Some(LeaveStatus::WrongKey) => Ok(LeaveOutcome::WrongKey),
            None => Err(protocol(format!("leave reply {a:?}"))),
        }
    }
}

/// A gateway index a script returned as decimal text (`None` for false or anything else).
fn gateway_index(v: Option<&Value>) -> Option<u16> {
    v.and_then(text).and_then(|t| t.parse().ok())
}
