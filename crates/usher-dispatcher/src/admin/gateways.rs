//! `GET /admin/gateways`: the gateway processes registered in Redis (live, or dead within the
//! last day) and, for each, the queues it holds browsers of (the per-queue interest the
//! gateways refresh), with the connection counts of its last heartbeat.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use usher_core::ids::QueueId;
use usher_core::time::now_ms;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// One gateway as the admin API shows it.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GatewayView {
    pub index: u16,
    /// Its `USHER_SERVER_ID`.
    pub server_id: String,
    /// Whether its heartbeat is current.
    pub alive: bool,
    /// When its heartbeat expires (or expired), in milliseconds since the epoch.
    pub alive_until_ms: u64,
    /// The queues it holds waiting browsers of.
    pub queues: Vec<QueueId>,
    /// Event streams it served at its last heartbeat (`null` when it never reported, or is
    /// gone).
    pub streams: Option<u64>,
    /// Client connections it had open at its last heartbeat, streams or not (`null` likewise).
    pub sockets: Option<u64>,
}

/// `GET /admin/gateways` answer.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GatewayList {
    pub gateways: Vec<GatewayView>,
}

#[utoipa::path(
    get,
    path = "/admin/gateways",
    tag = "admin",
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Every gateway registered in the last day, live ones first.", body = GatewayList),
        super::errors::AdminReadErrors,
    ),
)]
pub(crate) async fn list_gateways(
    State(st): State<AppState>,
) -> Result<Json<GatewayList>, ApiError> {
    let now = now_ms();
    let mut queues: BTreeMap<u16, Vec<QueueId>> = BTreeMap::new();
    for q in st.store.queue_ids().await.map_err(redis_down)? {
        for gw in st.store.queue_gateways(&q, now).await.map_err(redis_down)? {
            queues.entry(gw).or_default().push(q.clone());
        }
    }
    let counts = st.store.gateway_connections().await.map_err(redis_down)?;
    let mut gateways: Vec<GatewayView> = st
        .store
        .gateways(now)
        .await
        .map_err(redis_down)?
        .into_iter()
        .map(|g| {
            let alive = g.is_alive(now);
            let reported = counts.get(&g.index).filter(|_| alive);
            GatewayView {
                alive,
                streams: reported.map(|c| c.streams),
                sockets: reported.map(|c| c.sockets),
                queues: queues.remove(&g.index).unwrap_or_default(),
                index: g.index,
                server_id: g.server_id.to_string(),
                alive_until_ms: g.alive_until_ms,
            }
        })
        .collect();
    gateways.sort_by_key(|g| (!g.alive, g.index));
    Ok(Json(GatewayList { gateways }))
}
