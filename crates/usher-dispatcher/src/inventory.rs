//! Inventory reports from booking services (`PUT /api/queues/{queue}/inventory`): what is
//! left to sell, which the queue's admission follows (`usher_core::inventory` has the rule).
//! Authenticated like load reports, by `USHER_SERVICE_TOKEN`.
//!
//! The report is stored, and every gateway holding browsers of the queue hears it at once
//! (`StreamMessage::Inventory`), so a sale that runs out is told to the line now, not at the
//! next tick. Admission itself changes in the store (the tick and passthrough joins read the
//! report in the script that admits).

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::ids::QueueId;
use usher_core::inventory::{check_remaining, InventoryState};
use usher_core::messages::StreamMessage;
use usher_core::time::now_ms;
use usher_http::openapi::ErrorBody;
use usher_http::ApiError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::{redis_down, service_bearer, AppState};

/// The routes, merged into the dispatcher's router.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(report_inventory, forget_inventory))
}

/// `PUT /api/queues/{queue}/inventory` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct InventoryBody {
    /// Items left to sell, as the booking service counts them now: an integer from 0 to
    /// 1,000,000,000.
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    remaining: u64,
}

/// `200` body: the inventory as the line is told of it now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
struct InventoryAnswer {
    queue: QueueId,
    /// As reported (sessions consumed from now on count against it until the next report).
    remaining: u64,
    /// Items the active sessions may still take: active sessions × `basket_size`.
    held: u64,
    basket_size: u64,
    /// Whether the queue admits now: something is left beyond the active sessions' baskets.
    admitting: bool,
    /// Gateways told at once.
    gateways: usize,
}

/// `PUT /api/queues/{queue}/inventory`: stores what is left of the queue's inventory.
#[utoipa::path(
    put,
    path = "/api/queues/{queue}/inventory",
    tag = "inventory",
    security(("service_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue the booking service sells.")),
    request_body = InventoryBody,
    responses(
        (status = 200, description = "Stored: the queue admits only while `remaining`, less a basket per session consumed from now on and per active session, is above 0; every waiting browser hears the new outlook at once. A report above 0 ends a sold-out grace (the queue stays open); a queue already closed stays closed.", body = InventoryAnswer),
        (status = 400, description = "A bad queue name, or a body that is not `{\"remaining\": integer}` with 0 ≤ remaining ≤ 1,000,000,000 (negative, fractional and huge numbers are refused).", body = ErrorBody),
        (status = 401, description = "Missing or wrong service token, or `USHER_SERVICE_TOKEN` unset on the dispatcher.", body = ErrorBody),
        (status = 404, description = "No such queue.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
        (status = 507, description = "Redis is out of memory.", body = ErrorBody),
    ),
)]
async fn report_inventory(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Result<Json<InventoryBody>, JsonRejection>,
) -> Result<Json<InventoryAnswer>, ApiError> {
    service_bearer(&st, &headers, "inventory reports")?;
    let q = QueueId::new(&raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Json(b) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    check_remaining(b.remaining).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let now = now_ms();
    let inv = st
        .store
        .report_inventory(&q, b.remaining, now)
        .await
        .map_err(redis_down)?
        .ok_or_else(|| ApiError::not_found(format!("no queue {raw:?}")))?;
    let gateways = tell_line(&st, &q, inv, now).await;
    if inv.admits() {
        // Admission may resume: mint the next tick's tokens now.
        let _ = st.hints.send(q.clone());
    }
    tracing::info!(queue = %q, remaining = b.remaining, held = inv.held, gateways, "inventory reported");
    Ok(Json(InventoryAnswer {
        queue: q,
        remaining: inv.remaining,
        held: inv.held,
        basket_size: inv.basket_size,
        admitting: inv.admits(),
        gateways,
    }))
}

/// `DELETE /api/queues/{queue}/inventory`: forgets the queue's inventory report.
#[utoipa::path(
    delete,
    path = "/api/queues/{queue}/inventory",
    tag = "inventory",
    security(("service_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue the booking service sells.")),
    responses(
        (status = 204, description = "Forgotten (also when there was none): the queue admits as if it never had a report, and its browsers stop hearing of the inventory at the next tick."),
        (status = 400, description = "A bad queue name.", body = ErrorBody),
        (status = 401, description = "Missing or wrong service token, or `USHER_SERVICE_TOKEN` unset on the dispatcher.", body = ErrorBody),
        (status = 404, description = "No such queue.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
    ),
)]
async fn forget_inventory(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
) -> Result<StatusCode, ApiError> {
    service_bearer(&st, &headers, "inventory reports")?;
    let q = QueueId::new(&raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !st.store.forget_inventory(&q).await.map_err(redis_down)? {
        return Err(ApiError::not_found(format!("no queue {raw:?}")));
    }
    let _ = st.hints.send(q.clone());
    tracing::info!(queue = %q, "inventory report forgotten");
    Ok(StatusCode::NO_CONTENT)
}

/// Tells every live gateway holding browsers of `q` the new inventory (they pass each
/// browser its outlook on). Best effort: the report is stored, and the next tick's `state`
/// carries it anyway, so a failure here is logged, not answered.
async fn tell_line(st: &AppState, q: &QueueId, inventory: InventoryState, now: u64) -> usize {
    let msg = StreamMessage::Inventory {
        queue: q.clone(),
        inventory,
    };
    let sent = async {
        let live = st.store.live_gateways(now).await?;
        let batches: Vec<_> = st
            .store
            .queue_gateways(q, now)
            .await?
            .into_iter()
            .filter_map(|idx| live.get(&idx).cloned())
            .map(|id| (id, vec![msg.clone()]))
            .collect();
        st.store.send(&batches).await.map(|()| batches.len())
    };
    match sent.await {
        Ok(n) => n,
        Err(e) => {
            let _ = redis_down(e);
            tracing::warn!(queue = %q, "inventory stored; the line hears it at the next tick");
            0
        }
    }
}
