//! Liveness and readiness routes, the same on every server.
//!
//! - `/healthz`: the process is alive (for liveness probes: a failure means "restart me").
//! - `/readyz`: the server takes new work (for readiness probes and load balancers: a failure
//!   means "send nothing new here"). It must fail only for reasons that are this process's
//!   own, such as draining: a dependency that every replica shares (Redis) being away would
//!   take every replica out of rotation at once, and a load balancer with no ready target
//!   answers `503`, which makes `EventSource` give up for good. The servers already answer
//!   their clients sensibly while Redis is away (a stream gets `200` with `retry:`).
//! - `/readyz?verbose`: the same status code, with a JSON body that also reports the
//!   dependencies (`{"ready": …, "redis": "ok" | "unreachable", …}`) for people and
//!   dashboards.

use std::future::Future;

use axum::extract::RawQuery;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;

use crate::openapi::__path_readyz;

/// What a readiness check found.
#[derive(Debug, Clone, PartialEq)]
pub struct Readiness {
    /// Whether this server takes new work.
    pub ready: bool,
    /// Further fields of the verbose answer (an object, or `null` for none).
    pub details: serde_json::Value,
}

/// `/healthz` answers 200 while the process runs; `/readyz` answers 200 when `check(verbose)`
/// finds the server ready and 503 otherwise. `verbose` is true for `/readyz?verbose`: only
/// then is the check expected to look at dependencies, so probes cost them nothing. Both are
/// described in the server's API description ([`crate::openapi`]).
pub fn health_routes<S, F, Fut>(check: F) -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn(bool) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Readiness> + Send + 'static,
{
    OpenApiRouter::new()
        .routes(utoipa_axum::routes!(crate::openapi::healthz))
        .routes(crate::openapi::route::<__path_readyz, _, _, _>(
            move |RawQuery(query): RawQuery| {
                let check = check.clone();
                async move {
                    let verbose = query.is_some_and(|q| q.split('&').any(|p| p == "verbose"));
                    readyz(check(verbose).await, verbose)
                }
            },
        ))
}

fn readyz(r: Readiness, verbose: bool) -> Response {
    let status = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if !verbose {
        let text = if r.ready { "ready\n" } else { "not ready\n" };
        return (status, text).into_response();
    }
    let mut body = serde_json::json!({ "ready": r.ready });
    if let (Some(body), serde_json::Value::Object(details)) = (body.as_object_mut(), r.details) {
        body.extend(details);
    }
    (status, axum::Json(body)).into_response()
}
