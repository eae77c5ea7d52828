//! One dispatcher tick for one queue: expire sessions, drop places whose browsers are gone,
//! admit from the head of the line, and snapshot the line (all in `lua/tick.lua`).

use redis::Value;

use crate::ids::QueueId;
use crate::keys::{self, QueueKeys};
use crate::store::decode::{array, status, u};
use crate::store::gateways::GatewayInfo;
use crate::store::reply::TickStatus;
use crate::store::scripts::{WithLaneKeys, SCRIPTS};
use crate::store::{protocol, Result, Store};

use super::tick_outcome::Tick;
use super::tick_reply::TickReply;
use super::Lease;

/// Input of one dispatcher tick for one queue.
#[derive(Debug, Clone)]
pub struct TickArgs<'a> {
    /// The admission time: what the tick's admissions are stamped with, and when its bucket
    /// refills up to.
    pub now_ms: u64,
    /// The wall clock when the tick's calls are made, for a tick admitting ahead of `now_ms`
    /// (`None`: `now_ms`): sessions, grace periods and capacity are judged at it, so nothing
    /// ends before its time.
    pub clock_ms: Option<u64>,
    /// Time to budget for on a queue's first tick (one tick).
    pub first_elapsed_ms: u64,
    /// Longest gap between ticks that is budgeted for (bounds the burst after a stall).
    pub max_elapsed_ms: u64,
    /// Places published exactly in each state snapshot (at least 1).
    pub exact: u64,
    pub max_position_error: f64,
    pub store_rate: Option<f64>,
    /// The lease this replica holds on the queue.
    pub lease: &'a Lease,
    pub lease_ttl_ms: u64,
    /// Every registered gateway (see [`Store::gateways`]).
    pub gateways: &'a [GatewayInfo],
    /// Tokens per second the queue's bucket refills at: the effective rate (see
    /// [`crate::policy::RateSource`]); `None` = the queue's `admit_per_second`.
    pub bucket_rate: Option<f64>,
    /// The tick's length: the bucket keeps one tick's worth while nobody waits.
    pub tick_ms: u64,
}
/// Spacing of the first, coarse position samples (25% apart); refined where needed.
const COARSE_SAMPLE_STEP: f64 = 0.25;
/// Most places admitted per queue and tick (bounds the burst after a stall).
pub const MAX_ADMIT_PER_TICK: u64 = 10_000;
/// Most places admitted by one tick script: a bigger tick is several calls (see
/// [`TickOutcome::more`](super::tick_outcome::TickOutcome::more)), so one call blocks Redis
/// for a few milliseconds at most, and the first places can be on their way to the gateways
/// while the next ones are admitted.
pub const ADMIT_PER_CALL: u64 = 1_000;
/// Expired sessions removed per tick script call at most. A tick makes one call per
/// [`ADMIT_PER_CALL`] admissions (at least one), so removal keeps up with sessions expiring at
/// the rate they were admitted; a backlog (after admission stops) is removed over a few ticks,
/// and until then costs memory only (an expired session is never counted or honoured).
const PRUNE_LIMIT: u64 = 2 * ADMIT_PER_CALL;

impl Store {
    /// One tick for one queue (see `lua/tick.lua`), or the next part of one whose last call
    /// returned [`TickOutcome::more`](super::tick_outcome::TickOutcome::more): each call
    /// admits [`ADMIT_PER_CALL`] places at most.
    pub async fn tick(&self, q: &QueueId, t: &TickArgs<'_>) -> Result<Tick> {
        self.tick_up_to(q, t, ADMIT_PER_CALL).await
    }

    /// [`Store::tick`], with this call admitting `most` places at most (at least one; at
    /// most [`ADMIT_PER_CALL`]): a tick's first call can be short, so its first browsers are
    /// on their way while the next calls admit the rest (the budget left stays in the bucket
    /// for them, as between any two calls).
    pub async fn tick_up_to(&self, q: &QueueId, t: &TickArgs<'_>, most: u64) -> Result<Tick> {
        let k = QueueKeys::of(q);
        let gateways = t
            .gateways
            .iter()
            .map(|g| format!("{}={}", g.index, g.alive_until_ms))
            .collect::<Vec<_>>()
            .join(",");
        let v: Value = SCRIPTS
            .tick
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.outbox)
            .key(&k.gws)
            .key(&k.away)
            .key(&k.lease)
            .key(&k.seq)
            .key(&k.ended)
            .key(&k.parked)
            .key(&k.bound)
            .key(&k.unarrived)
            .key(&k.arrivals)
            .lane_keys(&k)
            .arg(t.now_ms)
            .arg(t.first_elapsed_ms)
            .arg(t.max_elapsed_ms)
            .arg(t.exact.max(1))
            .arg(t.max_position_error)
            .arg(t.store_rate.map(|r| format!("{r:.3}")).unwrap_or_default())
            .arg(PRUNE_LIMIT)
            .arg(COARSE_SAMPLE_STEP)
            .arg(&t.lease.value)
            .arg(t.lease_ttl_ms)
            .arg(gateways)
            .arg(MAX_ADMIT_PER_TICK)
            .arg(most.clamp(1, ADMIT_PER_CALL))
            .arg(t.bucket_rate.map(|r| r.to_string()).unwrap_or_default())
            .arg(t.tick_ms)
            .arg(t.clock_ms.map(|c| c.to_string()).unwrap_or_default())
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match (status(&a, TickStatus::from_code), a.get(1)) {
            (Some(TickStatus::LeaseLost), _) => Ok(Tick::LeaseLost),
            (Some(TickStatus::Closed), len) => Ok(Tick::Closed {
                outbox_len: len.map(u).transpose()?.unwrap_or(0),
            }),
            (Some(TickStatus::Ticked), Some(Value::BulkString(json))) => {
                let reply: TickReply = serde_json::from_slice(json)
                    .map_err(|e| protocol(format!("tick outcome: {e}")))?;
                reply.into_outcome().map(Tick::Ticked)
            }
            _ => Err(protocol(format!("tick reply {a:?}"))),
        }
    }

    /// The first `n` present places in line (away ones are parked: their browsers cannot take
    /// a token now): place id and the index of the gateway holding each.
    pub async fn head(&self, q: &QueueId, n: usize) -> Result<Vec<(u64, u16)>> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let v: Vec<(Vec<u8>, f64)> = redis::cmd("ZRANGE")
            .arg(&QueueKeys::of(q).waiting)
            .arg(0)
            .arg(n - 1)
            .arg("WITHSCORES")
            .query_async(&mut self.c())
            .await?;
        v.into_iter()
            .map(|(member, score)| {
                keys::member_gateway(&member)
                    .map(|gw| (score as u64, gw))
                    .ok_or_else(|| protocol("waiting-set member is not 6 bytes"))
            })
            .collect()
    }
}
