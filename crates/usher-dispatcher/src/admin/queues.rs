//! The admin API's queue handlers: list, get, put, close, notice. [`super::routes`] serves
//! them, described by [`super::openapi`].

use axum::extract::rejection::JsonRejection;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::binding::Bind;
use usher_core::challenge::{check_difficulty, Challenge};
use usher_core::ids::QueueId;
use usher_core::invitation::{InvitationKey, InvitationMode};
use usher_core::lanes::{Lane, LaneName};
use usher_core::messages::{check_notice, CloseReason, StreamMessage};
use usher_core::page_settings::PageSettings;
use usher_core::policy::{Adaptive, RateReason, RateSource};
use usher_core::store::{LaneCount, QueueConfig, QueueStats, VersionedWrite};
use usher_core::time::now_ms;
use usher_http::ApiError;

use super::edits;
use crate::state::redis_down;
use crate::state::AppState;

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

/// A queue as the admin API shows it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QueueView {
    pub queue: QueueId,
    #[serde(flatten)]
    pub config: QueueConfig,
    #[serde(flatten)]
    pub stats: QueueStats,
    /// The waiting-room page's settings (fields left out while unset).
    #[serde(flatten)]
    pub page: PageSettings,
    /// The rate the queue admits at now (0 while paused, full, or adaptive without a fresh
    /// load report; raised by `make_up_no_shows`, at most 2 × the rate).
    pub effective_per_second: f64,
    /// Why `effective_per_second` is what it is.
    pub rate_reason: RateReason,
    /// The booking service's last inventory report (`inventory_remaining`, …).
    #[serde(flatten)]
    pub inventory: super::inventory::InventoryView,
    /// Lanes (`super::lanes`): each lane, its share, whether it is the default lane, and how
    /// many are in line in it; absent without lanes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub lanes: Vec<LaneCount>,
    // >>> door
    /// The open door's recorded periods and count (`door_periods`, `door_admitted_total`).
    #[serde(flatten)]
    pub door: usher_core::store::DoorRecord,
    // <<< door
}

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
    fn page_settings(&self, mut current: PageSettings) -> Result<PageSettings, ApiError> {
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

fn parse_queue(raw: &str) -> Result<QueueId, ApiError> {
    QueueId::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))
}

async fn view(st: &AppState, q: QueueId) -> Result<Option<QueueView>, ApiError> {
    let Some(config) = st.store.queue_config(&q).await.map_err(redis_down)? else {
        return Ok(None);
    };
    let now = now_ms();
    let stats = st.store.queue_stats(&q, now).await.map_err(redis_down)?;
    let report = match &config.adaptive {
        Some(a) => st
            .store
            .backend_load(&a.backend)
            .await
            .map_err(redis_down)?,
        None => None,
    };
    let make_up = stats.no_show_ratio.filter(|_| config.make_up_no_shows);
    let source = RateSource::of(
        config.admit_per_second,
        config.adaptive.as_ref(),
        report,
        now,
    )
    .made_up(make_up);
    let full = config.max_active.is_some_and(|m| stats.active >= m);
    let (effective_per_second, rate_reason) = source.effective(config.paused, full);
    let page = st.store.page_settings(&q).await.map_err(redis_down)?;
    let inventory = super::inventory::view(st, &q, &config, now).await?;
    let lanes = st.store.lane_counts(&q).await.map_err(redis_down)?;
    // >>> door
    let door = st.store.door_record(&q).await.map_err(redis_down)?;
    // <<< door
    Ok(Some(QueueView {
        queue: q,
        config,
        stats,
        page,
        effective_per_second,
        rate_reason,
        inventory,
        lanes,
        door,
    }))
}

/// `GET /admin/queues` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueList {
    pub queues: Vec<QueueView>,
}

pub(crate) async fn list_queues(State(st): State<AppState>) -> Result<Json<QueueList>, ApiError> {
    let mut queues = Vec::new();
    for q in st.store.queue_ids().await.map_err(redis_down)? {
        if let Some(v) = view(&st, q).await? {
            queues.push(v);
        }
    }
    Ok(Json(QueueList { queues }))
}

pub(crate) async fn get_queue(
    State(st): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let v = view(&st, q)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no queue {raw:?}")))?;
    Ok((StatusCode::OK, edits::etag(&v.config), Json(v)).into_response())
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
    Ok(cfg)
}

/// `409` when a change switches `bind` on while places wait: they joined without a browser
/// key, and a binding queue admits no place without one (`tick.lua` drops it at the head), so
/// switching on would cost each of them its place. Not a `confirm`: nobody can mean that.
/// (A join in the instant between this check and the write joins without a key too: switch
/// on while the queue is paused or before it opens.)
async fn bind_switch(
    st: &AppState,
    q: &QueueId,
    before: Option<&QueueConfig>,
    after: &QueueConfig,
) -> Result<(), ApiError> {
    if !before.is_some_and(|b| !b.bind.binds() && after.bind.binds()) {
        return Ok(());
    }
    let stats = st
        .store
        .queue_stats(q, now_ms())
        .await
        .map_err(redis_down)?;
    let places = stats.waiting + stats.entrants;
    if places > 0 {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "bind can be switched on only while nobody waits: the {places} places of this \
                 queue joined without a browser key, and a binding queue admits no place \
                 without one (switch it on before the sale, or once the line is empty)"
            ),
        ));
    }
    Ok(())
}

// A span per change (never its body or credentials: `skip_all`).
#[tracing::instrument(name = "admin", skip_all, fields(action = "put_queue", queue = %raw))]
pub(crate) async fn put_queue(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Result<Json<QueueUpdate>, JsonRejection>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let Json(u) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let if_match = edits::if_match(&headers)?;
    let page = u.page_settings(st.store.page_settings(&q).await.map_err(redis_down)?)?;
    let existing = st.store.queue_config(&q).await.map_err(redis_down)?;
    // Refused before anything is changed when the editor's version is already stale; the
    // write below checks it again, atomically.
    let mut expected = edits::expected_version(if_match, existing.as_ref())?;
    let scheduling =
        super::sale::check(&st.store, &q, u.opens_at.as_ref(), u.draw_seed.as_ref()).await?;
    let created = existing.is_none();
    let existing_open = existing.as_ref().is_some_and(|c| c.open);
    let before = existing.clone();
    let cfg = configured(existing, &u)?;
    bind_switch(&st, &q, before.as_ref(), &cfg).await?;
    let lanes = super::lanes::check(
        &st.store,
        &q,
        &super::lanes::LaneChange {
            lanes: u.lanes.as_deref(),
            default_lane: u.default_lane.as_ref(),
            schedules: matches!(scheduling, super::sale::Scheduling::At(..)),
        },
    )
    .await?;
    if u.confirm != Some(true) {
        let discards_draw = super::sale::discards_draw(&st.store, &q, &scheduling).await?;
        edits::unconfirmed(&st.store, &q, before.as_ref(), &cfg, discards_draw).await?;
    }
    let closing = !cfg.open && existing_open;
    // Lanes of an existing queue are written by their own script before the settings, so
    // they claim the version first too.
    let side_effects = !matches!(scheduling, super::sale::Scheduling::Unchanged)
        || u.draw_beacon.is_some()
        || closing
        || (lanes.is_some() && !created);
    if let (Some(v), true) = (expected, side_effects) {
        // The schedule and a close are written before the settings: the version is claimed
        // first, so an editor who lost the race changes none of them.
        edits::claim(&st.store, &q, v).await?;
        // The claim was this PUT's check: once the schedule or the close below is done, the
        // settings are written whatever the version has become since (a PUT without
        // `If-Match`, or a DELETE, may land in between), so a `412` never follows a change.
        expected = None;
    }
    // Lanes of an existing queue before anything else is written: a refusal (a lane with
    // places) changes nothing. A new queue's after its settings (it has no place yet).
    if let (Some(l), false) = (&lanes, created) {
        super::lanes::apply(&st.store, &q, l).await?;
    }
    // Before the settings: a new queue must not take joins into its line before its schedule.
    super::sale::apply(&st.store, &q, scheduling).await?;
    super::sale::apply_beacon(&st.store, &q, u.draw_beacon).await?;
    if closing {
        // `open: false` closes the queue exactly like DELETE does; before the settings are
        // written, so a close that failed leaves the queue open and a retry closes it (the
        // other way round, a retry would find the queue closed already and skip the close).
        let reason = match cfg.ended {
            Some(_) => CloseReason::Ended,
            None => CloseReason::QueueClosed,
        };
        close(&st, &q, reason, cfg.ended.clone()).await?;
    }
    if let VersionedWrite::Stale(now_at) = st
        .store
        .put_queue_if(&q, &cfg, expected)
        .await
        .map_err(redis_down)?
    {
        return Err(edits::stale(now_at));
    }
    st.store
        .put_page_settings(&q, &page)
        .await
        .map_err(redis_down)?;
    if let (Some(l), true) = (&lanes, created) {
        super::lanes::apply(&st.store, &q, l).await?;
    }
    let status = super::states::status_change(before.as_ref(), &cfg);
    let admits_more = before.is_none_or(|b| {
        (b.paused && !cfg.paused)
            || (!b.open && cfg.open)
            || cfg.admit_per_second > b.admit_per_second
            || cfg.max_active.unwrap_or(u64::MAX) > b.max_active.unwrap_or(u64::MAX)
            || (cfg.make_up_no_shows && !b.make_up_no_shows)
    });
    if admits_more && cfg.open && !cfg.paused {
        let _ = st.hints.send(q.clone());
    }
    if let Some((state, message)) = status {
        super::states::announce(&st, &q, state, message).await?;
    }
    tracing::info!(queue = %q, admit_per_second = cfg.admit_per_second, session_ttl_seconds = cfg.session_ttl_seconds, sliding_session = cfg.sliding_session, max_session_seconds = cfg.max_session_seconds, grace_seconds = cfg.grace_seconds, open = cfg.open, max_active = ?cfg.max_active, max_entrants = ?cfg.max_entrants, passthrough = cfg.passthrough, adaptive = cfg.adaptive.is_some(), challenge = cfg.challenge.as_str(), pow_difficulty = cfg.pow_difficulty, bind = cfg.bind.as_str(), arrival_seconds = ?cfg.arrival_seconds, make_up_no_shows = cfg.make_up_no_shows, on_outage = cfg.on_outage.as_str(), door_after_seconds = cfg.door_after_seconds, created, "queue configured");
    let v = view(&st, q)
        .await?
        .ok_or_else(|| ApiError::unavailable("queue vanished while being configured"))?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, edits::etag(&v.config), Json(v)).into_response())
}

/// `DELETE /admin/queues/{queue}` query: why the queue closes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseQuery {
    pub reason: Option<String>,
}

/// The reasons an operator may close a queue for: `queue_closed` (the default) and
/// `sold_out`.
fn close_reason(q: Result<Query<CloseQuery>, QueryRejection>) -> Result<CloseReason, ApiError> {
    let Query(q) = q.map_err(|e| ApiError::bad_request(e.body_text()))?;
    match q.reason.as_deref().map(str::parse) {
        None => Ok(CloseReason::QueueClosed),
        Some(Ok(r @ (CloseReason::QueueClosed | CloseReason::SoldOut))) => Ok(r),
        Some(_) => Err(ApiError::bad_request(
            "reason must be queue_closed or sold_out",
        )),
    }
}

// A span per change (never its body or credentials: `skip_all`).
#[tracing::instrument(name = "admin", skip_all, fields(action = "close_queue", queue = %raw))]
pub(crate) async fn close_queue(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    query: Result<Query<CloseQuery>, QueryRejection>,
) -> Result<Json<QueueView>, ApiError> {
    let q = parse_queue(&raw)?;
    let reason = close_reason(query)?;
    if !close(&st, &q, reason, None).await? {
        return Err(ApiError::not_found(format!("no queue {raw:?}")));
    }
    view(&st, q)
        .await?
        .map(Json)
        .ok_or_else(|| ApiError::not_found(format!("no queue {raw:?}")))
}

/// Closes a queue for `reason` and tells every live gateway (cheap and rare), not only those
/// registered as holding browsers of it. `false` when the queue is unknown.
async fn close(
    st: &AppState,
    q: &QueueId,
    reason: CloseReason,
    message: Option<String>,
) -> Result<bool, ApiError> {
    if !st.store.close_queue(q, reason).await.map_err(redis_down)? {
        return Ok(false);
    }
    let live = st.store.live_gateways(now_ms()).await.map_err(redis_down)?;
    let msg = StreamMessage::Closed {
        queue: q.clone(),
        reason,
        message,
    };
    let batches: Vec<_> = live
        .into_values()
        .map(|id| (id, vec![msg.clone()]))
        .collect();
    // The queue is closed in Redis already; a gateway not told now (Redis out of memory, a
    // blip) learns it at its next heartbeat, so this failure fails nothing.
    if let Err(e) = st.store.send(&batches).await {
        let _ = redis_down(e);
        tracing::warn!(queue = %q, "queue closed; gateways learn it at their next heartbeat");
    }
    tracing::info!(queue = %q, %reason, gateways = batches.len(), "queue closed");
    Ok(true)
}

/// `POST /admin/queues/{queue}/notice` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoticeBody {
    pub message: String,
}

/// `POST /admin/queues/{queue}/notice` answer: how many gateways the notice went to.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NoticeSent {
    pub queue: QueueId,
    pub gateways: usize,
}

/// Sends an operator's message to every browser waiting in the queue: one stream message to
/// each live gateway holding browsers of it (the gateways `state` goes to).
// A span per change (never its body or credentials: `skip_all`).
#[tracing::instrument(name = "admin", skip_all, fields(action = "notice", queue = %raw))]
pub(crate) async fn notice(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    body: Result<Json<NoticeBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let q = parse_queue(&raw)?;
    let Json(b) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    check_notice(&b.message).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if st
        .store
        .queue_config(&q)
        .await
        .map_err(redis_down)?
        .is_none()
    {
        return Err(ApiError::not_found(format!("no queue {raw:?}")));
    }
    let now = now_ms();
    let live = st.store.live_gateways(now).await.map_err(redis_down)?;
    let msg = StreamMessage::Notice {
        queue: q.clone(),
        message: b.message,
    };
    let batches: Vec<_> = st
        .store
        .queue_gateways(&q, now)
        .await
        .map_err(redis_down)?
        .into_iter()
        .filter_map(|idx| live.get(&idx).cloned())
        .map(|id| (id, vec![msg.clone()]))
        .collect();
    st.store.send(&batches).await.map_err(redis_down)?;
    tracing::info!(queue = %q, gateways = batches.len(), "notice sent");
    let sent = NoticeSent {
        queue: q,
        gateways: batches.len(),
    };
    Ok((StatusCode::ACCEPTED, Json(sent)).into_response())
}
