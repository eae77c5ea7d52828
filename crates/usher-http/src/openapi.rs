//! The API description (`GET /openapi.json`): what every server shares.
//!
//! Each server builds its routes in a [`utoipa_axum::router::OpenApiRouter`], one table that
//! both serves a route and describes it, so the document cannot miss a served route nor name
//! one that is not served. Handlers are annotated with `#[utoipa::path]` and registered with
//! `utoipa_axum::routes!`; a handler that is a closure (the health and metrics routes below)
//! is registered with [`route`], which takes its description from an annotated stub.
//!
//! Here: the one error body ([`ErrorBody`]), the two security schemes, the health and metrics
//! descriptions, and the `/openapi.json` route itself.

use std::sync::Arc;

use axum::handler::Handler;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use axum::Extension;
use serde::Serialize;
use utoipa::openapi::path::Paths;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi;
use utoipa::ToSchema;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::PathItemExt;

/// The body of every error answer, of every server: `{"error": "..."}`.
// `crate::ApiError` writes it. (A `///` line here would show in the API description.)
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(example = json!({"error": "no queue \"concert\""}))]
pub struct ErrorBody {
    /// What went wrong, for people (not a stable code).
    pub error: String,
}

// The names of the security schemes; an operation names one in its annotation as a string
// literal (`security(("admin_token" = []))`, which the macro requires), and the API description
// test checks that every name an operation uses is defined.

/// The security scheme of the admin API: `Authorization: Bearer <USHER_ADMIN_TOKEN>`.
pub const ADMIN_TOKEN: &str = "admin_token";
/// The security scheme of load reports: `Authorization: Bearer <USHER_SERVICE_TOKEN>`.
pub const SERVICE_TOKEN: &str = "service_token";
/// The security scheme of the session API: `Authorization: Bearer <entry token>`.
pub const ENTRY_TOKEN: &str = "entry_token";

/// Adds the bearer security schemes a document's operations name (`security(...)` in their
/// annotations) to its components.
pub fn add_security_schemes(doc: &mut OpenApi, schemes: &[(&str, &str)]) {
    let components = doc.components.get_or_insert_with(Default::default);
    for (name, description) in schemes {
        let http = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(*description))
            .build();
        components.add_security_scheme(*name, SecurityScheme::Http(http));
    }
}

/// A route whose handler is not itself annotated (a closure, or a handler whose description
/// lives in an `openapi` module to keep its file short): served at the path and with the
/// methods of the annotated stub `P` (`__path_<stub>`), and described by it, schemas included.
/// The same table entry `utoipa_axum::routes!` makes, so the route and its description stay
/// one.
pub fn route<P, H, T, S>(handler: H) -> UtoipaMethodRouter<S>
where
    P: utoipa::Path + utoipa::__dev::SchemaReferences,
    H: Handler<T, S>,
    T: 'static,
    S: Clone + Send + Sync + 'static,
{
    let methods = P::methods();
    let router = methods.iter().fold(MethodRouter::new(), |r, m| {
        r.on(m.to_method_filter(), handler.clone())
    });
    let mut paths = Paths::new();
    paths.add_path_operation(P::path(), methods, P::operation());
    let mut schemas = Vec::new();
    P::schemas(&mut schemas);
    (schemas, paths, router)
}

/// `GET /openapi.json`.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "This document (OpenAPI 3.1).", content_type = "application/json", body = Object)),
)]
async fn openapi_json(Extension(doc): Extension<Arc<String>>) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        doc.as_str().to_owned(),
    )
        .into_response()
}

/// Finishes a server's table: adds `GET /openapi.json`, which serves the document of every
/// route the table holds (itself included), and returns the router with the document.
pub fn finish<S>(table: OpenApiRouter<S>) -> (axum::Router<S>, OpenApi)
where
    S: Clone + Send + Sync + 'static,
{
    let (router, doc) = table
        .routes(utoipa_axum::routes!(openapi_json))
        .split_for_parts();
    let json = doc.to_json().unwrap_or_else(|_| "{}".into());
    (router.layer(Extension(Arc::new(json))), doc)
}

/// `GET /healthz`.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "The process is alive (liveness probes).", content_type = "text/plain", body = String, example = "ok\n")),
)]
pub(crate) async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /readyz[?verbose]`: described here, served by a closure over the server's check.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    params(("verbose" = Option<String>, Query, description = "Present (no value needed): answer JSON that also reports the dependencies (`redis`: `ok` or `unreachable`; the gateway adds `draining`).")),
    responses(
        (status = 200, description = "Ready for new work: `ready` (text), or with `?verbose` a JSON object `{\"ready\": true, …}`. Never fails because Redis is away.",
            content((String = "text/plain", example = "ready\n"), (Object = "application/json"))),
        (status = 503, description = "Not ready (draining): `not ready` (text), or with `?verbose` `{\"ready\": false, …}`.",
            content((String = "text/plain", example = "not ready\n"), (Object = "application/json"))),
    ),
)]
#[allow(dead_code)] // The description only: the handler is a closure (crate::health).
pub(crate) fn readyz() {}

/// `GET /metrics`: described here, served by a closure over the server's gauges.
#[utoipa::path(
    get,
    path = "/metrics",
    tag = "health",
    responses((status = 200, description = "The process's series in the Prometheus text format (no token needed; keep it off the public internet).", content_type = "text/plain; version=0.0.4", body = String)),
)]
#[allow(dead_code)] // The description only: the handler is a closure (crate::metrics).
pub(crate) fn metrics() {}
