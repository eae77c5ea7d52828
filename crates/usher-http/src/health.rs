//! Liveness and readiness routes, the same on every server.

use std::future::Future;

use axum::http::StatusCode;
use axum::Router;

/// `/healthz` answers 200 while the process runs; `/readyz` answers 200 when `ready` says so
/// and 503 otherwise.
pub fn health_routes<S, F, Fut>(ready: F) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let ready = ready.clone();
                async move {
                    if ready().await {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
}
