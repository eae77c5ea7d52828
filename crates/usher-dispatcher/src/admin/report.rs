//! The fairness report (docs/fairness-report.md): its settings in `PUT /admin/queues/{q}`
//! (`record`, `record_retention_seconds`), checked and applied here and recorded by the
//! scripts (`usher_core::record`), and `GET /admin/queues/{queue}/report`, which reads the
//! record through the store and answers JSON or CSV.

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use std::sync::Arc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use usher_core::ids::QueueId;
use usher_core::record::report::FairnessReport;
use usher_core::record::RETENTION_SECONDS;
use usher_core::store::QueueConfig;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// The `Retry-After` of a report refused because another is being made (a report of
/// 100,000 places takes a fraction of a second; BENCHMARKS.md).
const REPORT_RETRY_AFTER_SECS: u64 = 2;

/// The permit to make a report: one at a time per dispatcher. A second one is refused
/// (`429`, `Retry-After`) rather than queued, so reports never pile up beside the ticks
/// (docs/fairness-report.md).
fn one_report(reports: &Arc<Semaphore>) -> Result<OwnedSemaphorePermit, ApiError> {
    reports.clone().try_acquire_owned().map_err(|_| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "another fairness report is being made: try again shortly",
        )
        .retry_after(REPORT_RETRY_AFTER_SECS)
    })
}

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
        (status = 429, description = "Another report is being made by this dispatcher (one at a time): try again after `Retry-After` seconds.", body = usher_http::openapi::ErrorBody,
            headers(("Retry-After" = u64, description = "Seconds to wait before asking again."))),
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
    let _one = one_report(&st.reports)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A second report while one is being made is refused with `429` and `Retry-After`;
    /// once the first is done, the next is made.
    #[test]
    fn one_report_at_a_time() {
        let reports = Arc::new(Semaphore::new(1));
        let first = one_report(&reports).expect("the first report");
        let refused = one_report(&reports).expect_err("a second one at once");
        assert_eq!(refused.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.retry_after, Some(REPORT_RETRY_AFTER_SECS));
        drop(first);
        assert!(
            one_report(&reports).is_ok(),
            "the next, once the first is done"
        );
    }
}
