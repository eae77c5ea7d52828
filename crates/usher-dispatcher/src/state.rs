//! What every HTTP handler of the dispatcher shares: the state they are served with, and how
//! a failed Redis call is answered. Its own module so that imports run one way: `admin`'s
//! router merges `sessions`' routes, and both take their state from here.

use std::sync::Arc;

use axum::http::{header, HeaderMap, StatusCode};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::store::{OomLog, Store, StoreError};
use usher_http::bucket::Buckets;
use usher_http::ApiError;
use usher_mint::keyring::KeyRing;

use crate::admin::auth::AdminTokens;

#[derive(Clone)]
pub struct AppState {
    pub store: Store,
    /// The published keys (the signing key first).
    pub keys: Arc<KeyRing>,
    /// The tokens the admin API accepts, with their labels.
    pub admin_tokens: Arc<AdminTokens>,
    /// The bearer token of booking services' load reports (`None`: every report gets 401).
    pub service_token: Option<Arc<str>>,
    /// Tells the admission loop that a queue can admit now (or faster), so it mints the next
    /// tick's tokens ahead of time.
    pub hints: tokio::sync::mpsc::UnboundedSender<QueueId>,
    /// The proofs each bound session spent here (`session_proof::SESSION_PROOFS`).
    pub session_proofs: Arc<Buckets<(QueueId, PlaceId)>>,
    /// Whether this dispatcher signs with the development key (none configured), for the
    /// readiness report.
    pub dev_signing_key: bool,
    /// This dispatcher's cap on client connections (`USHER_MAX_SOCKETS`), for the readiness
    /// report's open-files check.
    pub max_sockets: u64,
    /// This replica's id (`USHER_REPLICA_ID`): the readiness report measures this one and
    /// reads the others' reports.
    pub replica: String,
    /// One fairness report at a time (`admin::report`): a report reads the whole record and
    /// takes a blocking thread and memory in proportion to it, in the process that ticks.
    pub reports: Arc<tokio::sync::Semaphore>,
}

/// Out-of-memory failures of this process, logged at most once per 10 s.
pub(crate) static OOM_LOG: OomLog = OomLog::new(10_000);

/// A Redis failure behind a request: logged, answered `503` (the client may retry), or
/// `507` when Redis is out of memory (retrying does not help until memory is freed; closing
/// a queue still works and frees its line).
pub(crate) fn redis_down(e: StoreError) -> ApiError {
    crate::metrics::redis_error();
    if e.is_out_of_memory() {
        crate::metrics::redis_out_of_memory();
        OOM_LOG.report("an admin or session request", &e);
        return ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "redis is out of memory (maxmemory reached): close queues or raise maxmemory",
        );
    }
    tracing::warn!(error = %e, "admin request failed on redis");
    ApiError::unavailable("redis is unavailable")
}

/// A booking service's request: its `Authorization: Bearer` token must be
/// `USHER_SERVICE_TOKEN`. `401` otherwise, and while the token is unset (`reports` names what
/// is then refused, e.g. "load reports").
pub(crate) fn service_bearer(
    st: &AppState,
    headers: &HeaderMap,
    reports: &str,
) -> Result<(), ApiError> {
    let Some(expected) = &st.service_token else {
        return Err(ApiError::unauthorized(format!(
            "USHER_SERVICE_TOKEN is not set: {reports} are refused"
        )));
    };
    if !bearer_is(headers, expected) {
        return Err(ApiError::unauthorized(
            "missing or wrong service bearer token",
        ));
    }
    Ok(())
}

/// Whether the request's `Authorization: Bearer` token is `expected`. Compares digests:
/// constant time, and no length leak.
pub(crate) fn bearer_is(headers: &HeaderMap, expected: &str) -> bool {
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let (g, e) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(expected.as_bytes()),
    );
    bool::from(g[..].ct_eq(&e[..]))
}
