//! The dispatcher's API description (`GET /openapi.json`, OpenAPI 3.1).
//!
//! The document comes from the router's own table ([`crate::routes::router`], a
//! `utoipa_axum` `OpenApiRouter`): every route is registered with its description, so nothing
//! is served undescribed. Handlers carry their `#[utoipa::path]` themselves, except the admin
//! queue handlers, described in `admin/openapi.rs`. This module is the document's frame
//! ([`ApiDoc`]): title, tags, shared components and security schemes.

use usher_http::openapi::{ErrorBody, ADMIN_TOKEN, ENTRY_TOKEN, SERVICE_TOKEN};
use utoipa::OpenApi;

/// The frame: title, tags, shared components. Paths come from the router.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "usher dispatcher",
        description = "The admin API (operators), the session API and load reports (booking services), the JWKS, the operator dashboard, health and metrics.\n\nEvery error of every route is JSON `{\"error\": \"…\"}` (`ErrorBody`), including the server's own: an unknown path → `404`, a wrong method → `405`, a body past 64 KiB → `413`, a body that does not arrive within `USHER_BODY_TIMEOUT_SECS` → `408`.",
    ),
    servers((url = "/", description = "The dispatcher that serves this document.")),
    tags(
        (name = "admin", description = "Queues, notices, gateways, the audit trail: `Authorization: Bearer <USHER_ADMIN_TOKEN>`. Every change is recorded in the audit trail."),
        (name = "sessions", description = "For booking services: the entry token itself is the bearer."),
        (name = "backends", description = "Booking backends' load reports, which adaptive queues follow."),
        (name = "inventory", description = "Booking services' inventory reports: what is left to sell, which admission follows (`USHER_SERVICE_TOKEN`)."),
        (name = "keys", description = "The public keys that verify entry tokens."),
        (name = "dashboard", description = "The operator dashboard (static; it calls the admin API with the operator's token)."),
        (name = "health", description = "Liveness, readiness and Prometheus metrics."),
        (name = "meta", description = "This document."),
    ),
    components(schemas(ErrorBody)),
)]
pub(crate) struct ApiDoc;

/// The frame with its security schemes.
pub(crate) fn frame() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    usher_http::openapi::add_security_schemes(
        &mut doc,
        &[
            (ADMIN_TOKEN, "One of the tokens of `USHER_ADMIN_TOKEN` (`label:token` entries; the label is recorded in the audit trail)."),
            (SERVICE_TOKEN, "`USHER_SERVICE_TOKEN`, shared with the booking services (not the admin token)."),
            (ENTRY_TOKEN, "The entry token (an EdDSA JWT) the browser received in `event: admitted`."),
        ],
    );
    doc
}
