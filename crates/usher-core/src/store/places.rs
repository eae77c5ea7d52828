//! A browser's place in line, as the gateways handle it: join, resume, status, leave, and
//! away (its connection dropped; the place is kept for the queue's grace period).

use redis::Value;

use super::binding::Asker;
use super::decode::{array, rate_of, status, text, u};
use super::dispatch::records::TokenRecord;
use super::gateways::GWS_TTL_MS;
use super::lanes::{lane_in, no_such_lane};
use super::reply::{LeaveStatus, PlaceStatus, PowVerdict};
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::binding::Thumbprint;
use crate::challenge::{Proof, Refusal};
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

/// What one join call took: see [`Store::join_many`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Joined {
    /// The queue is closed or unknown: no place was taken.
    QueueClosed,
    /// Places `last - count + 1 ..= last`, one per browser in the order of the batch; the
    /// first `admitted_now` were admitted at once (passthrough), and the last is at position
    /// `waiting`.
    Places {
        last: u64,
        count: u64,
        waiting: u64,
        rate: f64,
        admitted_now: u64,
    },
    /// Places `last - count + 1 ..= last` in a scheduled sale's pre-queue, for the first
    /// `count` joins of the batch; the others found it full (`max_entrants`, 0 when the
    /// queue has no cap).
    Scheduled {
        last: u64,
        count: u64,
        opens_at_ms: u64,
        max_entrants: u64,
    },
    /// The scheduled sale's pre-queue holds its `max_entrants`: no join took a place.
    PreQueueFull { max_entrants: u64 },
}

impl Joined {
    /// The state of the `i`-th browser of the batch (0-based).
    pub fn state(&self, i: usize) -> PlaceState {
        match *self {
            Joined::QueueClosed => PlaceState::QueueClosed(CloseReason::QueueClosed),
            Joined::Places {
                last,
                count,
                waiting,
                rate,
                admitted_now,
            } => {
                if (i as u64) < admitted_now {
                    return PlaceState::AdmittedNow {
                        place: PlaceId(last + 1 - count + i as u64),
                    };
                }
                let behind = count.saturating_sub(1).saturating_sub(i as u64);
                PlaceState::Waiting {
                    place: PlaceId(last - behind),
                    position: waiting - behind,
                    waiting,
                    rate,
                    previous_gateway: None,
                    lane: None,
                }
            }
            Joined::Scheduled {
                count,
                max_entrants,
                ..
            } if i as u64 >= count => PlaceState::PreQueueFull { max_entrants },
            Joined::Scheduled {
                last,
                count,
                opens_at_ms,
                ..
            } => PlaceState::Scheduled {
                place: PlaceId(last - count.saturating_sub(1).saturating_sub(i as u64)),
                opens_at_ms,
                previous_gateway: None,
            },
            Joined::PreQueueFull { max_entrants } => PlaceState::PreQueueFull { max_entrants },
        }
    }
}

/// What one join call did for each join of its batch: see [`Store::join_proven`].
#[derive(Debug, Clone, PartialEq)]
pub struct JoinBatch {
    /// The places taken by the accepted joins (`None`: no join was accepted).
    pub joined: Option<Joined>,
    /// In a proof-of-work queue, each join's verdict; empty otherwise (every join accepted).
    pub verdicts: Vec<PowVerdict>,
    /// The lane the batch joined (`None`: the default lane): see [`Store::join_in_lane`].
    pub lane: Option<LaneName>,
}

impl JoinBatch {
    /// The `i`-th join's (0-based) place, or why its proof of work took none.
    pub fn outcome(&self, i: usize) -> std::result::Result<PlaceState, Refusal> {
        let mut j = i;
        if !self.verdicts.is_empty() {
            match self.verdicts.get(i) {
                Some(PowVerdict::Accepted) => {}
                Some(PowVerdict::Missing) => return Err(Refusal::Missing),
                Some(PowVerdict::Spent) => return Err(Refusal::Spent),
                Some(PowVerdict::Insufficient) | None => return Err(Refusal::Invalid),
            }
            j = self.verdicts[..i]
                .iter()
                .filter(|v| **v == PowVerdict::Accepted)
                .count();
        }
        match &self.joined {
            Some(joined) => {
                let mut state = joined.state(j);
                if let PlaceState::Waiting { lane, .. } = &mut state {
                    lane.clone_from(&self.lane);
                }
                Ok(state)
            }
            None => Err(Refusal::Invalid),
        }
    }
}

/// How many joins of a batch of `n` take a place: those accepted, or all without verdicts.
fn accepted(verdicts: &[PowVerdict], n: usize) -> u64 {
    if verdicts.is_empty() {
        return n as u64;
    }
    verdicts
        .iter()
        .filter(|v| **v == PowVerdict::Accepted)
        .count() as u64
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

/// Most places one join call takes (a gateway's batch of joins for one queue).
pub const JOIN_BATCH_MAX: usize = 500;

impl Store {
    /// Takes `n` new places (1..=[`JOIN_BATCH_MAX`]) at the tail of `q` in one atomic call, for
    /// `n` browsers held by gateway `gw`, in the order given: see [`Joined::state`]. For a
    /// queue without a challenge; in a proof-of-work queue use [`Store::join_proven`] (here
    /// every join lacks a proof, so the call fails).
    pub async fn join_many(&self, q: &QueueId, gw: u16, now_ms: u64, n: usize) -> Result<Joined> {
        let batch = self.join_proven(q, gw, now_ms, &vec![None; n]).await?;
        match batch {
            JoinBatch {
                joined: Some(j),
                verdicts,
                ..
            } if verdicts.is_empty() => Ok(j),
            _ => Err(protocol(format!(
                "queue {q} asks a proof of work of every join"
            ))),
        }
    }

    /// Takes places at the tail of `q` in one atomic call for a batch of joins held by gateway
    /// `gw`, each with its proof of work when it brought one (checked by the gateway already;
    /// see `join.lua`): in a proof-of-work queue only the joins whose proof is good and not
    /// spent take a place, and their proofs are spent. See [`JoinBatch::outcome`].
    pub async fn join_proven(
        &self,
        q: &QueueId,
        gw: u16,
        now_ms: u64,
        proofs: &[Option<Proof>],
    ) -> Result<JoinBatch> {
        self.join_bound(q, gw, now_ms, proofs, &[]).await
    }

    /// [`Store::join_proven`], each join also with the thumbprint of the browser key it proved
    /// (`keys`: one per join, or empty when none has one). A place taken records its key in the
    /// same call (`bound`, see `keys.rs`), so it is never admitted without it.
    pub async fn join_bound(
        &self,
        q: &QueueId,
        gw: u16,
        now_ms: u64,
        proofs: &[Option<Proof>],
        keys: &[Option<Thumbprint>],
    ) -> Result<JoinBatch> {
        self.join_in_lane(q, gw, now_ms, proofs, keys, None).await
    }

    /// [`Store::join_bound`] into lane `lane` (`None`: the queue's default lane; see
    /// [`crate::lanes`]): every join of the batch takes its place at the tail of that lane.
    /// A lane the queue does not have takes no place: [`super::StoreError::NoSuchLane`].
    pub async fn join_in_lane(
        &self,
        q: &QueueId,
        gw: u16,
        now_ms: u64,
        proofs: &[Option<Proof>],
        keys: &[Option<Thumbprint>],
        lane: Option<&LaneName>,
    ) -> Result<JoinBatch> {
        let n = proofs.len();
        if !keys.is_empty() && keys.len() != n {
            return Err(protocol(format!("{} keys for {n} joins", keys.len())));
        }
        let key_arg = if keys.iter().any(Option::is_some) {
            keys.iter()
                .map(|k| k.as_ref().map_or("", Thumbprint::as_str))
                .collect::<Vec<_>>()
                .join(",")
        } else {
            String::new()
        };
        if n == 0 || n > JOIN_BATCH_MAX {
            return Err(protocol(format!(
                "a join batch takes 1 to {JOIN_BATCH_MAX} places, not {n}"
            )));
        }
        let proof_arg = proofs
            .iter()
            .map(|p| {
                p.as_ref().map_or(String::new(), |p| {
                    format!("{}:{}:{}", p.id, p.difficulty, p.expires_ms)
                })
            })
            .collect::<Vec<_>>()
            .join(",");
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .join
            .key(&k.meta)
            .key(&k.seq)
            .key(&k.waiting)
            .key(&k.gws)
            .key(&k.active)
            .key(&k.passed)
            .key(&k.away)
            .key(&k.pre)
            .key(&k.spent)
            .key(&k.bound)
            .key(&k.parked)
            .key(&k.unarrived)
            .lane_keys(&k)
            .arg(gw)
            .arg(now_ms)
            .arg(GWS_TTL_MS)
            .arg(n)
            .arg(proof_arg)
            .arg(key_arg)
            .arg(lane.map_or("", LaneName::as_str))
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        let verdicts_at = |i: usize| -> Result<Vec<PowVerdict>> {
            let Some(v) = a.get(i) else {
                return Ok(Vec::new());
            };
            let list = array(v.clone())?
                .iter()
                .map(|x| {
                    i64::try_from(u(x)?)
                        .ok()
                        .and_then(PowVerdict::from_code)
                        .ok_or_else(|| protocol(format!("join verdict {x:?}")))
                })
                .collect::<Result<Vec<_>>>()?;
            if list.len() != n {
                return Err(protocol(format!("join verdicts {list:?} for {n} joins")));
            }
            Ok(list)
        };
        let (joined, verdicts) = match status(&a, PlaceStatus::from_code) {
            Some(PlaceStatus::QueueClosed) => (Some(Joined::QueueClosed), Vec::new()),
            Some(PlaceStatus::Challenged) => (None, verdicts_at(1)?),
            Some(PlaceStatus::Scheduled) if a.len() >= 5 => {
                let verdicts = verdicts_at(5)?;
                let n = accepted(&verdicts, n);
                let (last, taken) = (u(&a[1])?, u(&a[3])?);
                if last < taken || taken > n {
                    return Err(protocol(format!("join reply {a:?} for {n} places")));
                }
                let j = Joined::Scheduled {
                    last,
                    count: taken,
                    opens_at_ms: u(&a[2]).unwrap_or(0),
                    max_entrants: u(&a[4])?,
                };
                (Some(j), verdicts)
            }
            Some(PlaceStatus::PreQueueFull) if a.len() >= 2 => {
                let j = Joined::PreQueueFull {
                    max_entrants: u(&a[1])?,
                };
                (Some(j), verdicts_at(2)?)
            }
            Some(PlaceStatus::Waiting) if a.len() >= 6 => {
                let verdicts = verdicts_at(6)?;
                let n = accepted(&verdicts, n);
                let last = u(&a[1])?;
                let waiting = u(&a[2])?;
                let admitted_now = u(&a[5])?;
                if last < n || admitted_now > n || waiting < n - admitted_now {
                    return Err(protocol(format!("join reply {a:?} for {n} places")));
                }
                let j = Joined::Places {
                    last,
                    count: n,
                    waiting,
                    rate: rate_of(&a[3], &a[4]),
                    admitted_now,
                };
                (Some(j), verdicts)
            }
            Some(PlaceStatus::NoSuchLane) => return Err(no_such_lane(lane)),
            _ => return Err(protocol(format!("join reply {a:?}"))),
        };
        Ok(JoinBatch {
            joined,
            verdicts,
            lane: lane.cloned(),
        })
    }

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
        let k = QueueKeys::new(q);
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
        let k = QueueKeys::new(q);
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

    /// [`Store::leave`] for `asker`: a browser's request on a binding queue leaves nothing
    /// ([`LeaveOutcome::WrongKey`]) unless it proved the place's key (checked in the same
    /// call).
    pub async fn leave_as(
        &self,
        q: &QueueId,
        place: PlaceId,
        asker: Asker<'_>,
    ) -> Result<LeaveOutcome> {
        let (asked, proven, known) = asker.args();
        let k = QueueKeys::new(q);
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
            .arg(crate::time::now_ms())
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

    /// Browsers held by gateway `gw` disconnected: their places are kept for the queue's grace
    /// period (those this gateway still holds), then dropped unless the browsers resume.
    /// Returns how many places were affected.
    pub async fn mark_away(
        &self,
        q: &QueueId,
        places: &[PlaceId],
        gw: u16,
        now_ms: u64,
    ) -> Result<u64> {
        let k = QueueKeys::new(q);
        let mut n = 0;
        for chunk in places.chunks(1000) {
            let mut inv = SCRIPTS.away.key(&k.meta);
            inv.key(&k.waiting)
                .key(&k.away)
                .key(&k.parked)
                .lane_keys(&k);
            inv.arg(gw).arg(now_ms);
            for p in chunk {
                inv.arg(p.0);
            }
            let m: u64 = inv.invoke_async(&mut self.c()).await?;
            n += m;
            // Places not in line may stand in a scheduled sale's pre-queue: their browsers'
            // absence is recorded for the draw (`lua/pre_away.lua`).
            if m < chunk.len() as u64 {
                let mut inv = SCRIPTS.pre_away.key(&k.meta);
                inv.key(&k.pre).key(&k.pre_away).arg(gw);
                for p in chunk {
                    inv.arg(p.0);
                }
                let pre: u64 = inv.invoke_async(&mut self.c()).await?;
                n += pre;
            }
        }
        Ok(n)
    }

    /// The gateway that holds `place` in Redis now: the one its waiting (or parked, or
    /// pre-queue) member names. `None` when the place is in none of them (admitted, gone, or
    /// never taken). A gateway told that its connection was taken over elsewhere asks this
    /// first: the news may be older than its own newer connection for the place (the `redis`
    /// test `pow::` resumes a place on one gateway right after another).
    pub async fn holder(&self, q: &QueueId, place: PlaceId) -> Result<Option<u16>> {
        let k = QueueKeys::new(q);
        let seq = place.seq();
        // The members of `place` in `waiting`, `parked` and `pre`, in that order, then in the
        // other lanes' zsets (crate::lanes: a place is in one of them at most).
        let mut pipe = redis::pipe();
        let lanes = k.lanes.iter().flat_map(|(w, p)| [w, p]);
        for set in [&k.waiting, &k.parked, &k.pre].into_iter().chain(lanes) {
            pipe.cmd("ZRANGEBYSCORE").arg(set).arg(seq).arg(seq);
        }
        let found: Vec<Vec<Vec<u8>>> = pipe.query_async(&mut self.c()).await?;
        Ok(found
            .iter()
            .find_map(|members| members.first())
            .and_then(|m| crate::keys::member_gateway(m)))
    }

    /// Clears the away marks of `places` that gateway `gw` holds again (see `lua/back.lua`):
    /// for places whose browsers came back while [`Store::mark_away`] was writing them.
    /// Returns how many were away.
    pub async fn mark_back(&self, q: &QueueId, places: &[PlaceId], gw: u16) -> Result<u64> {
        let k = QueueKeys::new(q);
        let mut n = 0;
        for chunk in places.chunks(1000) {
            let mut inv = SCRIPTS.back.key(&k.waiting);
            inv.key(&k.away).key(&k.parked).lane_keys(&k).arg(gw);
            for p in chunk {
                inv.arg(p.0);
            }
            let m: u64 = inv.invoke_async(&mut self.c()).await?;
            // A pre-queue place held here again is present for the draw.
            let ids: Vec<u64> = chunk.iter().map(|p| p.0).collect();
            let pre: u64 = redis::cmd("SREM")
                .arg(&k.pre_away)
                .arg(&ids)
                .query_async(&mut self.c())
                .await?;
            n += m + pre;
        }
        Ok(n)
    }
}

/// A gateway index a script returned as decimal text (`None` for false or anything else).
fn gateway_index(v: Option<&Value>) -> Option<u16> {
    v.and_then(text).and_then(|t| t.parse().ok())
}
