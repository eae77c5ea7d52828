//! All Redis access. This module (with [`crate::keys`] and `src/lua/`) is the only code that
//! knows key names and scripts; the binaries call these typed operations.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Script, Value};
use serde::{Deserialize, Serialize};

use crate::ids::{PlaceId, QueueId, ServerId};
use crate::keys::{self, QueueKeys};
use crate::messages::{StreamMessage, STREAM_FIELD};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::Protocol(what.into())
}

macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/prelude.lua"),
            include_str!($file)
        ))
    };
}

struct Scripts {
    join: Script,
    resume: Script,
    status: Script,
    leave: Script,
    away: Script,
    tick: Script,
    complete: Script,
    trim_outbox: Script,
    acquire: Script,
    release: Script,
    close: Script,
    register_gateway: Script,
    heartbeat_gateway: Script,
    gateways: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    join: script!("lua/join.lua"),
    resume: script!("lua/resume.lua"),
    status: script!("lua/status.lua"),
    leave: script!("lua/leave.lua"),
    away: script!("lua/away.lua"),
    tick: script!("lua/tick.lua"),
    complete: script!("lua/complete.lua"),
    trim_outbox: script!("lua/trim_outbox.lua"),
    acquire: script!("lua/acquire.lua"),
    release: script!("lua/release.lua"),
    close: script!("lua/close.lua"),
    register_gateway: script!("lua/register_gateway.lua"),
    heartbeat_gateway: script!("lua/heartbeat_gateway.lua"),
    gateways: script!("lua/gateways.lua"),
});

/// A queue's settings, as stored and as shown by the admin API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    /// Places admitted per second.
    pub admit_per_second: f64,
    /// How long an admitted session (and its entry token) stays valid.
    pub session_ttl_seconds: u64,
    /// Whether browsers may join and the dispatcher admits.
    pub open: bool,
    /// How long a browser whose connection dropped keeps its place.
    pub grace_seconds: u64,
    /// Admission paused: everyone keeps their place, nobody is admitted.
    pub paused: bool,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            admit_per_second: 10.0,
            session_ttl_seconds: 600,
            open: true,
            grace_seconds: 30,
            paused: false,
        }
    }
}

/// Counters shown next to a queue's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    pub waiting: u64,
    pub active: u64,
    pub admitted_total: u64,
    /// Places removed without admission (browser away past the grace period, gateway gone).
    pub dropped_total: u64,
}

/// The stored state of an admitted place.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub admitted_at_ms: u64,
    pub expires_at_ms: u64,
    pub token: String,
}

impl TokenRecord {
    pub fn encode(&self) -> String {
        format!(
            "{}|{}|{}",
            self.admitted_at_ms, self.expires_at_ms, self.token
        )
    }

    fn parse(s: &str) -> Option<Self> {
        let mut it = s.splitn(3, '|');
        Some(Self {
            admitted_at_ms: it.next()?.parse().ok()?,
            expires_at_ms: it.next()?.parse().ok()?,
            token: it.next()?.to_owned(),
        })
    }
}

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
    },
    Admitted(TokenRecord),
    /// Admitted a moment ago; the token is being minted. Ask again shortly.
    AdmissionPending,
    /// The queue is closed or unknown.
    QueueClosed,
    /// The place no longer exists (left, expired, or the queue was emptied).
    Gone,
}

/// What one join call took: see [`Store::join_many`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Joined {
    /// The queue is closed or unknown: no place was taken.
    QueueClosed,
    /// Places `last - count + 1 ..= last`, one per browser in the order of the batch; the
    /// last is at position `waiting`.
    Places {
        last: u64,
        count: u64,
        waiting: u64,
        rate: f64,
    },
}

impl Joined {
    /// The state of the `i`-th browser of the batch (0-based).
    pub fn state(&self, i: usize) -> PlaceState {
        match *self {
            Joined::QueueClosed => PlaceState::QueueClosed,
            Joined::Places {
                last,
                count,
                waiting,
                rate,
            } => {
                let behind = count.saturating_sub(1).saturating_sub(i as u64);
                PlaceState::Waiting {
                    place: PlaceId(last - behind),
                    position: waiting - behind,
                    waiting,
                    rate,
                    previous_gateway: None,
                }
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum LeaveOutcome {
    /// A waiting place was removed; `gateway` held it.
    Left {
        gateway: Option<u16>,
    },
    /// An admitted session was given up.
    Released,
    NotFound,
}

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
}

/// What a tick found.
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

/// A queue lease held by one dispatcher replica: `<owner>|<fencing token>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub value: String,
    pub fence: u64,
}

/// A registered gateway process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayInfo {
    /// Index of the gateway process (unique among registered ones; one per process start).
    pub index: u16,
    /// Heartbeat expiry: the gateway counts as alive until then.
    pub alive_until_ms: u64,
    pub server_id: ServerId,
}

impl GatewayInfo {
    /// Whether its heartbeat is still valid at `now_ms`.
    pub fn is_alive(&self, now_ms: u64) -> bool {
        self.alive_until_ms > now_ms
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickOutcome {
    pub admitted: u64,
    pub waiting: u64,
    pub active: u64,
    /// The snapshot of the line (see `lua/tick.lua`); empty when [`TickOutcome::more`] is set:
    /// the tick's last call takes it.
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
    /// Indexes of gateways holding browsers of this queue.
    pub gateways: Vec<u16>,
    pub outbox_len: u64,
    pub admit_per_second: f64,
    /// Places removed without admission this tick (grace expired, gateway gone).
    pub dropped: u64,
    /// Admission budget carried to the next tick (a fraction of a place, or 0).
    pub carry: f64,
    /// The queue's session TTL.
    pub session_ttl_ms: u64,
    /// Admission is paused.
    pub paused: bool,
    /// What this tick admitted (the last `fresh_entries` entries of the outbox), for
    /// delivery without reading the outbox back.
    pub fresh: Vec<OutboxEntry>,
    pub fresh_entries: u64,
    /// This call admitted [`ADMIT_PER_CALL`] places and the tick's budget is not spent: call
    /// [`Store::tick`] again with the same arguments (the same admission time) to admit more.
    pub more: bool,
}

/// One admission waiting in a queue's outbox to be delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub place: PlaceId,
    /// Index of the gateway that held the browser at admission.
    pub gateway: u16,
    pub admitted_at_ms: u64,
    pub expires_at_ms: u64,
}

impl OutboxEntry {
    /// Parses one outbox list entry: `<admitted at>|<expires>|<place>:<gateway>,...`.
    pub fn parse_batch(s: &str) -> Option<Vec<Self>> {
        let mut it = s.splitn(3, '|');
        let admitted_at_ms = it.next()?.parse().ok()?;
        let expires_at_ms = it.next()?.parse().ok()?;
        it.next()?
            .split(',')
            .map(|item| {
                let (p, g) = item.split_once(':')?;
                Some(Self {
                    place: PlaceId(p.parse().ok()?),
                    gateway: g.parse().ok()?,
                    admitted_at_ms,
                    expires_at_ms,
                })
            })
            .collect()
    }

    fn parse_all(raw: &[String]) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        for s in raw {
            out.extend(
                Self::parse_batch(s).ok_or_else(|| protocol(format!("outbox entry {s:?}")))?,
            );
        }
        Ok(out)
    }
}

/// A message read from a gateway stream.
#[derive(Debug)]
pub struct StreamEntry {
    pub id: String,
    /// `None` when the entry could not be decoded (logged and acknowledged by the reader).
    pub message: Option<StreamMessage>,
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) => a.iter().filter_map(text).collect(),
        _ => Vec::new(),
    }
}

fn float(v: &Value) -> Option<f64> {
    text(v)?.parse().ok()
}

fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        other => Err(protocol(format!("expected an array, got {other:?}"))),
    }
}

fn u(v: &Value) -> Result<u64> {
    int(v)
        .and_then(|i| u64::try_from(i).ok())
        .ok_or_else(|| protocol(format!("expected an integer, got {v:?}")))
}

fn pairs(v: &Value) -> Result<Vec<(u64, u64)>> {
    let Value::Array(a) = v else {
        return Ok(Vec::new());
    };
    a.chunks(2)
        .map(|c| match c {
            [x, y] => Ok((u(x)?, u(y)?)),
            _ => Err(protocol("odd-length pair list")),
        })
        .collect()
}

/// Rate for ETAs: the measured one when known, else the configured one.
fn rate_of(measured: &Value, configured: &Value) -> f64 {
    float(measured)
        .filter(|r| *r > 0.0)
        .or_else(|| float(configured))
        .unwrap_or(0.0)
}

/// The connection to Redis, shared by all tasks of a process. Reconnects by itself.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

impl Store {
    /// Connects for ordinary commands (each answered within `response_timeout`).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with_timeout(url, Duration::from_secs(5)).await
    }

    /// Connects with a custom response timeout: use one longer than `BLOCK` for a connection
    /// that runs blocking `XREADGROUP`.
    pub async fn connect_with_timeout(url: &str, response_timeout: Duration) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_secs(2));
        let conn = client.get_connection_manager_with_config(cfg).await?;
        Ok(Self { conn })
    }

    fn c(&self) -> ConnectionManager {
        self.conn.clone()
    }

    pub async fn ping(&self) -> Result<()> {
        let _: String = redis::cmd("PING").query_async(&mut self.c()).await?;
        Ok(())
    }

    /// A development secret shared by every process using this Redis: the first process to
    /// ask stores `generated`; everyone gets the stored value.
    pub async fn shared_dev_secret(&self, which: DevSecret, generated: String) -> Result<String> {
        let key = match which {
            DevSecret::JwtKey => keys::DEV_JWT_KEY,
            DevSecret::TicketKey => keys::DEV_TICKET_KEY,
        };
        let mut c = self.c();
        let _: Value = redis::cmd("SET")
            .arg(key)
            .arg(&generated)
            .arg("NX")
            .query_async(&mut c)
            .await?;
        let stored: Option<String> = redis::cmd("GET").arg(key).query_async(&mut c).await?;
        stored.ok_or_else(|| protocol(format!("{key} vanished right after SET NX")))
    }

    // ---- queues (admin) ----

    pub async fn queue_config(&self, q: &QueueId) -> Result<Option<QueueConfig>> {
        let k = QueueKeys::new(q);
        let v: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&k.meta)
            .query_async(&mut self.c())
            .await?;
        if v.is_empty() {
            return Ok(None);
        }
        let d = QueueConfig::default();
        Ok(Some(QueueConfig {
            admit_per_second: v
                .get("admit_per_second")
                .and_then(|s| s.parse().ok())
                .unwrap_or(d.admit_per_second),
            session_ttl_seconds: v
                .get("session_ttl_seconds")
                .and_then(|s| s.parse().ok())
                .unwrap_or(d.session_ttl_seconds),
            open: v.get("open").map(|s| s == "1").unwrap_or(false),
            grace_seconds: v
                .get("grace_seconds")
                .and_then(|s| s.parse().ok())
                .unwrap_or(d.grace_seconds),
            paused: v.get("paused").is_some_and(|s| s == "1"),
        }))
    }

    /// Creates or updates a queue and registers it with the dispatcher.
    pub async fn put_queue(&self, q: &QueueId, cfg: &QueueConfig) -> Result<()> {
        let k = QueueKeys::new(q);
        let mut c = self.c();
        let _: () = redis::cmd("HSET")
            .arg(&k.meta)
            .arg("admit_per_second")
            .arg(cfg.admit_per_second)
            .arg("session_ttl_seconds")
            .arg(cfg.session_ttl_seconds)
            .arg("open")
            .arg(if cfg.open { "1" } else { "0" })
            .arg("grace_seconds")
            .arg(cfg.grace_seconds)
            .arg("paused")
            .arg(if cfg.paused { "1" } else { "0" })
            .query_async(&mut c)
            .await?;
        let _: () = redis::cmd("SADD")
            .arg(keys::QUEUES)
            .arg(q.as_str())
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    pub async fn queue_stats(&self, q: &QueueId, now_ms: u64) -> Result<QueueStats> {
        let k = QueueKeys::new(q);
        let (waiting, active, total, dropped): (u64, u64, Option<u64>, Option<u64>) = redis::pipe()
            .cmd("ZCARD")
            .arg(&k.waiting)
            .cmd("ZCOUNT")
            .arg(&k.active)
            .arg(now_ms)
            .arg("+inf")
            .cmd("HGET")
            .arg(&k.meta)
            .arg("admitted_total")
            .cmd("HGET")
            .arg(&k.meta)
            .arg("dropped_total")
            .query_async(&mut self.c())
            .await?;
        Ok(QueueStats {
            waiting,
            active,
            admitted_total: total.unwrap_or(0),
            dropped_total: dropped.unwrap_or(0),
        })
    }

    /// Every configured queue (open or closed), sorted.
    pub async fn queue_ids(&self) -> Result<Vec<QueueId>> {
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys::QUEUES)
            .query_async(&mut self.c())
            .await?;
        let mut ids: Vec<QueueId> = names
            .into_iter()
            .filter_map(|n| QueueId::new(n).ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Closes a queue. Returns `false` when the queue is unknown.
    pub async fn close_queue(&self, q: &QueueId) -> Result<bool> {
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .close
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.gws)
            .key(&k.away)
            .invoke_async(&mut self.c())
            .await?;
        Ok(!matches!(v, Value::Nil))
    }

    // ---- gateways ----

    /// Registers a gateway process; returns its new index.
    pub async fn register_gateway(&self, id: &ServerId, now_ms: u64, ttl: Duration) -> Result<u16> {
        let v: Value = SCRIPTS
            .register_gateway
            .key(keys::GW_LIVE)
            .key(keys::GW_IDS)
            .key(keys::GW_NEXT)
            .arg(id.as_str())
            .arg(now_ms)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        text(&v)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| protocol(format!("gateway index {v:?}")))
    }

    /// Keeps a gateway's registry entry alive for `ttl`.
    pub async fn heartbeat_gateway(
        &self,
        index: u16,
        id: &ServerId,
        now_ms: u64,
        ttl: Duration,
    ) -> Result<()> {
        let _: Value = SCRIPTS
            .heartbeat_gateway
            .key(keys::GW_LIVE)
            .key(keys::GW_IDS)
            .key(keys::GW_NEXT)
            .arg(index)
            .arg(id.as_str())
            .arg(now_ms)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Marks a gateway process as gone (on shutdown): its browsers that do not resume elsewhere
    /// within the grace period are dropped.
    pub async fn deregister_gateway(&self, index: u16, now_ms: u64) -> Result<()> {
        let _: () = redis::cmd("ZADD")
            .arg(keys::GW_LIVE)
            .arg("XX")
            .arg(now_ms)
            .arg(index)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Every registered gateway process, live or dead within the last day.
    pub async fn gateways(&self, now_ms: u64) -> Result<Vec<GatewayInfo>> {
        let v: Value = SCRIPTS
            .gateways
            .key(keys::GW_LIVE)
            .key(keys::GW_IDS)
            .arg(now_ms)
            .arg(GATEWAY_MEMORY_MS)
            .invoke_async(&mut self.c())
            .await?;
        Ok(array(v)?
            .chunks(3)
            .filter_map(|c| match c {
                [i, t, id] => Some(GatewayInfo {
                    index: text(i)?.parse().ok()?,
                    alive_until_ms: float(t)? as u64,
                    server_id: ServerId::new(text(id)?).ok()?,
                }),
                _ => None,
            })
            .collect())
    }

    /// Live gateways by index.
    pub async fn live_gateways(&self, now_ms: u64) -> Result<HashMap<u16, ServerId>> {
        Ok(self
            .gateways(now_ms)
            .await?
            .into_iter()
            .filter(|g| g.is_alive(now_ms))
            .map(|g| (g.index, g.server_id))
            .collect())
    }

    /// Creates the gateway's stream and consumer group if missing, and sets the stream to
    /// expire after `ttl` unless touched again (so a dead gateway's stream disappears).
    pub async fn ensure_stream(&self, id: &ServerId, ttl: Duration) -> Result<()> {
        let key = keys::gateway_stream(id);
        let mut c = self.c();
        let r: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg(keys::STREAM_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut c)
            .await;
        match r {
            Ok(()) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(e.into()),
        }
        self.touch_stream(id, ttl).await
    }

    async fn touch_stream(&self, id: &ServerId, ttl: Duration) -> Result<()> {
        let _: () = redis::cmd("PEXPIRE")
            .arg(keys::gateway_stream(id))
            .arg(ttl.as_millis() as u64)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Reads new entries of the gateway's own stream (blocking up to `block`). Returns
    /// `Ok(None)` when the stream or group is missing (expired, or Redis restarted empty):
    /// call [`Store::ensure_stream`] and read again.
    pub async fn read_stream(
        &self,
        id: &ServerId,
        count: usize,
        block: Duration,
    ) -> Result<Option<Vec<StreamEntry>>> {
        let key = keys::gateway_stream(id);
        let r: redis::RedisResult<Value> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(keys::STREAM_GROUP)
            .arg(id.as_str())
            .arg("COUNT")
            .arg(count)
            .arg("BLOCK")
            .arg(block.as_millis() as u64)
            .arg("STREAMS")
            .arg(&key)
            .arg(">")
            .query_async(&mut self.c())
            .await;
        let v = match r {
            Ok(v) => v,
            Err(e) if e.code() == Some("NOGROUP") => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        // RESP2: [[key, [[id, [field, value, ...]], ...]]]; RESP3 may use a map.
        let streams: Vec<Value> = match v {
            Value::Map(m) => m.into_iter().map(|(_, v)| v).collect(),
            Value::Array(a) => a
                .into_iter()
                .filter_map(|s| array(s).ok()?.into_iter().nth(1))
                .collect(),
            Value::Nil => Vec::new(),
            other => return Err(protocol(format!("XREADGROUP reply {other:?}"))),
        };
        for entries in streams {
            for e in array(entries)? {
                let mut e = array(e)?.into_iter();
                let id = e
                    .next()
                    .as_ref()
                    .and_then(text)
                    .ok_or_else(|| protocol("entry id"))?;
                let fields = e.next().map(array).transpose()?.unwrap_or_default();
                let message = fields
                    .chunks(2)
                    .find(|c| c.first().and_then(text).as_deref() == Some(STREAM_FIELD))
                    .and_then(|c| c.get(1))
                    .and_then(|v| match v {
                        Value::BulkString(b) => serde_json::from_slice(b).ok(),
                        _ => None,
                    });
                out.push(StreamEntry { id, message });
            }
        }
        Ok(Some(out))
    }

    /// Acknowledges and deletes processed entries of the gateway's stream.
    pub async fn ack(&self, id: &ServerId, entry_ids: &[String]) -> Result<()> {
        if entry_ids.is_empty() {
            return Ok(());
        }
        let key = keys::gateway_stream(id);
        let _: () = redis::pipe()
            .cmd("XACK")
            .arg(&key)
            .arg(keys::STREAM_GROUP)
            .arg(entry_ids)
            .ignore()
            .cmd("XDEL")
            .arg(&key)
            .arg(entry_ids)
            .ignore()
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Appends messages to gateways' streams (pipelined; `MAXLEN ~` bounds each stream). A
    /// stream that no longer exists (its gateway is gone) is not recreated.
    pub async fn send(&self, batches: &[(ServerId, Vec<StreamMessage>)]) -> Result<()> {
        let mut p = redis::pipe();
        let mut any = false;
        for (gw, msgs) in batches {
            let key = keys::gateway_stream(gw);
            for m in msgs {
                let json = serde_json::to_vec(m).map_err(|e| protocol(e.to_string()))?;
                p.cmd("XADD")
                    .arg(&key)
                    .arg("NOMKSTREAM")
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(STREAM_MAXLEN)
                    .arg("*")
                    .arg(STREAM_FIELD)
                    .arg(json)
                    .ignore();
                any = true;
            }
        }
        if any {
            let _: () = p.query_async(&mut self.c()).await?;
        }
        Ok(())
    }

    // ---- places (gateway) ----

    /// Takes a new place at the tail of `q` for a browser held by gateway `gw`.
    pub async fn join(&self, q: &QueueId, gw: u16, now_ms: u64) -> Result<PlaceState> {
        Ok(self.join_many(q, gw, now_ms, 1).await?.state(0))
    }

    /// Takes `n` new places (1..=[`JOIN_BATCH_MAX`]) at the tail of `q` in one atomic call, for
    /// `n` browsers held by gateway `gw`, in the order given: see [`Joined::state`].
    pub async fn join_many(&self, q: &QueueId, gw: u16, now_ms: u64, n: usize) -> Result<Joined> {
        if n == 0 || n > JOIN_BATCH_MAX {
            return Err(protocol(format!(
                "a join batch takes 1 to {JOIN_BATCH_MAX} places, not {n}"
            )));
        }
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .join
            .key(&k.meta)
            .key(&k.seq)
            .key(&k.waiting)
            .key(&k.gws)
            .arg(gw)
            .arg(now_ms)
            .arg(GWS_TTL_MS)
            .arg(n)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match a.first().and_then(int) {
            Some(0) => Ok(Joined::QueueClosed),
            Some(1) if a.len() >= 5 => {
                let last = u(&a[1])?;
                let waiting = u(&a[2])?;
                let n = n as u64;
                if last < n || waiting < n {
                    return Err(protocol(format!("join reply {a:?} for {n} places")));
                }
                Ok(Joined::Places {
                    last,
                    count: n,
                    waiting,
                    rate: rate_of(&a[3], &a[4]),
                })
            }
            _ => Err(protocol(format!("join reply {a:?}"))),
        }
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
            .arg(place.0)
            .arg(gw)
            .arg(now_ms)
            .arg(GWS_TTL_MS)
            .invoke_async(&mut self.c())
            .await?;
        Self::place_state(place, array(v)?, true)
    }

    /// The state of `place` without changing anything.
    pub async fn status(&self, q: &QueueId, place: PlaceId, now_ms: u64) -> Result<PlaceState> {
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .status
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .arg(place.0)
            .arg(now_ms)
            .invoke_async(&mut self.c())
            .await?;
        Self::place_state(place, array(v)?, false)
    }

    fn place_state(place: PlaceId, a: Vec<Value>, with_member: bool) -> Result<PlaceState> {
        let bad = || protocol(format!("place reply {a:?}"));
        match a.first().and_then(int) {
            Some(0) => Ok(PlaceState::QueueClosed),
            Some(4) => Ok(PlaceState::Gone),
            Some(3) => Ok(PlaceState::AdmissionPending),
            Some(2) => a
                .get(1)
                .and_then(text)
                .and_then(|s| TokenRecord::parse(&s))
                .map(PlaceState::Admitted)
                .ok_or_else(bad),
            Some(1) => {
                let (rate_at, before) = if with_member {
                    (4, a.get(3).and_then(text).and_then(|t| t.parse().ok()))
                } else {
                    (3, None)
                };
                if a.len() < rate_at + 2 {
                    return Err(bad());
                }
                Ok(PlaceState::Waiting {
                    place,
                    position: u(&a[1])?,
                    waiting: u(&a[2])?,
                    rate: rate_of(&a[rate_at], &a[rate_at + 1]),
                    previous_gateway: before,
                })
            }
            _ => Err(bad()),
        }
    }

    /// The browser leaves the line (or gives up its admitted session).
    pub async fn leave(&self, q: &QueueId, place: PlaceId) -> Result<LeaveOutcome> {
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .leave
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.away)
            .arg(place.0)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match a.first().and_then(int) {
            Some(1) => Ok(LeaveOutcome::Left {
                gateway: a.get(1).and_then(text).and_then(|t| t.parse().ok()),
            }),
            Some(2) => Ok(LeaveOutcome::Released),
            Some(0) => Ok(LeaveOutcome::NotFound),
            _ => Err(protocol(format!("leave reply {a:?}"))),
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
            inv.key(&k.waiting).key(&k.away).arg(gw).arg(now_ms);
            for p in chunk {
                inv.arg(p.0);
            }
            let m: u64 = inv.invoke_async(&mut self.c()).await?;
            n += m;
        }
        Ok(n)
    }

    /// Tells the dispatcher that gateway `gw` still holds browsers of these queues; returns
    /// whether each queue is still open.
    pub async fn refresh_interest(
        &self,
        queues: &[QueueId],
        gw: u16,
        now_ms: u64,
    ) -> Result<Vec<bool>> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        let mut p = redis::pipe();
        for q in queues {
            let k = QueueKeys::new(q);
            p.cmd("ZADD")
                .arg(&k.gws)
                .arg(now_ms + GWS_TTL_MS)
                .arg(gw)
                .ignore()
                .cmd("HGET")
                .arg(&k.meta)
                .arg("open");
        }
        let open: Vec<Option<String>> = p.query_async(&mut self.c()).await?;
        Ok(open
            .into_iter()
            .map(|o| o.as_deref() == Some("1"))
            .collect())
    }

    // ---- dispatcher ----

    /// Acquires (or renews) the lease on a queue for `owner`. `None` when another replica
    /// holds it.
    pub async fn acquire_lease(
        &self,
        q: &QueueId,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let k = QueueKeys::new(q);
        let fence: u64 = SCRIPTS
            .acquire
            .key(&k.lease)
            .key(&k.meta)
            .arg(owner)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        Ok((fence > 0).then(|| Lease {
            value: format!("{owner}|{fence}"),
            fence,
        }))
    }

    /// Gives a lease up (if it is still ours).
    pub async fn release_lease(&self, q: &QueueId, lease: &Lease) -> Result<()> {
        let k = QueueKeys::new(q);
        let _: i64 = SCRIPTS
            .release
            .key(&k.lease)
            .arg(&lease.value)
            .invoke_async(&mut self.c())
            .await?;
        Ok(())
    }

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
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match a.first().and_then(int) {
            Some(-1) => Ok(Tick::LeaseLost),
            Some(0) => Ok(Tick::Closed {
                outbox_len: a.get(1).map(u).transpose()?.unwrap_or(0),
            }),
            Some(1) if a.len() >= 15 => Ok(Tick::Ticked(TickOutcome {
                admitted: u(&a[1])?,
                waiting: u(&a[2])?,
                active: u(&a[3])?,
                runs: pairs(&a[4])?,
                samples: pairs(&a[5])?,
                gateways: match &a[6] {
                    Value::Array(g) => g.iter().filter_map(|v| text(v)?.parse().ok()).collect(),
                    _ => Vec::new(),
                },
                outbox_len: u(&a[7])?,
                admit_per_second: float(&a[8]).unwrap_or(0.0),
                dropped: u(&a[9])?,
                carry: float(&a[10]).unwrap_or(0.0),
                session_ttl_ms: u(&a[11])?,
                paused: int(&a[12]) == Some(1),
                fresh: OutboxEntry::parse_all(&strings(&a[13]))?,
                fresh_entries: strings(&a[13]).len() as u64,
                more: int(&a[14]) == Some(1),
            })),
            _ => Err(protocol(format!("tick reply {a:?}"))),
        }
    }

    /// The first `n` places in line: place id and the index of the gateway holding each.
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

    /// The undelivered admissions in the oldest `max` outbox entries of a queue, and how many
    /// entries that was (each holds up to 1,000 admissions).
    pub async fn outbox(&self, q: &QueueId, max: usize) -> Result<(u64, Vec<OutboxEntry>)> {
        let k = QueueKeys::new(q);
        let raw: Vec<String> = redis::cmd("LRANGE")
            .arg(&k.outbox)
            .arg(0)
            .arg(max.saturating_sub(1))
            .query_async(&mut self.c())
            .await?;
        Ok((raw.len() as u64, OutboxEntry::parse_all(&raw)?))
    }

    /// Stores minted tokens, only for sessions that still exist; returns those places.
    /// `None` when the lease was lost (nothing stored).
    pub async fn store_tokens(
        &self,
        q: &QueueId,
        lease: &Lease,
        records: &[(PlaceId, TokenRecord)],
    ) -> Result<Option<HashSet<PlaceId>>> {
        let k = QueueKeys::new(q);
        let mut stored = HashSet::with_capacity(records.len());
        // In calls of 500: each blocks Redis for a few milliseconds only, so gateways and
        // browsers are served in between.
        for chunk in records.chunks(500) {
            let mut inv = SCRIPTS.complete.key(&k.tokens);
            inv.key(&k.lease).key(&k.active).arg(&lease.value);
            for (p, r) in chunk {
                inv.arg(p.0).arg(r.encode());
            }
            let v: Value = inv.invoke_async(&mut self.c()).await?;
            match v {
                Value::Nil => return Ok(None),
                v => {
                    for p in array(v)? {
                        stored.insert(PlaceId(u(&p)?));
                    }
                }
            }
        }
        Ok(Some(stored))
    }

    /// Drops the first `n` outbox entries (after they were delivered). `false` when the lease
    /// was lost (nothing dropped).
    pub async fn trim_outbox(&self, q: &QueueId, lease: &Lease, n: u64) -> Result<bool> {
        let k = QueueKeys::new(q);
        let r: i64 = SCRIPTS
            .trim_outbox
            .key(&k.outbox)
            .key(&k.lease)
            .arg(&lease.value)
            .arg(n)
            .invoke_async(&mut self.c())
            .await?;
        Ok(r == 1)
    }

    /// Registers (or heartbeats) a dispatcher replica; returns the live replicas, sorted.
    pub async fn heartbeat_dispatcher(
        &self,
        id: &str,
        now_ms: u64,
        ttl: Duration,
    ) -> Result<Vec<String>> {
        let (_, _, live): ((), (), Vec<String>) = redis::pipe()
            .atomic()
            .cmd("ZADD")
            .arg(keys::DISPATCHERS)
            .arg(now_ms + ttl.as_millis() as u64)
            .arg(id)
            .cmd("ZREMRANGEBYSCORE")
            .arg(keys::DISPATCHERS)
            .arg("-inf")
            .arg(format!("({now_ms}"))
            .cmd("ZRANGEBYSCORE")
            .arg(keys::DISPATCHERS)
            .arg(now_ms)
            .arg("+inf")
            .query_async(&mut self.c())
            .await?;
        let mut live = live;
        live.sort();
        Ok(live)
    }

    /// Removes a dispatcher replica from the registry (on shutdown).
    pub async fn deregister_dispatcher(&self, id: &str) -> Result<()> {
        let _: () = redis::cmd("ZREM")
            .arg(keys::DISPATCHERS)
            .arg(id)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// `INFO` section as text (tests and benchmarks read commandstats and memory from it).
    pub async fn info(&self, section: &str) -> Result<String> {
        Ok(redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.c())
            .await?)
    }

    /// `MEMORY USAGE` of a queue's waiting set, with `samples` 0 (exact).
    pub async fn waiting_memory(&self, q: &QueueId) -> Result<u64> {
        let v: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(QueueKeys::new(q).waiting)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut self.c())
            .await?;
        Ok(v.unwrap_or(0))
    }
}

/// Which development secret to share.
#[derive(Debug, Clone, Copy)]
pub enum DevSecret {
    JwtKey,
    TicketKey,
}

/// Gateway interest in a queue lapses after this long without a join or refresh.
pub const GWS_TTL_MS: u64 = 30_000;
/// Most places one join call takes (a gateway's batch of joins for one queue).
pub const JOIN_BATCH_MAX: usize = 500;
/// Dead gateways are remembered this long (so their orphaned places can be recognised).
const GATEWAY_MEMORY_MS: u64 = 86_400_000;
/// Each gateway stream is capped (approximately) at this many entries.
pub const STREAM_MAXLEN: u64 = 100_000;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbox_entries_parse() {
        let e = OutboxEntry::parse_batch("1000|2000|17:2,18:3").expect("parses");
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].place, PlaceId(17));
        assert_eq!(e[0].gateway, 2);
        assert_eq!(e[1].gateway, 3);
        assert_eq!((e[1].admitted_at_ms, e[1].expires_at_ms), (1000, 2000));
        assert!(OutboxEntry::parse_batch("1000|2000|17:x").is_none());
        assert!(OutboxEntry::parse_batch("17|2").is_none());
    }

    #[test]
    fn token_records_round_trip() {
        let r = TokenRecord {
            admitted_at_ms: 5,
            expires_at_ms: 9,
            token: "a.b.c".into(),
        };
        assert_eq!(TokenRecord::parse(&r.encode()), Some(r));
    }
}
