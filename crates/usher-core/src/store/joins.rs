//! Joins: a gateway's batch of browsers taking places at the tail of a queue's line (or its
//! lane, or a scheduled sale's pre-queue) in one call of `lua/join.lua`, each with its proof
//! of work and browser key when it brought one.

use crate::record::JoinNote;
use redis::Value;

use super::decode::{array, rate_of, status, u};
use super::gateways::GWS_TTL_MS;
use super::lanes::no_such_lane;
use super::places::PlaceState;
use super::reply::{PlaceStatus, PowVerdict};
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::binding::Thumbprint;
use crate::challenge::{Proof, Refusal};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;
use crate::lanes::LaneName;
use crate::messages::CloseReason;

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
        self.join_recorded(q, gw, now_ms, proofs, keys, lane, &[])
            .await
    }

    /// [`Store::join_in_lane`], each join also with what the fairness record keeps of it
    /// (`notes`: one per join, or empty; crate::record::JoinNote). A queue that does not
    /// record ignores them.
    #[allow(clippy::too_many_arguments)]
    pub async fn join_recorded(
        &self,
        q: &QueueId,
        gw: u16,
        now_ms: u64,
        proofs: &[Option<Proof>],
        keys: &[Option<Thumbprint>],
        lane: Option<&LaneName>,
        notes: &[JoinNote],
    ) -> Result<JoinBatch> {
        let n = proofs.len();
        if !notes.is_empty() && notes.len() != n {
            return Err(protocol(format!("{} notes for {n} joins", notes.len())));
        }
        let note_arg = notes
            .iter()
            .map(JoinNote::wire)
            .collect::<Vec<_>>()
            .join(",");
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
        let k = QueueKeys::of(q);
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
            .arg(note_arg)
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
}
