//! The fairness report (docs/fairness-report.md): its settings in `PUT /admin/queues/{q}`
//! (`record`, `record_retention_seconds`), checked and applied here and recorded by the
//! scripts (`usher_core::record`), and `GET /admin/queues/{queue}/report`, which reads the
//! record through the store and answers JSON or CSV.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use usher_core::ids::QueueId;
use usher_core::record::report::FairnessReport;
use usher_core::record::RETENTION_SECONDS;
use usher_core::store::QueueConfig;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// What a `PUT` body says of the record: absent fields keep their value.
pub(super) struct RecordChange {
    pub record: Option<bool>,
    pub record_retention_seconds: Option<u64>,
}

/// Applies `change` to `cfg`; a retention out of bounds is refused (`400`).
pub(super) fn apply(cfg: &mut QueueConfig, change: RecordChange) -> Result<(), ApiError> {
    if let Some(s) = change.record_retention_seconds {
        if !RETENTION_SECONDS.contains(&s) {
            return Err(ApiError::bad_request(format!(
                "record_retention_seconds must be between {} and {}",
                RETENTION_SECONDS.start(),
                RETENTION_SECONDS.end()
            )));
        }
        cfg.record_retention_seconds = s;
    }
    if let Some(r) = change.record {
        cfg.record = r;
    }
    Ok(())
}

/// The report's form: `?format=csv`, or `Accept: text/csv`; JSON otherwise.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ReportQuery {
    /// `json` (the default) or `csv`.
    format: Option<String>,
}

#[utoipa::path(
    get,
    path = "/admin/queues/{queue}/report",
    tag = "admin",
    security(("admin_token" = [])),
    params(
        ("queue" = QueueId, Path, description = "The queue id."),
        ReportQuery,
    ),
    responses(
        (status = 200, description = "The queue's fairness report (docs/fairness-report.md). A queue that did not record answers `{\"queue\": …, \"recorded\": false}` and nothing else. As CSV (`?format=csv` or `Accept: text/csv`): one `key,value` row per value of the JSON form, the key its path (`order.inversions`).", body = FairnessReport,
            content(
                (FairnessReport = "application/json"),
                (String = "text/csv"),
            )),
        (status = 400, description = "A malformed queue id, or an unknown `format`.", body = usher_http::openapi::ErrorBody),
        (status = 404, description = "No such queue.", body = usher_http::openapi::ErrorBody),
        super::errors::AdminReadErrors,
    ),
)]
pub(crate) async fn get_report(
    State(st): State<AppState>,
    Path(raw): Path<String>,
    Query(query): Query<ReportQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let q = QueueId::new(&raw).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let csv = match query.format.as_deref() {
        Some("csv") => true,
        Some("json") => false,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format must be json or csv, not {other:?}"
            )))
        }
        None => headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/csv")),
    };
    let report = st
        .store
        .fairness_report(&q)
        .await
        .map_err(redis_down)?
        .ok_or_else(|| ApiError::not_found(format!("no queue {raw:?}")))?;
    if csv {
        let disposition = format!("attachment; filename=\"{q}-fairness.csv\"");
        return Ok((
            StatusCode::OK,
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
                (header::CONTENT_DISPOSITION, disposition),
            ],
            report.to_csv(),
        )
            .into_response());
    }
    Ok(Json(report).into_response())
}
