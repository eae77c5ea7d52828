//! The inventory settings of `PUT /admin/queues/{q}` (`basket_size`,
//! `sold_out_grace_seconds`, `inventory_stale_after_seconds`) and what `GET` shows of the
//! booking service's last report (`inventory_remaining`, its age). The report itself arrives
//! at `PUT /api/queues/{q}/inventory` (`crate::inventory`); the rule is
//! `usher_core::inventory`'s.

use serde::{Deserialize, Serialize};
use usher_core::ids::QueueId;
use usher_core::inventory::{MAX_BASKET_SIZE, MAX_INVENTORY_SECONDS};
use usher_core::store::QueueConfig;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// What a `PUT` body says of the inventory settings: absent fields keep their value.
pub(super) struct InventoryChange {
    pub basket_size: Option<u64>,
    pub sold_out_grace_seconds: Option<u64>,
    pub inventory_stale_after_seconds: Option<u64>,
}

/// Applies `change` to `cfg`, refusing a basket of 0 (one admission would take nothing, and
/// the inventory could never stop anyone) or above [`MAX_BASKET_SIZE`], and durations
/// outside 1 ..= [`MAX_INVENTORY_SECONDS`].
pub(super) fn apply(cfg: &mut QueueConfig, change: InventoryChange) -> Result<(), ApiError> {
    if let Some(b) = change.basket_size {
        if !(1..=MAX_BASKET_SIZE).contains(&b) {
            return Err(ApiError::bad_request(format!(
                "basket_size must be between 1 and {MAX_BASKET_SIZE}"
            )));
        }
        cfg.basket_size = b;
    }
    for (name, given, field) in [
        (
            "sold_out_grace_seconds",
            change.sold_out_grace_seconds,
            &mut cfg.sold_out_grace_seconds,
        ),
        (
            "inventory_stale_after_seconds",
            change.inventory_stale_after_seconds,
            &mut cfg.inventory_stale_after_seconds,
        ),
    ] {
        if let Some(s) = given {
            if !(1..=MAX_INVENTORY_SECONDS).contains(&s) {
                return Err(ApiError::bad_request(format!(
                    "{name} must be between 1 and {MAX_INVENTORY_SECONDS}"
                )));
            }
            *field = s;
        }
    }
    Ok(())
}

/// The booking service's last inventory report, as `GET /admin/queues/{q}` shows it (all
/// `null` while the queue has none: it admits as before).
#[derive(Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InventoryView {
    /// What is left to sell: the last report less a basket (`basket_size`) per session
    /// consumed since. The queue admits while this, less the active sessions' baskets, is
    /// above 0.
    #[serde(default)]
    pub inventory_remaining: Option<u64>,
    /// `remaining` as last reported.
    #[serde(default)]
    pub inventory_reported: Option<u64>,
    /// Seconds since the last report.
    #[serde(default)]
    pub inventory_report_age_seconds: Option<u64>,
    /// The report is older than `inventory_stale_after_seconds`: browsers are told
    /// `unknown`.
    #[serde(default)]
    pub inventory_stale: Option<bool>,
}

/// `q`'s inventory view at `now` (ms).
pub(super) async fn view(
    st: &AppState,
    q: &QueueId,
    cfg: &QueueConfig,
    now: u64,
) -> Result<InventoryView, ApiError> {
    let Some(r) = st.store.inventory_report(q).await.map_err(redis_down)? else {
        return Ok(InventoryView::default());
    };
    let age = now.saturating_sub(r.at_ms) / 1000;
    Ok(InventoryView {
        inventory_remaining: Some(
            r.reported
                .saturating_sub(r.consumed.saturating_mul(cfg.basket_size)),
        ),
        inventory_reported: Some(r.reported),
        inventory_report_age_seconds: Some(age),
        inventory_stale: Some(
            now.saturating_sub(r.at_ms) > cfg.inventory_stale_after_seconds * 1000,
        ),
    })
}
