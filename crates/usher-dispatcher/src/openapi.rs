//! The dispatcher's API description (`GET /openapi.json`, OpenAPI 3.1).
//!
//! The document comes from the router's own table ([`crate::routes::router`], a
//! `utoipa_axum` `OpenApiRouter`): every route is registered with its description, so nothing
//! is served undescribed. Handlers in short modules carry their `#[utoipa::path]` themselves;
//! `admin`'s are described here, as stubs registered with [`usher_http::openapi::route`]
//! (which serves the real handler at the stub's path and methods), to keep `admin.rs` short.
//! Here too: the document's frame ([`ApiDoc`]) and the shapes of answers built as JSON values;
//! the error sets routes share are in [`crate::admin_errors`].

use usher_core::ids::QueueId;
use usher_http::openapi::{ErrorBody, ADMIN_TOKEN, ENTRY_TOKEN, SERVICE_TOKEN};
use utoipa::{OpenApi, ToSchema};

use crate::admin::{NoticeBody, NoticeSent, QueueList, QueueUpdate, QueueView};
use crate::admin_errors::{AdminReadErrors, AdminWriteErrors};

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
        (name = "keys", description = "The public keys that verify entry tokens."),
        (name = "dashboard", description = "The operator dashboard (static; it calls the admin API with the operator's token)."),
        (name = "health", description = "Liveness, readiness and Prometheus metrics."),
        (name = "meta", description = "This document."),
    ),
    components(schemas(ErrorBody)),
)]
pub struct ApiDoc;

/// The frame with its security schemes.
pub fn frame() -> utoipa::openapi::OpenApi {
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

/// The JWKS document: every key, the signing key first.
#[derive(ToSchema)]
#[allow(dead_code)] // A description: `KeyRing::jwks` builds the same JSON.
pub(crate) struct Jwks {
    pub keys: Vec<Jwk>,
}

/// One Ed25519 public key (RFC 8037).
#[derive(ToSchema)]
#[allow(dead_code)] // A description: `token::jwk_of` builds the same JSON.
pub(crate) struct Jwk {
    #[schema(example = "OKP")]
    pub kty: String,
    #[schema(example = "Ed25519")]
    pub crv: String,
    /// The public key, base64url without padding.
    pub x: String,
    /// The key id tokens name in their header.
    pub kid: String,
    #[schema(example = "EdDSA")]
    pub alg: String,
    #[schema(example = "sig", rename = "use")]
    pub use_: String,
}

#[utoipa::path(
    get,
    path = "/admin/queues",
    tag = "admin",
    security(("admin_token" = [])),
    responses((status = 200, description = "Every configured queue.", body = QueueList), AdminReadErrors),
)]
#[allow(dead_code)] // The description of `admin::list_queues`.
pub(crate) fn list_queues() {}

#[utoipa::path(
    get,
    path = "/admin/queues/{queue}",
    tag = "admin",
    security(("admin_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue id.")),
    responses(
        (status = 200, description = "The queue's settings, counters and effective rate.", body = QueueView),
        (status = 400, description = "A malformed queue id.", body = ErrorBody),
        (status = 404, description = "No such queue.", body = ErrorBody),
        AdminReadErrors,
    ),
)]
#[allow(dead_code)] // The description of `admin::get_queue`.
pub(crate) fn get_queue() {}

#[utoipa::path(
    put,
    path = "/admin/queues/{queue}",
    tag = "admin",
    security(("admin_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue id.")),
    request_body(content = QueueUpdate, description = "Omitted fields keep their value (the defaults for a new queue). `opens_at`, `draw_beacon`, `max_active` and `adaptive` take `null` to unset; the page settings take `\"\"`."),
    responses(
        (status = 200, description = "Updated.", body = QueueView),
        (status = 201, description = "Created.", body = QueueView),
        (status = 409, description = "`draw_seed` differs from the seed a pending sale committed to, or is the seed of this queue's earlier draw (drawn or voided), which is public: a new sale needs a new seed.", body = ErrorBody),
        AdminWriteErrors,
    ),
)]
#[allow(dead_code)] // The description of `admin::put_queue`.
pub(crate) fn put_queue() {}

#[utoipa::path(
    delete,
    path = "/admin/queues/{queue}",
    tag = "admin",
    security(("admin_token" = [])),
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ("reason" = Option<String>, Query, description = "`queue_closed` (the default) or `sold_out`: what every waiting browser's `closed` event says."),
    ),
    responses(
        (status = 200, description = "Closed; the queue as it is now.", body = QueueView),
        (status = 404, description = "No such queue.", body = ErrorBody),
        AdminWriteErrors,
    ),
)]
#[allow(dead_code)] // The description of `admin::close_queue`.
pub(crate) fn close_queue() {}

#[utoipa::path(
    post,
    path = "/admin/queues/{queue}/notice",
    tag = "admin",
    security(("admin_token" = [])),
    params(("queue" = QueueId, Path, description = "The queue id.")),
    request_body(content = NoticeBody, description = "Non-empty, at most 500 characters, no control characters."),
    responses(
        (status = 202, description = "Sent to every live gateway holding browsers of the queue; each waiting browser gets `event: notice`.", body = NoticeSent),
        (status = 404, description = "No such queue.", body = ErrorBody),
        AdminWriteErrors,
    ),
)]
#[allow(dead_code)] // The description of `admin::notice`.
pub(crate) fn notice() {}

#[utoipa::path(
    get,
    path = "/.well-known/jwks.json",
    tag = "keys",
    responses((status = 200, description = "The public keys that verify entry tokens, the signing key first (`Cache-Control: public, max-age=60`).", body = Jwks)),
)]
#[allow(dead_code)] // The description of `admin::jwks`.
pub(crate) fn jwks() {}
