//! Load reports from booking backends (`PUT /api/backends/{name}/load`), which adaptive queues
//! follow. Authenticated by `USHER_SERVICE_TOKEN`, a bearer token apart from the admin token.

use std::sync::atomic::{AtomicBool, Ordering};

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::Deserialize;
use usher_core::policy::{BackendName, LoadReport};
use usher_core::time::now_ms;
use usher_http::openapi::ErrorBody;
use usher_http::ApiError;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::{redis_down, service_bearer, AppState};

/// The routes, merged into the dispatcher's router.
pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(report))
}

/// `PUT /api/backends/{name}/load` body.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct LoadBody {
    /// Any finite number >= 0, in the unit the queues' `load_low`/`load_high` use.
    load: f64,
}

/// Logged once per process: reports arrive but no service token is configured.
static WARNED_UNSET: AtomicBool = AtomicBool::new(false);

/// `PUT /api/backends/{name}/load`: stores a backend's load for the adaptive queues that
/// follow it.
#[utoipa::path(
    put,
    path = "/api/backends/{name}/load",
    tag = "backends",
    security(("service_token" = [])),
    params(("name" = usher_core::policy::BackendName, Path, description = "The backend's name, as adaptive queues name it.")),
    request_body = LoadBody,
    responses(
        (status = 204, description = "Stored."),
        (status = 400, description = "A bad name, a body that is not `{\"load\": number}`, or a load that is negative or not finite.", body = ErrorBody),
        (status = 401, description = "Missing or wrong service token, or `USHER_SERVICE_TOKEN` unset on the dispatcher.", body = ErrorBody),
        (status = 503, description = "Redis is unreachable.", body = ErrorBody),
        (status = 507, description = "Redis is out of memory.", body = ErrorBody),
    ),
)]
async fn report(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    body: Result<Json<LoadBody>, JsonRejection>,
) -> Result<StatusCode, ApiError> {
    if st.service_token.is_none() && !WARNED_UNSET.swap(true, Ordering::Relaxed) {
        tracing::warn!("a booking backend reported its load, but USHER_SERVICE_TOKEN is not set: every load report is refused, so adaptive queues admit nobody");
    }
    service_bearer(&st, &headers, "load reports")?;
    let name = BackendName::new(raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let Json(b) = body.map_err(|e| ApiError::bad_request(e.body_text()))?;
    if !(b.load.is_finite() && b.load >= 0.0) {
        return Err(ApiError::bad_request("load must be a finite number >= 0"));
    }
    let report = LoadReport {
        load: b.load,
        at_ms: now_ms(),
    };
    st.store
        .report_load(&name, report)
        .await
        .map_err(redis_down)?;
    tracing::debug!(backend = %name, load = b.load, "load reported");
    Ok(StatusCode::NO_CONTENT)
}
