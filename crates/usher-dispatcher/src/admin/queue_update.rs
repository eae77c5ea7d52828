//! `PUT /admin/queues/{queue}`'s body, [`QueueUpdate`], and [`configured`]: the checks it
//! must pass and the queue settings it makes, shared with `USHER_QUEUES_FILE`.

use serde::Deserialize;
use usher_core::binding::Bind;
use usher_core::challenge::{check_difficulty, Challenge};
use usher_core::invitation::{InvitationKey, InvitationMode};
use usher_core::lanes::{Lane, LaneName};
use usher_core::page_settings::PageSettings;
use usher_core::policy::Adaptive;
use usher_core::store::QueueConfig;
use usher_http::ApiError;

/// Longest accepted session TTL (one day).
const MAX_SESSION_TTL: u64 = 86_400;
/// Longest accepted `max_session_seconds`: three times the longest TTL.
const MAX_MAX_SESSION: u64 = 3 * MAX_SESSION_TTL;
/// Shortest accepted grace period for dropped connections: with 0 a reload, or a phone
/// switching networks, would lose its place at the next sweep.
const MIN_GRACE: u64 = 1;
/// Longest accepted grace period for dropped connections (one hour).
const MAX_GRACE: u64 = 3600;
/// Highest accepted admission rate.
const MAX_ADMIT_PER_SECOND: f64 = 1_000_000.0;
/// `PUT /admin/queues/{queue}` body: omitted fields keep their current value (or the default
/// for a new queue).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueUpdate {
    pub admit_per_second: Option<f64>,
    pub session_ttl_seconds: Option<u64>,
    pub sliding_session: Option<bool>,
    pub max_session_seconds: Option<u64>,
    pub open: Option<bool>,
    pub grace_seconds: Option<u64>,
    pub paused: Option<bool>,
    /// Absent: unchanged; `null`: unscheduled; a time (RFC 3339): the sale opens then.
    // `super::sale` applies it.
    #[serde(default, deserialize_with = "present")]
    pub opens_at: Option<Option<String>>,
    /// Absent: unchanged; `null`: no beacon; `{"drand_round": N}`: a pending sale's order
    /// mixes in that round's randomness.
    #[serde(default, deserialize_with = "present")]
    pub draw_beacon: Option<Option<super::sale::BeaconSpec>>,
    /// The seed a new sale (`opens_at`) commits to, instead of a generated one: 64 hex
    /// characters. Secret until the draw: never shown, logged or audited.
    // `super::sale` checks it; its `Debug` is redacted.
    #[serde(default, deserialize_with = "super::sale::seed_hex")]
    #[schema(value_type = Option<String>, pattern = "^[0-9a-f]{64}$", write_only)]
    pub draw_seed: Option<usher_core::draw::Seed>,
    /// Waiting-room page settings (`PageSettings`): a value sets, `""` unsets.
    pub booking_url: Option<String>,
    pub embed_origin: Option<String>,
    pub title: Option<String>,
    pub logo_url: Option<String>,
    /// Absent: unchanged; `null`: no cap.
    #[serde(default, deserialize_with = "present")]
    pub max_active: Option<Option<u64>>,
    /// Most entrants a scheduled sale's pre-queue takes (at least 1); a join beyond it gets
    /// `event: pre_queue_full`. Absent: unchanged; `null`: no cap.
    #[serde(default, deserialize_with = "present")]
    pub max_entrants: Option<Option<u64>>,
    pub passthrough: Option<bool>,
    /// Absent: unchanged; `null`: off.
    #[serde(default, deserialize_with = "present")]
    pub adaptive: Option<Option<Adaptive>>,
    /// What a join must bring: `"none"` or `"pow"` (a solved proof-of-work puzzle).
    pub challenge: Option<Challenge>,
    /// Leading zero bits of the proof of work (1..=32).
    pub pow_difficulty: Option<u8>,
    /// What places and entry tokens are bound to: `"none"`, or `"browser_key"` (every stream
    /// request carries a proof of the browser's key, and the entry token names it as
    /// `cnf.jkt`: docs/security.md, "Places and tokens bound to the browser").
    pub bind: Option<Bind>,
    /// Whether joins bring a shop's invitation: `"none"`, `"optional"` (an invited account
    /// holds one place) or `"required"` (only invited accounts join); docs/sale-day.md,
    /// "Invitations". `optional` and `required` need `invitation_keys`.
    pub invitations: Option<InvitationMode>,
    /// The shop's Ed25519 public keys that sign invitations: JWKs
    /// `{"kty":"OKP","crv":"Ed25519","x":…,"kid":…}`, at most 8, each `kid` once. Replaces the
    /// list.
    pub invitation_keys: Option<Vec<InvitationKey>>,
    /// Absent: unchanged; a text: the queue goes into maintenance (admission holds, places
    /// are kept, browsers hear `event: status` with the text); `null`: maintenance ends.
    // `super::states` checks and applies it.
    #[serde(default, deserialize_with = "present")]
    pub maintenance: Option<Option<String>>,
    /// A text: the sale is over; the queue closes with reason `ended` and the text.
    pub ended: Option<String>,
    /// Seconds an admitted session has to arrive (the booking service's first check, touch
    /// or consume); one that does not ends early and frees its slot. Absent: unchanged;
    /// `null`: off. 1 ..= `session_ttl_seconds`.
    #[serde(default, deserialize_with = "present")]
    pub arrival_seconds: Option<Option<u64>>,
    /// Raise the rate to make up for the measured no-show share: rate ÷ (1 − share), at most
    /// 2 × the rate (needs `arrival_seconds`).
    pub make_up_no_shows: Option<bool>,
    // >>> inventory (`super::inventory` checks and applies these)
    /// Items one admission may take against the reported inventory (1 ..= 1000).
    pub basket_size: Option<u64>,
    /// Seconds a queue whose inventory is gone waits with no active session before it closes
    /// with `sold_out` (1 ..= 86400).
    pub sold_out_grace_seconds: Option<u64>,
    /// Seconds after which an inventory report is stale: browsers hear `unknown`
    /// (1 ..= 86400).
    pub inventory_stale_after_seconds: Option<u64>,
    // <<< inventory
    /// Lanes with guaranteed shares (`super::lanes`): each `{"name", "share"}`, at most 8,
    /// names of 1..=32 characters of `a-z0-9_-`, shares in percent adding up to 100; a join
    /// that names no lane goes to `default_lane` (the first lane when not given). Absent:
    /// unchanged; `[]`: no lanes. A lane with places in line cannot be removed (409).
    pub lanes: Option<Vec<Lane>>,
    /// The lane joins that name none go to; absent: unchanged (or the first lane listed).
    pub default_lane: Option<LaneName>,
    // >>> door
    /// What happens when a gateway cannot reach Redis: `"hold"` (nobody is admitted, everyone
    /// keeps their place) or `"open"` (after `door_after_seconds`, each gateway lets its own
    /// browsers through at a bounded rate with a door token). `"open"` with `bind:
    /// "browser_key"` is refused (`409`).
    pub on_outage: Option<usher_core::door::OnOutage>,
    /// Seconds without Redis before an `open` queue's door opens (1..=3600; default 30).
    pub door_after_seconds: Option<u64>,
    // <<< door
    // >>> record
    /// Keep the fairness report's record (`GET /admin/queues/{queue}/report`): each place's
    /// join, leave, admission, the ETA it was shown, its lane and its client network (hashed).
    /// Off by default.
    pub record: Option<bool>,
    /// Seconds the record is kept after the queue closes or `record` is turned off (3600 ..=
    /// 7776000; default 604800, 7 days), then deleted. A report covers one opening: a place
    /// taken after a reopening starts a new record (the old one is deleted). Times are kept
    /// to 49.7 days from the record's start; later ones read as that limit.
    pub record_retention_seconds: Option<u64>,
    // <<< record
    /// `true` to make a change that needs it (`409` without): `grace_seconds` below 10,
    /// `max_entrants` below the pre-queue's entrants, an `opens_at` that discards a draw's
    /// record. Not stored.
    pub confirm: Option<bool>,
}

impl QueueUpdate {
    /// What `super::states` reads of this body.
    fn state_change(&self) -> super::states::StateChange<'_> {
        super::states::StateChange {
            maintenance: self.maintenance.as_ref().map(Option::as_deref),
            ended: self.ended.as_deref(),
            paused: self.paused,
            open: self.open,
        }
    }

    /// `current` with this update's page settings applied (`""` unsets one), checked.
    pub(super) fn page_settings(
        &self,
        mut current: PageSettings,
    ) -> Result<PageSettings, ApiError> {
        for (given, field) in [
            (&self.booking_url, &mut current.booking_url),
            (&self.embed_origin, &mut current.embed_origin),
            (&self.title, &mut current.title),
            (&self.logo_url, &mut current.logo_url),
        ] {
            if let Some(v) = given {
                *field = Some(v.clone()).filter(|v| !v.is_empty());
            }
        }
        current
            .check()
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Ok(current)
    }
}

/// A field that is present, `null` included (`Some(None)`); an absent one is `None` through
/// `#[serde(default)]`.
pub(crate) fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// A queue's settings after `u` (a `PUT` body, or an entry of `USHER_QUEUES_FILE`) is
/// applied to `existing` (the defaults for a new queue), or why `u` is refused.
pub fn configured(existing: Option<QueueConfig>, u: &QueueUpdate) -> Result<QueueConfig, ApiError> {
    if let Some(r) = u.admit_per_second {
        if !(r > 0.0 && r <= MAX_ADMIT_PER_SECOND) {
            return Err(ApiError::bad_request(format!(
                "admit_per_second must be > 0 and <= {MAX_ADMIT_PER_SECOND}"
            )));
        }
    }
    if let Some(t) = u.session_ttl_seconds {
        if !(1..=MAX_SESSION_TTL).contains(&t) {
            return Err(ApiError::bad_request(format!(
                "session_ttl_seconds must be between 1 and {MAX_SESSION_TTL}"
            )));
        }
    }
    if let Some(g) = u.grace_seconds {
        if !(MIN_GRACE..=MAX_GRACE).contains(&g) {
            return Err(ApiError::bad_request(format!(
                "grace_seconds must be between {MIN_GRACE} and {MAX_GRACE}"
            )));
        }
    }
    if u.max_active == Some(Some(0)) {
        return Err(ApiError::bad_request(
            "max_active must be at least 1, or null for no cap (pause the queue to admit nobody)",
        ));
    }
    if u.max_entrants == Some(Some(0)) {
        return Err(ApiError::bad_request(
            "max_entrants must be at least 1, or null for no cap",
        ));
    }
    if let Some(Some(a)) = &u.adaptive {
        a.check(MAX_ADMIT_PER_SECOND)
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    if let Some(d) = u.pow_difficulty {
        check_difficulty(d).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    super::states::check(u.state_change())?;
    let mut cfg = existing.unwrap_or_default();
    if let Some(r) = u.admit_per_second {
        cfg.admit_per_second = r;
    }
    if let Some(t) = u.session_ttl_seconds {
        // A cap still at its default (3 × TTL) follows the TTL.
        if u.max_session_seconds.is_none() && cfg.max_session_seconds == 3 * cfg.session_ttl_seconds
        {
            cfg.max_session_seconds = 3 * t;
        }
        cfg.session_ttl_seconds = t;
    }
    if let Some(s) = u.sliding_session {
        cfg.sliding_session = s;
    }
    if let Some(m) = u.max_session_seconds {
        cfg.max_session_seconds = m;
    }
    if !(cfg.session_ttl_seconds..=MAX_MAX_SESSION).contains(&cfg.max_session_seconds) {
        return Err(ApiError::bad_request(format!(
            "max_session_seconds ({}) must be at least session_ttl_seconds ({}) and at most {MAX_MAX_SESSION}",
            cfg.max_session_seconds, cfg.session_ttl_seconds
        )));
    }
    if let Some(o) = u.open {
        cfg.open = o;
    }
    if let Some(g) = u.grace_seconds {
        cfg.grace_seconds = g;
    }
    if let Some(p) = u.paused {
        cfg.paused = p;
    }
    if let Some(m) = u.max_active {
        cfg.max_active = m;
    }
    if let Some(m) = u.max_entrants {
        cfg.max_entrants = m;
    }
    if let Some(p) = u.passthrough {
        cfg.passthrough = p;
    }
    if let Some(a) = &u.adaptive {
        cfg.adaptive = a.clone();
    }
    if let Some(c) = u.challenge {
        cfg.challenge = c;
    }
    if let Some(d) = u.pow_difficulty {
        cfg.pow_difficulty = d;
    }
    if let Some(b) = u.bind {
        cfg.bind = b;
    }
    super::invitations::apply(
        &mut cfg,
        super::invitations::InvitationChange {
            invitations: u.invitations,
            invitation_keys: u.invitation_keys.as_deref(),
        },
    )?;
    super::no_shows::apply(
        &mut cfg,
        super::no_shows::NoShowChange {
            arrival_seconds: u.arrival_seconds,
            make_up_no_shows: u.make_up_no_shows,
        },
    )?;
    super::inventory::apply(
        &mut cfg,
        super::inventory::InventoryChange {
            basket_size: u.basket_size,
            sold_out_grace_seconds: u.sold_out_grace_seconds,
            inventory_stale_after_seconds: u.inventory_stale_after_seconds,
        },
    )?;
    super::states::apply(&mut cfg, u.state_change())?;
    // >>> door
    super::door::apply(
        &mut cfg,
        super::door::DoorChange {
            on_outage: u.on_outage,
            door_after_seconds: u.door_after_seconds,
        },
    )?;
    // <<< door
    super::report::apply(
        &mut cfg,
        super::report::RecordChange {
            record: u.record,
            record_retention_seconds: u.record_retention_seconds,
        },
    )?;
    Ok(cfg)
}
