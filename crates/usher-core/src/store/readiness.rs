//! What the dispatcher's readiness report (`GET /admin/readiness`) reads from Redis: the
//! server's persistence and memory settings (`INFO persistence`, `INFO memory`: managed
//! services refuse `CONFIG GET`, and `INFO` is what they all answer), its clock (`TIME`), the
//! live dispatcher replicas, whether a development signing key is shared through Redis, and
//! what each gateway reports about itself with its heartbeat ([`GatewayFacts`]).

use std::collections::HashMap;

use redis::Value;
use serde::{Deserialize, Serialize};

use super::{protocol, Result, Store};
use crate::keys;

/// Redis memory to budget per person expected in line: a waiting place takes 94–105 B
/// (BENCHMARKS.md, "Redis memory"), an away one 196 B, a place of a binding queue 98 B more
/// and a scheduled sale's entrant its hash and record besides; 300 B covers an away, bound
/// place and leaves room for the streams, sessions and outbox around the line.
pub const MEMORY_PER_PLACE_BYTES: u64 = 300;

/// What one Redis server says of itself (the node answering, or each node of a cluster).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RedisFacts {
    /// `aof_enabled` of `INFO persistence`.
    pub aof_enabled: bool,
    /// `maxmemory_policy` of `INFO memory` (`noeviction`, `allkeys-lru`, …).
    pub maxmemory_policy: String,
    /// `maxmemory` (0: no limit).
    pub maxmemory: u64,
    /// `used_memory`.
    pub used_memory: u64,
    /// `total_system_memory` (0 when the server does not say, as some managed ones do not).
    pub total_system_memory: u64,
}

impl RedisFacts {
    /// From the text of `INFO persistence` and `INFO memory` (`name:value` lines); `None`
    /// when a field the checks need is missing.
    pub fn parse(info: &str) -> Option<Self> {
        let fields: HashMap<&str, &str> = info
            .lines()
            .filter_map(|l| l.trim().split_once(':'))
            .collect();
        let number = |name: &str| fields.get(name).and_then(|v| v.parse::<u64>().ok());
        Some(Self {
            aof_enabled: number("aof_enabled")? == 1,
            maxmemory_policy: (*fields.get("maxmemory_policy")?).to_owned(),
            maxmemory: number("maxmemory")?,
            used_memory: number("used_memory")?,
            total_system_memory: number("total_system_memory").unwrap_or(0),
        })
    }
}

/// What a gateway reports about itself with each heartbeat, for the readiness report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatewayFacts {
    /// Its cap on event streams (`USHER_MAX_CONNECTIONS`).
    pub max_streams: u64,
    /// Its cap on client connections (`USHER_MAX_SOCKETS`).
    pub max_sockets: u64,
    /// Its soft limit on open files (`None`: unlimited, or not known on this system).
    pub open_files: Option<u64>,
    /// The open files it needs: its socket cap and its reserve, plus its own files.
    pub open_files_needed: u64,
    /// Whether it signs tickets with the development key shared through Redis (no
    /// `USHER_TICKET_KEY`).
    pub dev_ticket_key: bool,
    /// Its clock minus Redis' (`TIME`), in ms, measured at the report (`None`: unmeasured).
    pub clock_offset_ms: Option<i64>,
}

/// What a dispatcher replica reports about itself every few seconds, for the readiness
/// report of whichever replica answers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatcherFacts {
    /// Its soft limit on open files (`None`: unlimited, or not known on this system).
    pub open_files: Option<u64>,
    /// The open files it needs: its socket cap plus its own files.
    pub open_files_needed: u64,
    /// Whether it signs entry tokens with the development key (none configured).
    pub dev_signing_key: bool,
    /// Its clock minus Redis' (`TIME`), in ms (`None`: unmeasured).
    pub clock_offset_ms: Option<i64>,
}

impl Store {
    /// This process's clock minus Redis' (`TIME`), in ms, against the middle of the round
    /// trip; `None` when the round trip took over a second (too slow to say).
    pub async fn clock_offset_ms(&self) -> Result<Option<i64>> {
        let before = crate::time::now_ms();
        let redis_ms = self.redis_time_ms().await?;
        let after = crate::time::now_ms();
        let rtt = after.saturating_sub(before);
        let signed = |ms: u64| i64::try_from(ms).unwrap_or(i64::MAX);
        Ok((rtt <= 1000).then(|| signed(before + rtt / 2) - signed(redis_ms)))
    }

    /// Records dispatcher replica `id`'s facts, kept `ttl` (a replica that stops reporting
    /// leaves none behind).
    pub async fn report_dispatcher_facts(
        &self,
        id: &str,
        facts: &DispatcherFacts,
        ttl: std::time::Duration,
    ) -> Result<()> {
        let json =
            serde_json::to_string(facts).map_err(|e| protocol(format!("dispatcher facts: {e}")))?;
        let _: () = redis::cmd("SET")
            .arg(keys::dispatcher_facts(id))
            .arg(json)
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// The last facts of each replica in `ids` that reported (one `GET` each: the keys may
    /// sit on different cluster slots).
    pub async fn dispatcher_facts(
        &self,
        ids: &[String],
    ) -> Result<HashMap<String, DispatcherFacts>> {
        let mut out = HashMap::new();
        for id in ids {
            let v: Option<String> = redis::cmd("GET")
                .arg(keys::dispatcher_facts(id))
                .query_async(&mut self.c())
                .await?;
            if let Some(f) = v.and_then(|v| serde_json::from_str(&v).ok()) {
                out.insert(id.clone(), f);
            }
        }
        Ok(out)
    }

    /// Every Redis server's persistence and memory facts: one for a standalone server, one
    /// per node that answered in a cluster.
    pub async fn redis_facts(&self) -> Result<Vec<RedisFacts>> {
        // `INFO` without a section answers the default ones, `persistence` and `memory`
        // among them, in one reply per node (Redis before 7.0 takes one section at most).
        let v: Value = redis::cmd("INFO").query_async(&mut self.c()).await?;
        let mut texts = Vec::new();
        info_texts(v, &mut texts);
        if texts.is_empty() {
            return Err(protocol("INFO answered no text"));
        }
        texts
            .iter()
            .map(|t| {
                RedisFacts::parse(t).ok_or_else(|| {
                    protocol("INFO without aof_enabled, maxmemory, maxmemory_policy or used_memory")
                })
            })
            .collect()
    }

    /// Redis' clock (`TIME`), in ms since the epoch.
    pub async fn redis_time_ms(&self) -> Result<u64> {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(&mut self.c()).await?;
        Ok(secs * 1000 + micros / 1000)
    }

    /// The dispatcher replicas whose heartbeat is current at `now_ms`, sorted.
    pub async fn live_dispatchers(&self, now_ms: u64) -> Result<Vec<String>> {
        let mut live: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(keys::DISPATCHERS)
            .arg(now_ms)
            .arg("+inf")
            .query_async(&mut self.c())
            .await?;
        live.sort();
        Ok(live)
    }

    /// Whether a development signing key is stored in Redis: some dispatcher runs (or ran)
    /// without `USHER_JWT_KEY_FILE`/`USHER_JWT_KEY`, and anyone who can read Redis can mint
    /// entry tokens with it.
    pub async fn dev_signing_key_stored(&self) -> Result<bool> {
        Ok(redis::cmd("EXISTS")
            .arg(keys::DEV_JWT_KEY)
            .query_async::<u64>(&mut self.c())
            .await?
            > 0)
    }

    /// Records gateway `index`'s facts (one `HSET`, overwriting its last report).
    pub async fn report_gateway_facts(&self, index: u16, facts: &GatewayFacts) -> Result<()> {
        let json =
            serde_json::to_string(facts).map_err(|e| protocol(format!("gateway facts: {e}")))?;
        let _: () = redis::cmd("HSET")
            .arg(keys::GW_FACTS)
            .arg(index)
            .arg(json)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Every gateway's last facts, by index (a malformed entry is left out; a gateway of the
    /// previous version reports none).
    pub async fn gateway_facts(&self) -> Result<HashMap<u16, GatewayFacts>> {
        let all: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(keys::GW_FACTS)
            .query_async(&mut self.c())
            .await?;
        Ok(all
            .into_iter()
            .filter_map(|(index, v)| Some((index.parse().ok()?, serde_json::from_str(&v).ok()?)))
            .collect())
    }
}

/// The text(s) of an `INFO` reply: one bulk string from one server; a map (or array of
/// pairs) of node → text from a cluster. A report has many lines; a node's name has one.
pub(super) fn info_texts(v: Value, out: &mut Vec<String>) {
    let mut push = |t: String| {
        if t.contains('\n') {
            out.push(t);
        }
    };
    match v {
        Value::BulkString(b) => push(String::from_utf8_lossy(&b).into_owned()),
        Value::VerbatimString { text, .. } | Value::SimpleString(text) => push(text),
        Value::Map(pairs) => pairs.into_iter().for_each(|(_, v)| info_texts(v, out)),
        Value::Array(items) => items.into_iter().for_each(|v| info_texts(v, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::RedisFacts;

    #[test]
    fn info_text_parses() {
        let info = "# Persistence\r\nloading:0\r\naof_enabled:1\r\n# Memory\r\nused_memory:1048576\r\n\
                    maxmemory:4294967296\r\nmaxmemory_policy:noeviction\r\ntotal_system_memory:8589934592\r\n";
        let f = RedisFacts::parse(info).expect("parses");
        assert!(f.aof_enabled);
        assert_eq!(f.maxmemory_policy, "noeviction");
        assert_eq!(f.maxmemory, 4_294_967_296);
        assert_eq!(f.used_memory, 1_048_576);
        assert_eq!(f.total_system_memory, 8_589_934_592);
        assert_eq!(RedisFacts::parse("aof_enabled:0\r\n"), None);
    }
}
