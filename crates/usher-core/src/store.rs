//! All Redis access. This module (with [`crate::keys`] and `src/lua/`) is the only code that
//! knows key names and scripts; the binaries call these typed operations.

use std::collections::HashMap;
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

struct Scripts {
    join: Script,
    resume: Script,
    status: Script,
    leave: Script,
    tick: Script,
    complete: Script,
    close: Script,
    register_gateway: Script,
    live_gateways: Script,
}

static SCRIPTS: std::sync::LazyLock<Scripts> = std::sync::LazyLock::new(|| Scripts {
    join: Script::new(include_str!("lua/join.lua")),
    resume: Script::new(include_str!("lua/resume.lua")),
    status: Script::new(include_str!("lua/status.lua")),
    leave: Script::new(include_str!("lua/leave.lua")),
    tick: Script::new(include_str!("lua/tick.lua")),
    complete: Script::new(include_str!("lua/complete.lua")),
    close: Script::new(include_str!("lua/close.lua")),
    register_gateway: Script::new(include_str!("lua/register_gateway.lua")),
    live_gateways: Script::new(include_str!("lua/live_gateways.lua")),
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
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            admit_per_second: 10.0,
            session_ttl_seconds: 600,
            open: true,
        }
    }
}

/// Counters shown next to a queue's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueStats {
    pub waiting: u64,
    pub active: u64,
    pub admitted_total: u64,
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
        /// The waiting-set member before this call (resume only): tells which gateway held it.
        previous_member: Option<String>,
    },
    Admitted(TokenRecord),
    /// Admitted a moment ago; the token is being minted. Ask again shortly.
    AdmissionPending,
    /// The queue is closed or unknown.
    QueueClosed,
    /// The place no longer exists (left, expired, or the queue was emptied).
    Gone,
}

#[derive(Debug, Clone, PartialEq)]
pub enum LeaveOutcome {
    /// A waiting place was removed; `member` tells which gateway held it.
    Left {
        member: String,
    },
    /// An admitted session was given up.
    Released,
    NotFound,
}

/// Input of one dispatcher tick for one queue.
#[derive(Debug, Clone)]
pub struct TickArgs {
    pub now_ms: u64,
    /// Time to budget for on a queue's first tick (one tick).
    pub first_elapsed_ms: u64,
    /// Longest gap between ticks that is budgeted for (bounds the burst after a stall).
    pub max_elapsed_ms: u64,
    /// Places published exactly in each state snapshot (at least 1).
    pub exact: u64,
    pub max_position_error: f64,
    pub store_rate: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickOutcome {
    pub admitted: u64,
    pub waiting: u64,
    pub active: u64,
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
    /// Indexes of gateways holding browsers of this queue.
    pub gateways: Vec<String>,
    pub outbox_len: u64,
    pub admit_per_second: f64,
}

/// One admission waiting in a queue's outbox to be delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub place: PlaceId,
    /// Index of the gateway that held the browser at admission.
    pub gateway: String,
    pub admitted_at_ms: u64,
    pub expires_at_ms: u64,
}

impl OutboxEntry {
    fn parse(s: &str) -> Option<Self> {
        let mut it = s.split('|');
        let place = PlaceId(it.next()?.parse().ok()?);
        let (_, gw) = keys::parse_member(it.next()?)?;
        Some(Self {
            place,
            gateway: gw.to_owned(),
            admitted_at_ms: it.next()?.parse().ok()?,
            expires_at_ms: it.next()?.parse().ok()?,
        })
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
        let (waiting, active, total): (u64, u64, Option<u64>) = redis::pipe()
            .cmd("ZCARD")
            .arg(&k.waiting)
            .cmd("ZCOUNT")
            .arg(&k.active)
            .arg(now_ms)
            .arg("+inf")
            .cmd("HGET")
            .arg(&k.meta)
            .arg("admitted_total")
            .query_async(&mut self.c())
            .await?;
        Ok(QueueStats {
            waiting,
            active,
            admitted_total: total.unwrap_or(0),
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

    /// Closes a queue. Returns the indexes of gateways that hold its browsers, or `None` when
    /// the queue is unknown.
    pub async fn close_queue(&self, q: &QueueId, now_ms: u64) -> Result<Option<Vec<String>>> {
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .close
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.gws)
            .arg(now_ms)
            .invoke_async(&mut self.c())
            .await?;
        match v {
            Value::Nil => Ok(None),
            v => Ok(Some(array(v)?.iter().filter_map(text).collect())),
        }
    }

    // ---- gateways ----

    /// Registers (or heartbeats) a gateway; returns its index.
    pub async fn register_gateway(
        &self,
        id: &ServerId,
        now_ms: u64,
        ttl: Duration,
    ) -> Result<String> {
        let v: Value = SCRIPTS
            .register_gateway
            .key(keys::GW_LIVE)
            .key(keys::GW_INDEX)
            .key(keys::GW_IDS)
            .key(keys::GW_NEXT)
            .arg(id.as_str())
            .arg(now_ms)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        text(&v).ok_or_else(|| protocol("gateway index"))
    }

    /// Removes a gateway from the live set (on shutdown).
    pub async fn deregister_gateway(&self, id: &ServerId) -> Result<()> {
        let _: () = redis::cmd("ZREM")
            .arg(keys::GW_LIVE)
            .arg(id.as_str())
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Live gateways by index.
    pub async fn live_gateways(&self, now_ms: u64) -> Result<HashMap<String, ServerId>> {
        let v: Value = SCRIPTS
            .live_gateways
            .key(keys::GW_LIVE)
            .key(keys::GW_INDEX)
            .arg(now_ms)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        Ok(a.chunks(2)
            .filter_map(|c| match c {
                [i, id] => Some((text(i)?, ServerId::new(text(id)?).ok()?)),
                _ => None,
            })
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
            .arg("$")
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

    pub async fn touch_stream(&self, id: &ServerId, ttl: Duration) -> Result<()> {
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

    /// Appends messages to gateways' streams (pipelined; `MAXLEN ~` bounds each stream).
    pub async fn send(&self, batches: &[(ServerId, Vec<StreamMessage>)]) -> Result<()> {
        let mut p = redis::pipe();
        let mut any = false;
        for (gw, msgs) in batches {
            let key = keys::gateway_stream(gw);
            for m in msgs {
                let json = serde_json::to_vec(m).map_err(|e| protocol(e.to_string()))?;
                p.cmd("XADD")
                    .arg(&key)
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
    pub async fn join(&self, q: &QueueId, gw: &str, now_ms: u64) -> Result<PlaceState> {
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
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match a.first().and_then(int) {
            Some(0) => Ok(PlaceState::QueueClosed),
            Some(1) if a.len() >= 5 => {
                let place = PlaceId(u(&a[1])?);
                let waiting = u(&a[2])?;
                Ok(PlaceState::Waiting {
                    place,
                    position: waiting,
                    waiting,
                    rate: rate_of(&a[3], &a[4]),
                    previous_member: None,
                })
            }
            _ => Err(protocol(format!("join reply {a:?}"))),
        }
    }

    /// Resumes `place` for a browser now held by gateway `gw` (moving the place's routing to
    /// it when another gateway held it).
    pub async fn resume(
        &self,
        q: &QueueId,
        place: PlaceId,
        gw: &str,
        now_ms: u64,
    ) -> Result<PlaceState> {
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .resume
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.gws)
            .arg(place.0)
            .arg(keys::member(place.0, gw))
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
                let (rate_at, member) = if with_member {
                    (4, a.get(3).and_then(text))
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
                    previous_member: member,
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
            .arg(place.0)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match a.first().and_then(int) {
            Some(1) => Ok(LeaveOutcome::Left {
                member: a.get(1).and_then(text).unwrap_or_default(),
            }),
            Some(2) => Ok(LeaveOutcome::Released),
            Some(0) => Ok(LeaveOutcome::NotFound),
            _ => Err(protocol(format!("leave reply {a:?}"))),
        }
    }

    /// Removes `place` if gateway `gw` still holds it (a browser disconnected). A place that a
    /// newer connection moved to another gateway has another member and is left alone.
    pub async fn release_if_held(&self, q: &QueueId, place: PlaceId, gw: &str) -> Result<bool> {
        let k = QueueKeys::new(q);
        let n: i64 = redis::cmd("ZREM")
            .arg(&k.waiting)
            .arg(keys::member(place.0, gw))
            .query_async(&mut self.c())
            .await?;
        Ok(n == 1)
    }

    /// Tells the dispatcher that gateway `gw` still holds browsers of these queues.
    pub async fn refresh_interest(&self, queues: &[QueueId], gw: &str, now_ms: u64) -> Result<()> {
        if queues.is_empty() {
            return Ok(());
        }
        let mut p = redis::pipe();
        for q in queues {
            p.cmd("ZADD")
                .arg(QueueKeys::new(q).gws)
                .arg(now_ms + GWS_TTL_MS)
                .arg(gw)
                .ignore();
        }
        let _: () = p.query_async(&mut self.c()).await?;
        Ok(())
    }

    // ---- dispatcher ----

    /// One tick for one queue (see `lua/tick.lua`). `None` when the queue is closed.
    pub async fn tick(&self, q: &QueueId, t: &TickArgs) -> Result<Option<TickOutcome>> {
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .tick
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.active)
            .key(&k.tokens)
            .key(&k.outbox)
            .key(&k.gws)
            .arg(t.now_ms)
            .arg(t.first_elapsed_ms)
            .arg(t.max_elapsed_ms)
            .arg(t.exact.max(1))
            .arg(t.max_position_error)
            .arg(t.store_rate.map(|r| format!("{r:.3}")).unwrap_or_default())
            .arg(PRUNE_LIMIT)
            .arg(COARSE_SAMPLE_STEP)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match a.first().and_then(int) {
            Some(0) => Ok(None),
            Some(1) if a.len() >= 9 => Ok(Some(TickOutcome {
                admitted: u(&a[1])?,
                waiting: u(&a[2])?,
                active: u(&a[3])?,
                runs: pairs(&a[4])?,
                samples: pairs(&a[5])?,
                gateways: match &a[6] {
                    Value::Array(g) => g.iter().filter_map(text).collect(),
                    _ => Vec::new(),
                },
                outbox_len: u(&a[7])?,
                admit_per_second: float(&a[8]).unwrap_or(0.0),
            })),
            _ => Err(protocol(format!("tick reply {a:?}"))),
        }
    }

    /// The oldest `max` undelivered admissions of a queue.
    pub async fn outbox(&self, q: &QueueId, max: usize) -> Result<Vec<OutboxEntry>> {
        let k = QueueKeys::new(q);
        let raw: Vec<String> = redis::cmd("LRANGE")
            .arg(&k.outbox)
            .arg(0)
            .arg(max.saturating_sub(1))
            .query_async(&mut self.c())
            .await?;
        raw.iter()
            .map(|s| OutboxEntry::parse(s).ok_or_else(|| protocol(format!("outbox entry {s:?}"))))
            .collect()
    }

    /// Stores minted tokens (only for sessions that still exist).
    pub async fn store_tokens(
        &self,
        q: &QueueId,
        records: &[(PlaceId, TokenRecord)],
    ) -> Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let k = QueueKeys::new(q);
        let mut inv = SCRIPTS.complete.key(&k.tokens);
        for (p, r) in records {
            inv.arg(p.0).arg(r.encode());
        }
        let _: i64 = inv.invoke_async(&mut self.c()).await?;
        Ok(())
    }

    /// Drops the first `n` outbox entries (after they were delivered).
    pub async fn trim_outbox(&self, q: &QueueId, n: usize) -> Result<()> {
        let k = QueueKeys::new(q);
        let _: () = redis::cmd("LTRIM")
            .arg(&k.outbox)
            .arg(n)
            .arg(-1)
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
/// Each gateway stream is capped (approximately) at this many entries.
pub const STREAM_MAXLEN: u64 = 100_000;
/// Spacing of the first, coarse position samples (10% apart); refined where needed.
const COARSE_SAMPLE_STEP: f64 = 0.1;
/// Expired sessions removed per tick and queue at most.
const PRUNE_LIMIT: u64 = 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbox_entries_parse() {
        let e = OutboxEntry::parse("17|h@2|1000|2000").expect("parses");
        assert_eq!(e.place, PlaceId(17));
        assert_eq!(e.gateway, "2");
        assert_eq!((e.admitted_at_ms, e.expires_at_ms), (1000, 2000));
        assert!(OutboxEntry::parse("17|h|1000|2000").is_none());
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
