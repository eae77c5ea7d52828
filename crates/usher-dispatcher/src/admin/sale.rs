//! A queue's scheduled sale in the admin API: `"opens_at"` in `PUT /admin/queues/{queue}`.
//!
//! Setting a new time generates the draw's secret seed (or takes the operator's `draw_seed`,
//! which `USHER_QUEUES_FILE` can then carry so a queue configured again after a Redis data
//! loss keeps the same commitment) and publishes its commitment at once; moving a pending
//! sale keeps its seed (another `draw_seed` for it is refused); `null` unschedules a sale whose draw already ran (a
//! pending one cannot be: its pre-queue is waiting for the draw). The draw itself is
//! [`crate::tick`]'s (`tick/draw.rs`).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::draw::Seed;
use usher_core::ids::QueueId;
use usher_core::store::{BeaconChange, BeaconOutcome, DrawPhase, Store};
use usher_core::time::{now_ms, parse_rfc3339_ms};
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// What a `PUT` does to the schedule, once checked.
#[derive(Debug)]
pub(crate) enum Scheduling {
    Unchanged,
    /// Open at this time (ms since the epoch); a new sale takes this seed when given.
    At(u64, Option<Seed>),
    Unscheduled,
}

/// `"draw_seed"`: 64 hex characters (32 bytes), or absent.
pub(crate) fn seed_hex<'de, D>(d: D) -> Result<Option<Seed>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    match Option::<String>::deserialize(d)? {
        None => Ok(None),
        Some(hex) => Seed::from_hex(&hex).map(Some).ok_or_else(|| {
            serde::de::Error::custom("draw_seed must be 32 bytes of hex (64 characters)")
        }),
    }
}

/// Checks a `PUT`'s `opens_at` (and `draw_seed`) against the queue's current schedule.
pub(crate) async fn check(
    store: &Store,
    q: &QueueId,
    opens_at: Option<&Option<String>>,
    seed: Option<&Seed>,
) -> Result<Scheduling, ApiError> {
    let Some(asked) = opens_at else {
        if seed.is_some() {
            return Err(ApiError::bad_request(
                "draw_seed is given with the opens_at of the sale it seeds",
            ));
        }
        return Ok(Scheduling::Unchanged);
    };
    let current = store.schedule_of(q).await.map_err(redis_down)?;
    if let (Some(seed), Some(s)) = (seed, &current) {
        let commitment = seed.commitment();
        // A seed chosen after people joined could be picked to suit them.
        if s.phase == DrawPhase::Pending && s.commitment.as_deref() != Some(&commitment) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "this sale's draw is pending: it keeps the seed it committed to (draw_seed differs)",
            ));
        }
        // A seed already drawn with is published (the draw record), and a voided one may have
        // been: anyone could compute a new sale's order from it and keep only good places.
        let published = s.phase == DrawPhase::Done && s.commitment.as_deref() == Some(&commitment);
        let voided = s
            .voided
            .as_ref()
            .is_some_and(|v| v.commitment.as_deref() == Some(&commitment));
        if published || voided {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "draw_seed is this queue's earlier draw's seed, which is public: a new sale needs a new seed",
            ));
        }
    }
    let Some(text) = asked else {
        if seed.is_some() {
            return Err(ApiError::bad_request(
                "draw_seed is given with the opens_at of the sale it seeds",
            ));
        }
        return match current {
            Some(s) if s.phase == DrawPhase::Pending => Err(ApiError::bad_request(
                "opens_at cannot be removed while its draw is pending: people wait in its \
                 pre-queue (set an earlier opens_at to draw sooner)",
            )),
            Some(_) => Ok(Scheduling::Unscheduled),
            None => Ok(Scheduling::Unchanged),
        };
    };
    let at = parse_rfc3339_ms(text).ok_or_else(|| {
        ApiError::bad_request(format!(
            "opens_at must be an RFC 3339 time such as \"2030-01-31T18:00:00Z\", not {text:?}"
        ))
    })?;
    if current.as_ref().is_some_and(|s| s.opens_at_ms == at) {
        return Ok(Scheduling::Unchanged);
    }
    if at <= now_ms() {
        return Err(ApiError::bad_request(format!(
            "opens_at ({text}) must be in the future"
        )));
    }
    Ok(Scheduling::At(at, seed.cloned()))
}

/// Whether `s` discards a draw that ran (`lua/schedule.lua`): a new time, or `null`, after the
/// draw deletes its public record and `drawn`, the map from its entrants' pre-queue tickets to
/// their places in line. (A pending draw is never discarded: a new time moves it, `null` is
/// refused.) Such a change needs `"confirm": true` (`super::edits`).
pub(crate) async fn discards_draw(
    store: &Store,
    q: &QueueId,
    s: &Scheduling,
) -> Result<bool, ApiError> {
    if matches!(s, Scheduling::Unchanged) {
        return Ok(false);
    }
    let current = store.schedule_of(q).await.map_err(redis_down)?;
    Ok(current.is_some_and(|c| c.phase == DrawPhase::Done))
}

/// Applies a checked schedule. A new sale gets a fresh seed (only its commitment is shown
/// before the draw); a pending one keeps its own.
pub(crate) async fn apply(store: &Store, q: &QueueId, s: Scheduling) -> Result<(), ApiError> {
    let (at, seed) = match s {
        Scheduling::Unchanged => return Ok(()),
        Scheduling::At(at, seed) => (Some(at), seed),
        Scheduling::Unscheduled => (None, None),
    };
    if store
        .schedule(q, at, &seed.unwrap_or_else(Seed::generate))
        .await
        .map_err(redis_down)?
    {
        tracing::info!(queue = %q, opens_at_ms = ?at, "sale scheduled");
        Ok(())
    } else {
        Err(ApiError::bad_request(
            "opens_at cannot be removed while its draw is pending, nor moved once the draw has begun",
        ))
    }
}

/// `"draw_beacon"` in `PUT /admin/queues/{queue}`: the drand round whose randomness the draw
/// mixes in.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BeaconSpec {
    pub drand_round: u64,
}

/// Names (or, with `null`, drops) a pending sale's beacon round; absent: unchanged.
pub(crate) async fn apply_beacon(
    store: &Store,
    q: &QueueId,
    asked: Option<Option<BeaconSpec>>,
) -> Result<(), ApiError> {
    let Some(spec) = asked else {
        return Ok(());
    };
    let round = BeaconChange::Round(spec.map(|s| s.drand_round));
    match store.set_beacon(q, round).await.map_err(redis_down)? {
        BeaconOutcome::Set => Ok(()),
        _ => Err(ApiError::bad_request(
            "draw_beacon needs a scheduled sale whose draw is pending (set opens_at)",
        )),
    }
}

/// `POST /admin/queues/{queue}/draw/beacon` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BeaconBody {
    pub randomness: String,
}

/// The beacon as recorded.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BeaconView {
    pub queue: QueueId,
    pub drand_round: u64,
    pub randomness: String,
}

/// Bytes a beacon's randomness may have (drand's is 32).
const BEACON_BYTES: std::ops::RangeInclusive<usize> = 16..=64;

/// `POST /admin/queues/{queue}/draw/beacon`: records the named round's randomness.
#[utoipa::path(
    post,
    path = "/admin/queues/{queue}/draw/beacon",
    tag = "admin",
    security(("admin_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue id.")),
    request_body(content = BeaconBody, description = "The named drand round's randomness: 16 to 64 bytes of hex."),
    responses(
        (status = 200, description = "Recorded.", body = BeaconView),
        (status = 404, description = "The queue has no scheduled sale.", body = usher_http::openapi::ErrorBody),
        (status = 409, description = "The draw already ran, or other randomness is recorded for the round.", body = usher_http::openapi::ErrorBody),
        super::errors::AdminWriteErrors,
    ),
)]
pub(crate) async fn post_beacon(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    body: Result<Json<BeaconBody>, JsonRejection>,
) -> Result<Json<BeaconView>, ApiError> {
    let q = QueueId::new(&raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Json(b) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let ok = hex::decode(&b.randomness).is_ok_and(|v| BEACON_BYTES.contains(&v.len()));
    if !ok {
        return Err(ApiError::bad_request(format!(
            "randomness must be {} to {} bytes of hex",
            BEACON_BYTES.start(),
            BEACON_BYTES.end()
        )));
    }
    let Some(sale) = st.store.schedule_of(&q).await.map_err(redis_down)? else {
        return Err(ApiError::not_found(format!(
            "no scheduled sale for queue {raw:?}"
        )));
    };
    let change = BeaconChange::Randomness(&b.randomness);
    match st.store.set_beacon(&q, change).await.map_err(redis_down)? {
        BeaconOutcome::Set => {}
        BeaconOutcome::NoRound => {
            return Err(ApiError::bad_request(
                "this sale names no beacon round (set draw_beacon first)",
            ))
        }
        BeaconOutcome::NotPending => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "the draw already ran: its beacon can no longer change",
            ))
        }
        BeaconOutcome::Conflict => {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "other randomness is already recorded for this round",
            ))
        }
    }
    let drand_round = sale.beacon.map(|b| b.drand_round).unwrap_or_default();
    tracing::info!(queue = %q, drand_round, "draw beacon recorded");
    Ok(Json(BeaconView {
        queue: q,
        drand_round,
        randomness: b.randomness.to_ascii_lowercase(),
    }))
}
