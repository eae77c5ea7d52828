//! [`QueueView`]: a queue as the admin API shows it (settings, counters, effective rate,
//! page settings, inventory, lanes), read from the store for `GET` and after each change.

use serde::{Deserialize, Serialize};
use usher_core::ids::QueueId;
use usher_core::page_settings::PageSettings;
use usher_core::policy::{RateReason, RateSource};
use usher_core::store::{LaneCount, QueueConfig, QueueStats};
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::state::redis_down;
use crate::state::AppState;

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
/// `GET /admin/queues` answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct QueueList {
    pub queues: Vec<QueueView>,
}
pub(super) async fn view(st: &AppState, q: QueueId) -> Result<Option<QueueView>, ApiError> {
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
