//! Every HTTP route of the dispatcher, in one table that also describes them: the admin API
//! (behind the admin token, recorded in the audit trail), the JWKS, the dashboard, the session
//! API, load reports, health, metrics, and `GET /openapi.json`, made from this table.

use axum::Router;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::state::AppState;

/// Every route, from one table that also describes them (`GET /openapi.json`).
pub(crate) fn router(state: AppState) -> Router {
    let store = state.store.clone();
    let table = OpenApiRouter::with_openapi(crate::openapi::frame())
        .routes(routes!(crate::keys::jwks))
        .merge(crate::admin::routes(&state))
        .merge(crate::sessions::routes())
        .merge(crate::backends::routes())
        .merge(crate::inventory::routes())
        .merge(usher_http::metrics::metrics_routes(|| {}))
        .merge(usher_http::health_routes(move |verbose| {
            let store = store.clone();
            async move {
                // Always ready while it runs: the JWKS needs no Redis, and the admin and
                // session routes answer 503 by themselves while Redis is away.
                let details = if verbose {
                    let redis = if store.ping().await.is_ok() {
                        "ok"
                    } else {
                        "unreachable"
                    };
                    serde_json::json!({ "redis": redis })
                } else {
                    serde_json::Value::Null
                };
                usher_http::Readiness {
                    ready: true,
                    details,
                }
            }
        }));
    let (router, _doc) = usher_http::openapi::finish(table);
    router.with_state(state)
}
