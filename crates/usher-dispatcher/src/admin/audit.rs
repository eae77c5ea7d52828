//! The audit trail: every admin write (any method but `GET`/`HEAD` on an admin route) is
//! recorded with who made it (the admin token's label), what it was (method, path and query,
//! the body shortened), when, and the status it got. Records go to the log (a `tracing`
//! event with target `audit`) and to a capped Redis stream, which `GET /admin/audit` reads.
//!
//! Admin bodies carry queue settings and notices, never a token, and the `Authorization`
//! header is not recorded; a sale's `draw_seed` (secret until its draw) is recorded as
//! `"<secret>"`. So the trail holds no secret.

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use usher_core::store::AuditRecord;
use usher_core::time::now_ms;
use usher_http::ApiError;

use super::auth::AdminLabel;
use crate::state::{redis_down, AppState};

/// Largest admin body read (settings and notices are far smaller).
const MAX_BODY: usize = 64 * 1024;
/// Longest body summary kept in a record, in characters.
const SUMMARY_CHARS: usize = 500;
/// Records `GET /admin/audit` answers by default, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;

/// Body fields never recorded: their value is replaced.
const SECRET_FIELDS: &[&str] = &["draw_seed"];

/// A body as recorded: compact JSON when it is JSON (its [`SECRET_FIELDS`] hidden), else its
/// size; cut at [`SUMMARY_CHARS`].
fn summarise(body: &[u8]) -> String {
    if body.is_empty() {
        return String::new();
    }
    let text = match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(mut v) => {
            if let Some(o) = v.as_object_mut() {
                for f in SECRET_FIELDS {
                    if let Some(x) = o.get_mut(*f) {
                        *x = "<secret>".into();
                    }
                }
            }
            v.to_string()
        }
        Err(_) => format!("<{} bytes, not JSON>", body.len()),
    };
    match text.char_indices().nth(SUMMARY_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

/// Records admin writes (layered inside [`super::auth::authorize`], which sets the
/// label).
pub(crate) async fn record(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD) {
        return next.run(req).await;
    }
    let who = req
        .extensions()
        .get::<AdminLabel>()
        .map_or_else(|| "unknown".to_owned(), |l| l.0.to_string());
    let method = req.method().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map_or_else(|| req.uri().path().to_owned(), |p| p.as_str().to_owned());
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            return ApiError::bad_request(format!(
                "admin request body unreadable or over {MAX_BODY} bytes"
            ))
            .into_response()
        }
    };
    let summary = summarise(&bytes);
    let resp = next
        .run(Request::from_parts(parts, Body::from(bytes)))
        .await;
    let rec = AuditRecord {
        id: String::new(),
        at_ms: now_ms(),
        who,
        method,
        path,
        status: resp.status().as_u16(),
        summary,
    };
    tracing::info!(
        target: "audit",
        who = %rec.who,
        method = %rec.method,
        path = %rec.path,
        status = rec.status,
        summary = %rec.summary,
        "admin change"
    );
    if let Err(e) = st.store.append_audit(&rec).await {
        // The log line above is the record then; the change itself is done.
        let _ = redis_down(e);
        tracing::warn!(target: "audit", who = %rec.who, path = %rec.path, "audit record not stored in redis (it is in this log)");
    }
    resp
}

/// `GET /admin/audit` query.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    pub limit: Option<usize>,
}

/// `GET /admin/audit` answer, newest first.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct AuditList {
    pub records: Vec<AuditRecord>,
}

/// `GET /admin/audit?limit=N`: the newest records, newest first.
#[utoipa::path(
    get,
    path = "/admin/audit",
    tag = "admin",
    security(("admin_token" = [])),
    params(("limit" = Option<usize>, Query, minimum = 1, maximum = 1000, description = "How many records (default 100).")),
    responses(
        (status = 200, description = "The newest admin changes, newest first.", body = AuditList),
        (status = 400, description = "`limit` out of 1–1000, or an unknown query parameter.", body = usher_http::openapi::ErrorBody),
        super::errors::AdminReadErrors,
    ),
)]
pub(crate) async fn list(
    State(st): State<AppState>,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> Result<Json<AuditList>, ApiError> {
    let Query(q) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let limit = q.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(format!(
            "limit must be between 1 and {MAX_LIMIT}"
        )));
    }
    let records = st.store.audit_log(limit).await.map_err(redis_down)?;
    Ok(Json(AuditList { records }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_are_compact_and_short() {
        assert_eq!(summarise(b"{ \"open\" : true }"), r#"{"open":true}"#);
        assert_eq!(summarise(b"\xff\xfe"), "<2 bytes, not JSON>");
        assert_eq!(summarise(b""), "");
        let long = format!("{{\"message\":\"{}\"}}", "é".repeat(2000));
        let s = summarise(long.as_bytes());
        assert_eq!(s.chars().count(), SUMMARY_CHARS + 1);
        assert!(s.ends_with('…'));
    }
}
