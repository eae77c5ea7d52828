//! Every HTTP route of the dispatcher, in one table that also describes them: the admin API
//! (behind the admin token, recorded in the audit trail), the JWKS, the dashboard, the session
//! API, load reports, health, metrics, and `GET /openapi.json`, made from this table.

use axum::{middleware, Router};
use usher_http::openapi::route;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::admin::{close_queue, get_queue, jwks, list_queues, notice, put_queue};
use crate::openapi as doc;
use crate::state::AppState;

/// Every route, from one table that also describes them (`GET /openapi.json`): a route is
/// added with `.routes(routes!(handler))` for an annotated handler, or `.routes(route::<stub>(
/// handler))` for one described in [`crate::openapi`].
pub fn router(state: AppState) -> Router {
    let admin = OpenApiRouter::new()
        .routes(route::<doc::__path_list_queues, _, _, _>(list_queues))
        .routes(route::<doc::__path_get_queue, _, _, _>(get_queue))
        .routes(route::<doc::__path_put_queue, _, _, _>(put_queue))
        .routes(route::<doc::__path_close_queue, _, _, _>(close_queue))
        .routes(route::<doc::__path_notice, _, _, _>(notice))
        .routes(routes!(crate::gateway_list::list_gateways))
        .routes(routes!(crate::schedule::post_beacon))
        .routes(routes!(crate::audit::list))
        // The last layer runs first: authorize, then record the change.
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            crate::audit::record,
        ))
        .route_layer(middleware::from_fn_with_state(
            state.admin_tokens.clone(),
            crate::admin_auth::authorize,
        ));
    let store = state.store.clone();
    let table = OpenApiRouter::with_openapi(doc::frame())
        .routes(route::<doc::__path_jwks, _, _, _>(jwks))
        .merge(admin)
        .merge(crate::dashboard::routes())
        .merge(crate::sessions::routes())
        .merge(crate::backends::routes())
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
