//! Queue settings and counters: what the dispatcher's admin API reads and writes.

use std::collections::HashMap;

use redis::Value;
use serde::{Deserialize, Serialize};

use super::decode::{array, status, u};
use super::reply::SettingsStatus;
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{Result, Store};
use crate::binding::Bind;
use crate::challenge::{Challenge, DEFAULT_POW_DIFFICULTY};
use crate::ids::QueueId;
use crate::invitation::{InvitationKey, InvitationMode};
use crate::keys::{self, QueueKeys};
use crate::messages::CloseReason;
use crate::policy::Adaptive;

/// Place ids a queue's epoch leaves room for per millisecond of its creation time (see
/// [`Store::put_queue`]). Ids must stay below 10^14: the tick script's JSON (Redis' cjson)
/// writes numbers with 14 significant digits. Creation ms × 10 does until the year 2286.
pub const EPOCH_IDS_PER_MS: u64 = 10;

/// A queue's settings, as stored and as shown by the admin API.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueConfig {
    /// Places admitted per second.
    pub admit_per_second: f64,
    /// How long an admitted session stays valid (without touches, and the entry token's
    /// lifetime unless the session slides).
    pub session_ttl_seconds: u64,
    /// Whether a touch (`POST /api/session/touch`) extends the session to now + TTL.
    pub sliding_session: bool,
    /// The longest a sliding session lasts after admission, and its token's lifetime; at
    /// least the TTL (default 3 × TTL).
    pub max_session_seconds: u64,
    /// Whether browsers may join and the dispatcher admits.
    pub open: bool,
    /// How long a browser whose connection dropped keeps its place (300 s by default: phones
    /// suspend background tabs for minutes). An away place is not admitted while away.
    pub grace_seconds: u64,
    /// Admission paused: everyone keeps their place, nobody is admitted.
    pub paused: bool,
    /// A scheduled sale's opening time (RFC 3339): joins before it wait in a pre-queue, put
    /// in line in a random order at the draw.
    // Set through `Store::schedule`, not `Store::put_queue`.
    #[serde(default)]
    pub opens_at: Option<String>,
    /// Most sessions active at once (`null`: no cap). A tick admits at most the free slots.
    pub max_active: Option<u64>,
    /// Most entrants a scheduled sale's pre-queue takes (`null`: no cap); a join beyond it
    /// gets `event: pre_queue_full` and no place.
    #[serde(default)]
    pub max_entrants: Option<u64>,
    /// Whether a joiner is admitted in the join itself when nobody waits, a slot is free and
    /// the token bucket (shared with the tick) has a token.
    pub passthrough: bool,
    /// The rate follows a backend's reported load instead of `admit_per_second` (`null`: off).
    pub adaptive: Option<Adaptive>,
    /// What a join must bring to take a place: nothing, or a solved proof-of-work puzzle.
    #[serde(default)]
    pub challenge: Challenge,
    /// Leading zero bits a proof-of-work solution's hash must have (used with `pow`).
    #[serde(default = "default_pow_difficulty")]
    pub pow_difficulty: u8,
    /// What places and entry tokens are bound to: nothing (the ticket alone resumes, the
    /// token alone enters), or the browser's key (`browser_key`: docs/security.md).
    #[serde(default)]
    pub bind: Bind,
    /// Whether joins bring an invitation the shop signed (`none`, `optional`, `required`;
    /// docs/sale-day.md, "Invitations"): an invited account holds one place in the queue.
    #[serde(default)]
    pub invitations: InvitationMode,
    /// The shop's Ed25519 public keys (JWKs with a `kid`, at most 8) that sign invitations.
    #[serde(default)]
    pub invitation_keys: Vec<InvitationKey>,
    /// The operator's text while the queue is in maintenance (`null`: not in maintenance).
    /// Maintenance holds admission (`paused` is on while it lasts), keeps every place, and
    /// lets joins take a place and wait; every waiting browser hears `event: status`.
    #[serde(default)]
    pub maintenance: Option<String>,
    /// The operator's text when the sale was ended (`null`: not ended). An ended queue is
    /// closed (`open` is off, reason `ended`); reopening it clears the text.
    #[serde(default)]
    pub ended: Option<String>,
    /// Seconds an admitted session has to arrive: the booking service's first check, touch or
    /// consume of it (`GET /api/session`, `POST /api/session/touch`, `/consume`). One not
    /// checked in time ends early and frees its slot (a no-show). `null`: off (the default,
    /// and queues stored before the setting existed).
    #[serde(default)]
    pub arrival_seconds: Option<u64>,
    /// Raise the rate to make up for the measured no-show share (needs `arrival_seconds`):
    /// rate ÷ (1 − share), at most twice the rate; `max_active` still caps the sessions.
    #[serde(default)]
    pub make_up_no_shows: bool,
    // >>> inventory (src/inventory.rs: the booking service reports what is left)
    /// Items one admission may take, against the inventory the booking service reports
    /// (`PUT /api/queues/{queue}/inventory`): the queue admits only while the report, less a
    /// basket per session consumed since and per active session, is above 0. 1 ..= 1000.
    #[serde(default = "default_basket_size")]
    pub basket_size: u64,
    /// Seconds a queue whose reported inventory is gone waits with no active session before
    /// it closes with `sold_out` (abandoned carts can return items meanwhile, and a report
    /// above 0 resumes admission). 1 ..= 86400.
    #[serde(default = "default_sold_out_grace")]
    pub sold_out_grace_seconds: u64,
    /// Seconds after which an inventory report is stale: browsers are told `unknown` instead
    /// of `likely`/`unlikely` (admission still follows the report). 1 ..= 86400.
    #[serde(default = "default_stale_after")]
    pub inventory_stale_after_seconds: u64,
    // <<< inventory
    // >>> door
    /// What happens when a gateway cannot reach Redis: `hold` (nobody is admitted, everyone
    /// keeps their place: the default, and queues stored before the setting existed) or
    /// `open` (after `door_after_seconds`, each gateway lets its own browsers through at a
    /// bounded rate with a door token: docs/sale-day.md, "The open door"). Not with `bind`.
    #[serde(default)]
    pub on_outage: crate::door::OnOutage,
    /// Seconds a gateway must be without Redis before an `open` queue's door opens (1..=3600,
    /// default 30).
    #[serde(default = "default_door_after_seconds")]
    pub door_after_seconds: u64,
    // <<< door
    // >>> record
    /// Whether the queue keeps the fairness report's record (crate::record,
    /// docs/fairness-report.md): each place's join, leave, admission, ETA shown, lane and
    /// hashed client network. Off by default: a queue that does not record writes nothing.
    #[serde(default)]
    pub record: bool,
    /// Seconds the record is kept after the queue closes or `record` is turned off (3600 ..=
    /// 7776000; default 7 days). A report covers one opening: a place taken after a
    /// reopening starts a new record; times are kept to 49.7 days from its start.
    #[serde(default = "default_record_retention")]
    pub record_retention_seconds: u64,
    // <<< record
    /// The settings' version: each write adds 1 (a queue stored before versions existed is
    /// at 0). `GET` shows it as the `ETag`; a `PUT` with `If-Match` writes only at that
    /// version. Read-only: a `PUT` cannot set it.
    #[serde(default)]
    pub settings_version: u64,
}

// >>> door
fn default_door_after_seconds() -> u64 {
    crate::door::DEFAULT_DOOR_AFTER_SECONDS
}
// <<< door

fn default_record_retention() -> u64 {
    crate::record::DEFAULT_RETENTION_SECONDS
}

fn default_pow_difficulty() -> u8 {
    DEFAULT_POW_DIFFICULTY
}

// >>> inventory
fn default_basket_size() -> u64 {
    1
}

fn default_sold_out_grace() -> u64 {
    crate::inventory::DEFAULT_SOLD_OUT_GRACE_SECONDS
}

fn default_stale_after() -> u64 {
    crate::inventory::DEFAULT_STALE_AFTER_SECONDS
}
// <<< inventory

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            admit_per_second: 10.0,
            session_ttl_seconds: 600,
            sliding_session: false,
            max_session_seconds: 3 * 600,
            open: true,
            grace_seconds: 300,
            paused: false,
            opens_at: None,
            max_active: None,
            max_entrants: None,
            passthrough: true,
            adaptive: None,
            challenge: Challenge::None,
            pow_difficulty: DEFAULT_POW_DIFFICULTY,
            bind: Bind::None,
            invitations: InvitationMode::None,
            invitation_keys: Vec::new(),
            maintenance: None,
            ended: None,
            arrival_seconds: None,
            make_up_no_shows: false,
            basket_size: default_basket_size(),
            sold_out_grace_seconds: default_sold_out_grace(),
            inventory_stale_after_seconds: default_stale_after(),
            // >>> door
            on_outage: crate::door::OnOutage::Hold,
            door_after_seconds: crate::door::DEFAULT_DOOR_AFTER_SECONDS,
            // <<< door
            record: false,
            record_retention_seconds: default_record_retention(),
            settings_version: 0,
        }
    }
}

impl QueueConfig {
    /// From admission to the entry token's `exp`: the session's hard cap.
    pub fn token_ttl_seconds(&self) -> u64 {
        if self.sliding_session {
            self.max_session_seconds
        } else {
            self.session_ttl_seconds
        }
    }
}

/// What [`Store::put_queue_if`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionedWrite {
    /// Written: the settings are at this version now.
    Written(u64),
    /// Not written: the settings are at this version, not the expected one (or the queue
    /// does not exist: version 0).
    Stale(u64),
}

/// Counters shown next to a queue's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueStats {
    pub waiting: u64,
    /// Waiting places whose browser is away (disconnected, within its grace period): they
    /// keep their position and are not admitted until their browser is back.
    pub away: u64,
    pub active: u64,
    pub admitted_total: u64,
    /// Places removed without admission (browser away past the grace period, gateway gone).
    pub dropped_total: u64,
    /// Entrants in a scheduled sale's pre-queue, waiting for the draw (not yet counted in
    /// `waiting`); 0 once the draw has put them in line, and for an unscheduled queue.
    #[serde(default)]
    pub entrants: u64,
    /// The share of admitted sessions that never arrived (`arrival_seconds`), over the last
    /// 200 that arrived or not; `null` until 10 have, and while `arrival_seconds` is off and
    /// nothing was measured.
    #[serde(default)]
    pub no_show_ratio: Option<f64>,
    /// Sessions ended for not arriving in time, since the queue was created.
    #[serde(default)]
    pub no_shows_total: u64,
}

impl Store {
    /// A queue's settings; `None` when the queue was never configured.
    pub async fn queue_config(&self, q: &QueueId) -> Result<Option<QueueConfig>> {
        let k = QueueKeys::of(q);
        let v: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(&k.meta)
            .query_async(&mut self.c())
            .await?;
        if v.is_empty() {
            return Ok(None);
        }
        let d = QueueConfig::default();
        let flag = |name: &str| v.get(name).is_some_and(|s| s == "1");
        let ttl = parsed_or(&v, "session_ttl_seconds", d.session_ttl_seconds);
        Ok(Some(QueueConfig {
            admit_per_second: parsed_or(&v, "admit_per_second", d.admit_per_second),
            session_ttl_seconds: ttl,
            sliding_session: flag("sliding_session"),
            // As the scripts read it (prelude.lua's session_limits): below the TTL means unset.
            max_session_seconds: Some(parsed_or(&v, "max_session_seconds", 0))
                .filter(|&m| m >= ttl)
                .unwrap_or(3 * ttl),
            open: flag("open"),
            grace_seconds: parsed_or(&v, "grace_seconds", d.grace_seconds),
            paused: flag("paused"),
            opens_at: v
                .get("opens_at_ms")
                .and_then(|t| t.parse().ok())
                .map(crate::time::rfc3339_ms),
            max_active: v.get("max_active").and_then(|s| s.parse().ok()),
            max_entrants: v.get("max_entrants").and_then(|s| s.parse().ok()),
            // Queues stored before the field existed keep queueing everyone.
            passthrough: flag("passthrough"),
            adaptive: v.get("adaptive").and_then(|s| serde_json::from_str(s).ok()),
            challenge: v
                .get("challenge")
                .and_then(|s| s.parse().ok())
                .unwrap_or_default(),
            pow_difficulty: parsed_or(&v, "pow_difficulty", d.pow_difficulty),
            bind: v
                .get("bind")
                .and_then(|s| s.parse().ok())
                .unwrap_or_default(),
            invitations: v
                .get("invitations")
                .and_then(|s| s.parse().ok())
                .unwrap_or_default(),
            invitation_keys: v
                .get("invitation_keys")
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default(),
            maintenance: v.get("maintenance").cloned(),
            ended: v.get("ended").cloned(),
            arrival_seconds: v.get("arrival_seconds").and_then(|s| s.parse().ok()),
            make_up_no_shows: flag("make_up_no_shows"),
            basket_size: parsed_or(&v, "basket_size", d.basket_size),
            sold_out_grace_seconds: parsed_or(
                &v,
                "sold_out_grace_seconds",
                d.sold_out_grace_seconds,
            ),
            inventory_stale_after_seconds: parsed_or(
                &v,
                "inventory_stale_after_seconds",
                d.inventory_stale_after_seconds,
            ),
            // >>> door
            on_outage: v
                .get("on_outage")
                .and_then(|s| s.parse().ok())
                .unwrap_or_default(),
            door_after_seconds: parsed_or(&v, "door_after_seconds", d.door_after_seconds),
            // <<< door
            record: flag("record"),
            record_retention_seconds: parsed_or(
                &v,
                "record_retention_seconds",
                d.record_retention_seconds,
            ),
            settings_version: parsed_or(&v, "settings_version", 0),
        }))
    }

    /// Creates or updates a queue and registers it with the dispatcher, whatever version its
    /// settings are at (a `PUT` without `If-Match`, `USHER_QUEUES_FILE`).
    pub async fn put_queue(&self, q: &QueueId, cfg: &QueueConfig) -> Result<()> {
        self.put_queue_if(q, cfg, None).await.map(|_| ())
    }

    /// Raises a queue's settings version from `expected` to `expected + 1`, only if it is at
    /// `expected` (the same script as [`Store::put_queue_if`], writing no field): the admin
    /// API claims the version before a change it makes beside the settings.
    pub async fn claim_settings_version(
        &self,
        q: &QueueId,
        expected: u64,
    ) -> Result<VersionedWrite> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .put_settings
            .key(&k.meta)
            .arg(expected)
            .arg(0)
            .invoke_async(&mut self.c())
            .await?;
        settings_reply(v)
    }

    /// Creates or updates a queue, but only if its settings are still at version `expected`
    /// when given (the `If-Match` of an admin `PUT`): the check and the write are one script
    /// (`lua/put_settings.lua`), so of two editors who read the same version only one writes.
    /// Returns the settings' version after the write, or [`VersionedWrite::Stale`] (nothing
    /// written) with the version they are at.
    pub async fn put_queue_if(
        &self,
        q: &QueueId,
        cfg: &QueueConfig,
        expected: Option<u64>,
    ) -> Result<VersionedWrite> {
        let k = QueueKeys::of(q);
        let mut c = self.c();
        let flag = |b: bool| if b { "1" } else { "0" }.to_owned();
        let adaptive = cfg
            .adaptive
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| super::protocol(format!("adaptive setting: {e}")))?;
        let invitation_keys = (!cfg.invitation_keys.is_empty())
            .then(|| serde_json::to_string(&cfg.invitation_keys))
            .transpose()
            .map_err(|e| super::protocol(format!("invitation keys: {e}")))?;
        let mut set: Vec<(&str, String)> = vec![
            ("admit_per_second", cfg.admit_per_second.to_string()),
            ("session_ttl_seconds", cfg.session_ttl_seconds.to_string()),
            ("sliding_session", flag(cfg.sliding_session)),
            ("max_session_seconds", cfg.max_session_seconds.to_string()),
            ("open", flag(cfg.open)),
            ("grace_seconds", cfg.grace_seconds.to_string()),
            ("paused", flag(cfg.paused)),
            ("passthrough", flag(cfg.passthrough)),
            ("challenge", cfg.challenge.as_str().to_owned()),
            ("pow_difficulty", cfg.pow_difficulty.to_string()),
            ("bind", cfg.bind.as_str().to_owned()),
            ("invitations", cfg.invitations.as_str().to_owned()),
            ("make_up_no_shows", flag(cfg.make_up_no_shows)),
            ("basket_size", cfg.basket_size.to_string()),
            (
                "sold_out_grace_seconds",
                cfg.sold_out_grace_seconds.to_string(),
            ),
            (
                "inventory_stale_after_seconds",
                cfg.inventory_stale_after_seconds.to_string(),
            ),
            // >>> door
            ("on_outage", cfg.on_outage.as_str().to_owned()),
            ("door_after_seconds", cfg.door_after_seconds.to_string()),
            // <<< door
            ("record", flag(cfg.record)),
            (
                "record_retention_seconds",
                cfg.record_retention_seconds.to_string(),
            ),
        ];
        // Optional settings: stored when set, deleted when `null`.
        let mut delete: Vec<&str> = Vec::new();
        for (field, value) in [
            ("max_active", cfg.max_active.map(|m| m.to_string())),
            ("max_entrants", cfg.max_entrants.map(|m| m.to_string())),
            ("adaptive", adaptive),
            ("invitation_keys", invitation_keys),
            ("maintenance", cfg.maintenance.clone()),
            ("ended", cfg.ended.clone()),
            (
                "arrival_seconds",
                cfg.arrival_seconds.map(|s| s.to_string()),
            ),
        ] {
            match value {
                Some(v) => set.push((field, v)),
                None => delete.push(field),
            }
        }
        if cfg.open {
            // Reopened (or open): the reason of an earlier close no longer applies.
            delete.push("close_reason");
        }
        let mut invocation = SCRIPTS.put_settings.key(&k.meta);
        invocation
            .key(&k.record)
            .arg(expected.map(|v| v.to_string()).unwrap_or_default())
            .arg(set.len());
        for (field, value) in &set {
            invocation.arg(*field).arg(value);
        }
        for field in &delete {
            invocation.arg(*field);
        }
        let v: Value = invocation.invoke_async(&mut c).await?;
        let version = match settings_reply(v)? {
            VersionedWrite::Written(version) => version,
            stale @ VersionedWrite::Stale(_) => return Ok(stale),
        };
        // A queue configured anew (first time, or after Redis lost it) gets an epoch, and its
        // place ids start above it: the epoch is the creation time in ms × 10, above every
        // place id the queue's earlier incarnation handed out unless it handed out more than
        // 10 places per millisecond (10,000/s) on average since it was created; gateways
        // restoring places raise the counter above theirs too. So ids, tickets and token
        // `jti`s are not reused after a loss. Both stay once set.
        let epoch = crate::time::now_ms().saturating_mul(EPOCH_IDS_PER_MS);
        let _: () = redis::pipe()
            .cmd("HSETNX")
            .arg(&k.meta)
            .arg("epoch")
            .arg(epoch)
            .ignore()
            .cmd("SET")
            .arg(&k.seq)
            .arg(epoch)
            .arg("NX")
            .ignore()
            .query_async(&mut c)
            .await?;
        // The registry is another slot: its own command (a cluster refuses a pipeline that
        // spans slots).
        self.register_queues(std::slice::from_ref(q)).await?;
        Ok(VersionedWrite::Written(version))
    }

    /// Adds queues to the registry (`usher:queues`); already registered ones are unchanged.
    /// The registry is one key, so in a cluster it lives on one shard: when that shard loses
    /// its data, queues on the other shards keep their settings and places but are no longer
    /// listed, and the dispatcher lists them again with this (the queues it knew, the queues
    /// of `USHER_QUEUES_FILE`).
    pub async fn register_queues(&self, ids: &[QueueId]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let _: () = redis::cmd("SADD")
            .arg(keys::QUEUES)
            .arg(ids.iter().map(QueueId::as_str).collect::<Vec<_>>())
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// A queue's counters at `now_ms` (sessions expired by then are not counted).
    pub async fn queue_stats(&self, q: &QueueId, now_ms: u64) -> Result<QueueStats> {
        let k = QueueKeys::of(q);
        #[allow(clippy::type_complexity)]
        let (present, parked, away, active, total, dropped, entrants, arrivals): (
            u64,
            u64,
            u64,
            u64,
            Option<u64>,
            Option<u64>,
            u64,
            (Option<u64>, Option<u64>, Option<u64>),
        ) = redis::pipe()
            .cmd("ZCARD")
            .arg(&k.waiting)
            .cmd("ZCARD")
            .arg(&k.parked)
            .cmd("ZCARD")
            .arg(&k.away)
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
            .cmd("ZCARD")
            .arg(&k.pre)
            .cmd("HMGET")
            .arg(&k.meta)
            .arg(&["arrivals_n", "no_shows_n", "no_shows_total"][..])
            .query_async(&mut self.c())
            .await?;
        let (outcomes, no_shows, no_shows_total) = arrivals;
        Ok(QueueStats {
            // The line counts its away places, which wait in `parked`, and every lane's.
            waiting: present + parked + self.other_lanes_places(q).await?,
            away,
            active,
            admitted_total: total.unwrap_or(0),
            dropped_total: dropped.unwrap_or(0),
            entrants,
            no_show_ratio: crate::policy::no_show_ratio(
                outcomes.unwrap_or(0),
                no_shows.unwrap_or(0),
            ),
            no_shows_total: no_shows_total.unwrap_or(0),
        })
    }

    /// How many places a scheduled sale's pre-queue holds (0 without a sale).
    pub async fn pre_queue_len(&self, q: &QueueId) -> Result<u64> {
        let k = QueueKeys::of(q);
        Ok(redis::cmd("ZCARD")
            .arg(&k.pre)
            .query_async(&mut self.c())
            .await?)
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

    /// Closes a queue for `reason`, which browsers resuming later are told too. Returns
    /// `false` when the queue is unknown.
    pub async fn close_queue(&self, q: &QueueId, reason: CloseReason) -> Result<bool> {
        self.close_queue_at(q, reason, None).await
    }

    /// [`Store::close_queue`]; with `sold_out_at` (ms), only if the queue is still sold out
    /// past its grace then (`Store::close_sold_out`).
    pub(super) async fn close_queue_at(
        &self,
        q: &QueueId,
        reason: CloseReason,
        sold_out_at: Option<u64>,
    ) -> Result<bool> {
        let k = QueueKeys::of(q);
        let mut invocation = SCRIPTS.close.key(&k.meta);
        invocation
            .key(&k.waiting)
            .key(&k.gws)
            .key(&k.away)
            .key(&k.pre)
            .key(&k.entrants)
            .key(&k.drawing)
            .key(&k.pre_away)
            .key(&k.absent)
            .key(&k.parked)
            .lane_keys(&k)
            .arg(reason.as_str());
        if let Some(at) = sold_out_at {
            invocation.arg(at);
        }
        let v: Value = invocation.invoke_async(&mut self.c()).await?;
        Ok(!matches!(v, Value::Nil))
    }
}

/// A `put_settings.lua` reply.
fn settings_reply(v: Value) -> Result<VersionedWrite> {
    let a = array(v)?;
    let version = a.get(1).map(u).transpose()?.unwrap_or(0);
    match status(&a, SettingsStatus::from_code) {
        Some(SettingsStatus::Written) => Ok(VersionedWrite::Written(version)),
        Some(SettingsStatus::Stale) => Ok(VersionedWrite::Stale(version)),
        None => Err(super::protocol(format!("put_settings reply {a:?}"))),
    }
}

/// A meta field parsed, or `default` when it is missing or malformed.
fn parsed_or<T: std::str::FromStr>(meta: &HashMap<String, String>, name: &str, default: T) -> T {
    meta.get(name)
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
