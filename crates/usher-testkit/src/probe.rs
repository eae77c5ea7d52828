//! Redis operations only tests and benchmarks need: what Redis reports about itself (`INFO`,
//! `MEMORY USAGE`) and a single join. usher's processes never call them, so they live here
//! rather than in `usher_core::store`; key names still come from `usher_core::keys`, the one
//! place they are defined.

use std::collections::HashMap;

use usher_core::ids::{QueueId, ServerId};
use usher_core::keys::QueueKeys;
use usher_core::store::{PlaceState, Store, StoreError};

/// A plain connection to a test's Redis, for questions about Redis itself.
#[derive(Clone)]
pub struct RedisProbe {
    conn: redis::aio::MultiplexedConnection,
}

impl RedisProbe {
    pub async fn connect(url: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Self { conn })
    }

    /// An `INFO` section as text (tests read commandstats from it).
    pub async fn info(&self, section: &str) -> redis::RedisResult<String> {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// Starts recording every command that holds Redis for `at_least_us` microseconds or more
    /// (`SLOWLOG`; the last 4,096 are kept). Redis records the commands a script runs too,
    /// each on its own, so a low threshold fills the log with those. Restores nothing: only
    /// for a benchmark's own Redis.
    pub async fn record_commands(&self, at_least_us: u64) -> redis::RedisResult<()> {
        let mut c = self.conn.clone();
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(at_least_us)
            .arg("slowlog-max-len")
            .arg(4096)
            .query_async(&mut c)
            .await?;
        redis::cmd("SLOWLOG").arg("RESET").query_async(&mut c).await
    }

    /// The commands recorded since [`RedisProbe::record_commands`]: each one's name
    /// (uppercase) and how long it ran inside Redis, in microseconds.
    pub async fn recorded_commands(&self) -> redis::RedisResult<Vec<(String, u64)>> {
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(4096)
            .query_async(&mut self.conn.clone())
            .await?;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            // [id, unix time, duration µs, [command, args...], client address, client name]
            let redis::Value::Array(fields) = e else {
                continue;
            };
            let (Some(redis::Value::Int(us)), Some(redis::Value::Array(argv))) =
                (fields.get(2), fields.get(3))
            else {
                continue;
            };
            let name = match argv.first() {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_uppercase(),
                _ => continue,
            };
            out.push((name, u64::try_from(*us).unwrap_or(0)));
        }
        Ok(out)
    }

    /// How many times Redis ran command `name` (lowercase, e.g. `evalsha`) since it started,
    /// from `INFO commandstats` (calls inside scripts included: Redis counts those too).
    pub async fn calls(&self, name: &str) -> redis::RedisResult<u64> {
        let info = self.info("commandstats").await?;
        let prefix = format!("cmdstat_{name}:calls=");
        Ok(info
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .and_then(|rest| rest.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }

    /// The admission time of the last tick that ran for `q` (meta `bucket_ms`: every tick
    /// call writes it, with `admitted_total`, in the same script) and `admitted_total`, read
    /// together. The dispatcher's own clock, so a test can tell which tick did what without
    /// comparing its wall clock with the dispatcher's.
    pub async fn last_tick(&self, q: &QueueId) -> redis::RedisResult<(u64, u64)> {
        let (at, total): (Option<u64>, Option<u64>) = redis::cmd("HMGET")
            .arg(QueueKeys::new(q).meta)
            .arg("bucket_ms")
            .arg("admitted_total")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok((at.unwrap_or(0), total.unwrap_or(0)))
    }

    /// One field of `q`'s meta hash (e.g. `bucket_rate`, the rate the last tick refilled the
    /// bucket at), `None` when absent.
    pub async fn meta_field(&self, q: &QueueId, field: &str) -> redis::RedisResult<Option<String>> {
        redis::cmd("HGET")
            .arg(QueueKeys::new(q).meta)
            .arg(field)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// The level of `q`'s admission bucket (meta `bucket`: tokens left for passthrough joins
    /// and the next tick); 0 before its first tick.
    pub async fn bucket_level(&self, q: &QueueId) -> redis::RedisResult<f64> {
        let level: Option<f64> = redis::cmd("HGET")
            .arg(QueueKeys::new(q).meta)
            .arg("bucket")
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(level.unwrap_or(0.0))
    }

    /// Waits (at most `within`) until a tick of `q` runs after this call, going by the
    /// dispatcher's clock (meta `bucket_ms`; a passthrough join moves it too, so call it while
    /// nobody joins `q`), and returns that tick's [`RedisProbe::last_tick`] read. A fixed sleep
    /// "longer than a tick" is a guess on a loaded machine.
    pub async fn next_tick(
        &self,
        q: &QueueId,
        within: std::time::Duration,
    ) -> anyhow::Result<(u64, u64)> {
        let (before, _) = self.last_tick(q).await?;
        crate::wait::eventually_within(&format!("a tick of {q}"), within, async || {
            let now = self.last_tick(q).await?;
            if now.0 > before {
                Ok(now)
            } else {
                Err(anyhow::anyhow!("the last tick still ran at {} ms", now.0))
            }
        })
        .await
    }

    /// Whether the gateway `id` has applied every message written to its stream so far: its
    /// consumer group has been handed the stream's last entry and has acknowledged everything.
    /// A gateway acknowledges a batch only after applying it to the browsers it holds, so this
    /// is the moment "the gateway has seen the message", which no fixed sleep can tell.
    pub async fn gateway_caught_up(&self, id: &ServerId) -> redis::RedisResult<bool> {
        let key = usher_core::keys::gateway_stream(id);
        let mut conn = self.conn.clone();
        let stream: HashMap<String, redis::Value> = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        let groups: Vec<HashMap<String, redis::Value>> = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&key)
            .query_async(&mut conn)
            .await?;
        let text = |m: &HashMap<String, redis::Value>, k: &str| {
            m.get(k)
                .and_then(|v| redis::from_redis_value::<String>(v.clone()).ok())
        };
        let last = text(&stream, "last-generated-id");
        Ok(groups
            .iter()
            .find(|g| text(g, "name").as_deref() == Some(usher_core::keys::STREAM_GROUP))
            .is_some_and(|g| {
                text(g, "last-delivered-id") == last && text(g, "pending").as_deref() == Some("0")
            }))
    }

    /// Waits until the gateway `id` has applied every message of its stream
    /// ([`RedisProbe::gateway_caught_up`]).
    pub async fn gateway_applied(&self, id: &ServerId) -> anyhow::Result<()> {
        crate::wait::eventually(
            &format!("gateway {id} to apply its stream"),
            async || match self.gateway_caught_up(id).await {
                Ok(true) => Ok(()),
                Ok(false) => Err("messages not yet applied".to_owned()),
                Err(e) => Err(e.to_string()),
            },
        )
        .await
    }

    /// Waits for `n` more ticks of `q` ([`RedisProbe::next_tick`] each): "a few ticks later",
    /// for checks that something did not happen while the dispatcher ran.
    pub async fn ticks(&self, q: &QueueId, n: usize) -> anyhow::Result<()> {
        for _ in 0..n {
            self.next_tick(q, crate::wait::LIMIT).await?;
        }
        Ok(())
    }

    /// Waits until every live gateway has applied every message of its stream
    /// ([`RedisProbe::gateway_applied`]).
    pub async fn gateways_applied(&self, store: &Store) -> anyhow::Result<()> {
        let live = store.live_gateways(usher_core::time::now_ms()).await?;
        for id in live.values() {
            self.gateway_applied(id).await?;
        }
        Ok(())
    }

    /// `FLUSHALL`: every key gone at once, as a data loss on a Redis without persistence.
    pub async fn flushall(&self) -> redis::RedisResult<()> {
        redis::cmd("FLUSHALL")
            .query_async(&mut self.conn.clone())
            .await
    }

    /// `SCRIPT FLUSH`: Redis forgets every script it was sent, as a restart does (scripts are
    /// not persisted) or a failover to a replica that never ran them.
    pub async fn script_flush(&self) -> redis::RedisResult<()> {
        redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut self.conn.clone())
            .await
    }

    /// `MEMORY USAGE` of a queue's waiting set, with `SAMPLES 0` (exact); 0 when it is empty.
    pub async fn waiting_memory(&self, q: &QueueId) -> redis::RedisResult<u64> {
        self.memory_usage(&QueueKeys::new(q).waiting).await
    }

    /// Bytes of Redis memory the away places of `q` take: `parked` (their members, out of the
    /// line's waiting set) and `away` (their grace deadlines), each measured whole.
    pub async fn away_memory(&self, q: &QueueId) -> redis::RedisResult<u64> {
        let k = QueueKeys::new(q);
        Ok(self.memory_usage(&k.parked).await? + self.memory_usage(&k.away).await?)
    }

    /// `MEMORY USAGE key SAMPLES 0` (every element counted); 0 for a missing key.
    async fn memory_usage(&self, key: &str) -> redis::RedisResult<u64> {
        let v: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(key)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(v.unwrap_or(0))
    }
}

/// Takes one new place at the tail of `q` for a browser held by gateway `gw`: a join call of
/// one, as a gateway makes for a browser that joins alone.
pub async fn join(
    store: &Store,
    q: &QueueId,
    gw: u16,
    now_ms: u64,
) -> Result<PlaceState, StoreError> {
    Ok(store.join_many(q, gw, now_ms, 1).await?.state(0))
}
