//! One dispatcher tick for one queue: expire sessions, drop places whose browsers are gone,
//! admit from the head of the line, and snapshot the line (all in `lua/tick.lua`).

use redis::Value;
use serde::Deserialize;

use crate::ids::QueueId;
use crate::keys::{self, QueueKeys};
use crate::lanes::LaneName;
use crate::store::decode::{array, status, u};
use crate::store::gateways::GatewayInfo;
use crate::store::reply::TickStatus;
use crate::store::scripts::{WithLaneKeys, SCRIPTS};
use crate::store::{protocol, Result, Store};

use super::outbox::OutboxEntry;
use super::Lease;

/// Input of one dispatcher tick for one queue.
#[derive(Debug, Clone)]
pub struct TickArgs<'a> {
    pub now_ms: u64,
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

/// What a tick found.
// One is returned per tick script call and never stored in bulk: boxing the outcome would
// cost an allocation per call for nothing (it outgrew clippy's size limit with `lanes` and `inventory`).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Tick {
    /// Another replica holds the queue's lease now: stop driving it.
    LeaseLost,
    /// The queue is closed; its outbox may still hold admissions to deliver.
    Closed {
        outbox_len: u64,
    },
    Ticked(TickOutcome),
}

/// What one tick call did, and the queue as it left it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickOutcome {
    pub admitted: u64,
    pub waiting: u64,
    pub active: u64,
    /// The snapshot of the line (see `lua/tick.lua`); empty when [`TickOutcome::more`] is set:
    /// the tick's last call takes it.
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
    /// The last place id handed out when the snapshot was taken (0 when there is none): see
    /// [`crate::messages::QueueState::last_place`].
    pub last_place: u64,
    /// Indexes of gateways holding browsers of this queue.
    pub gateways: Vec<u16>,
    pub outbox_len: u64,
    pub admit_per_second: f64,
    /// Places removed without admission this tick (grace expired, gateway gone).
    pub dropped: u64,
    /// Sessions this call ended because the booking service never checked them within
    /// `arrival_seconds` (no-shows).
    pub no_shows: u64,
    /// The token bucket's level after this call: the admission budget carried to the next
    /// tick (a fraction of a place while people wait; up to one tick's worth while nobody
    /// does and passthrough is on).
    pub carry: f64,
    /// The queue's session TTL.
    pub session_ttl_ms: u64,
    /// From admission to its token's `exp`: `max_session_seconds` for a sliding session, the
    /// TTL otherwise.
    pub token_ttl_ms: u64,
    /// Admission is paused.
    pub paused: bool,
    /// What this tick admitted (the last `fresh_entries` entries of the outbox), for
    /// delivery without reading the outbox back.
    pub fresh: Vec<OutboxEntry>,
    pub fresh_entries: u64,
    /// This call admitted [`ADMIT_PER_CALL`] places and the tick's budget is not spent: call
    /// [`Store::tick`] again with the same arguments (the same admission time) to admit more.
    pub more: bool,
    /// The queue's inventory as the booking service last reported it (`None`: no report).
    pub inventory: Option<crate::inventory::InventoryState>,
    /// Nothing is left and no session has been active for `sold_out_grace_seconds`: the
    /// dispatcher closes the queue with `sold_out` (`Store::close_sold_out`).
    pub sold_out: bool,
    /// Each lane's line and admissions, and its snapshot on the tick's last call
    /// (crate::lanes; empty without lanes). `waiting` above counts every lane; `runs` and
    /// `samples` are the default lane's.
    pub lanes: Vec<LaneOutcome>,
}

/// One lane as a tick left it (see [`TickOutcome::lanes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LaneOutcome {
    pub name: LaneName,
    /// Joins that name no lane go here (its snapshot is also the outcome's `runs`/`samples`).
    pub default: bool,
    pub share: u8,
    /// In line in this lane (present and away).
    pub waiting: u64,
    /// Present (not away): the lane could be admitted from now.
    pub present: u64,
    /// Admitted from this lane by this call.
    pub admitted: u64,
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
}

/// Spacing of the first, coarse position samples (25% apart); refined where needed.
const COARSE_SAMPLE_STEP: f64 = 0.25;
/// Most places admitted per queue and tick (bounds the burst after a stall).
pub const MAX_ADMIT_PER_TICK: u64 = 10_000;
/// Most places admitted by one tick script: a bigger tick is several calls (see
/// [`TickOutcome::more`]), so one call blocks Redis for a few milliseconds at most, and the
/// first places can be on their way to the gateways while the next ones are admitted.
pub const ADMIT_PER_CALL: u64 = 1_000;
/// Expired sessions removed per tick script call at most. A tick makes one call per
/// [`ADMIT_PER_CALL`] admissions (at least one), so removal keeps up with sessions expiring at
/// the rate they were admitted; a backlog (after admission stops) is removed over a few ticks,
/// and until then costs memory only (an expired session is never counted or honoured).
const PRUNE_LIMIT: u64 = 2 * ADMIT_PER_CALL;

impl Store {
    /// One tick for one queue (see `lua/tick.lua`), or the next part of one whose last call
    /// returned [`TickOutcome::more`]: each call admits [`ADMIT_PER_CALL`] places at most.
    pub async fn tick(&self, q: &QueueId, t: &TickArgs<'_>) -> Result<Tick> {
        let k = QueueKeys::new(q);
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
            .arg(ADMIT_PER_CALL)
            .arg(t.bucket_rate.map(|r| r.to_string()).unwrap_or_default())
            .arg(t.tick_ms)
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
            .arg(QueueKeys::new(q).waiting)
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

/// The outcome of a tick call as `lua/tick.lua` encodes it: a JSON object whose field names
/// are these (a missing or unknown field is an error, so the two cannot drift apart).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TickReply {
    admitted: u64,
    waiting: u64,
    active: u64,
    #[serde(deserialize_with = "lua_list")]
    runs: Vec<u64>,
    #[serde(deserialize_with = "lua_list")]
    samples: Vec<u64>,
    last_place: u64,
    #[serde(deserialize_with = "lua_list")]
    gateways: Vec<String>,
    outbox_len: u64,
    admit_per_second: f64,
    dropped: u64,
    carry: f64,
    session_ttl_ms: u64,
    token_ttl_ms: u64,
    paused: bool,
    #[serde(deserialize_with = "lua_list")]
    fresh: Vec<String>,
    more: bool,
    no_shows: u64,
    #[serde(default)]
    inventory: Option<crate::inventory::InventoryState>,
    #[serde(default)]
    sold_out: bool,
    #[serde(deserialize_with = "lua_list")]
    lanes: Vec<LaneReply>,
}

/// One lane of a tick reply (`lane_snapshots` in `lua/tick.lua`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LaneReply {
    name: LaneName,
    slot: u8,
    share: u8,
    waiting: u64,
    present: u64,
    admitted: u64,
    #[serde(deserialize_with = "lua_list")]
    runs: Vec<u64>,
    #[serde(deserialize_with = "lua_list")]
    samples: Vec<u64>,
}

impl TickReply {
    fn into_outcome(self) -> Result<TickOutcome> {
        Ok(TickOutcome {
            admitted: self.admitted,
            waiting: self.waiting,
            active: self.active,
            runs: pairs(&self.runs)?,
            samples: pairs(&self.samples)?,
            last_place: self.last_place,
            gateways: self
                .gateways
                .iter()
                .filter_map(|g| g.parse().ok())
                .collect(),
            outbox_len: self.outbox_len,
            admit_per_second: self.admit_per_second,
            dropped: self.dropped,
            no_shows: self.no_shows,
            carry: self.carry,
            session_ttl_ms: self.session_ttl_ms,
            token_ttl_ms: self.token_ttl_ms,
            paused: self.paused,
            fresh: OutboxEntry::parse_all(&self.fresh)?,
            fresh_entries: self.fresh.len() as u64,
            more: self.more,
            inventory: self.inventory,
            sold_out: self.sold_out,
            lanes: self
                .lanes
                .into_iter()
                .map(|l| {
                    Ok(LaneOutcome {
                        name: l.name,
                        default: l.slot == 0,
                        share: l.share,
                        waiting: l.waiting,
                        present: l.present,
                        admitted: l.admitted,
                        runs: pairs(&l.runs)?,
                        samples: pairs(&l.samples)?,
                    })
                })
                .collect::<Result<_>>()?,
        })
    }
}

/// `[a, b, c, d, ...]` as `[(a, b), (c, d), ...]`.
fn pairs(flat: &[u64]) -> Result<Vec<(u64, u64)>> {
    if !flat.len().is_multiple_of(2) {
        return Err(protocol("odd-length pair list"));
    }
    Ok(flat.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

/// A list from a Lua table: Redis' `cjson` encodes an empty table as the object `{}`, so an
/// empty object counts as an empty list.
fn lua_list<'de, D, T>(d: D) -> std::result::Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ListVisitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list, or {} for an empty one")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element()? {
                out.push(item);
            }
            Ok(out)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Vec<T>, A::Error> {
            match map.next_key::<serde::de::IgnoredAny>()? {
                None => Ok(Vec::new()),
                Some(_) => Err(serde::de::Error::custom("a non-empty object is not a list")),
            }
        }
    }

    d.deserialize_any(ListVisitor(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_outcomes_decode_by_name_with_empty_tables_as_objects() {
        let json = r#"{"admitted":2,"waiting":5,"active":2,"runs":[10,5],"samples":{},
            "last_place":14,"gateways":["3","x"],"outbox_len":1,"admit_per_second":10,"dropped":0,
            "carry":0.5,"session_ttl_ms":600000,"token_ttl_ms":600000,"paused":false,
            "fresh":["1000|2000|8:3,9:3"],"more":false,"no_shows":0,"lanes":{}}"#;
        let reply: TickReply = serde_json::from_str(json).expect("decodes");
        let o = reply.into_outcome().expect("valid");
        assert_eq!(o.runs, vec![(10, 5)]);
        assert!(o.samples.is_empty());
        assert_eq!(o.last_place, 14);
        assert_eq!(o.gateways, vec![3]);
        assert_eq!((o.admit_per_second, o.carry), (10.0, 0.5));
        assert_eq!(o.fresh.len(), 2);
        assert_eq!(o.fresh_entries, 1);
        let missing = json.replace(r#""more":false"#, r#""moar":false"#);
        assert!(serde_json::from_str::<TickReply>(&missing).is_err());
    }
}
