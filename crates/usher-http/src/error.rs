//! The one shape of every HTTP error usher answers: `{"error": "..."}` with a status code.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// An error answered as `{"error": "..."}` with a status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// Seconds for a `Retry-After` header (a `429` or `503` that knows when to come back).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            retry_after: None,
        }
    }
    /// The same error, answered with `Retry-After: secs` (at least 1).
    #[must_use]
    pub fn retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs.max(1));
        self
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, m)
    }
    /// Redis (or another dependency) failed: logged by the caller, answered as 503.
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (
            self.status,
            axum::Json(crate::openapi::ErrorBody {
                error: self.message,
            }),
        )
            .into_response();
        if let Some(secs) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        response
    }
}

/// Longest framework error text carried over into a JSON error.
const MAX_ERROR_TEXT: usize = 4096;

/// A response extension: this error answer is a page for people on purpose (the waiting
/// room's page for an unknown or closed queue), and [`json_errors`] leaves it as it is.
#[derive(Debug, Clone, Copy)]
pub struct PageForPeople;

/// Middleware: an error answer (4xx, 5xx) that is not JSON already (nor a [`PageForPeople`]) — the router's own 404 and
/// 405, an extractor's rejection (plain text) — becomes `{"error": "..."}` with the same
/// status and headers (e.g. `Allow`), its text (or the status's reason) as the message. So
/// every error a client sees has the one shape docs/http-contract.md promises.
pub async fn json_errors(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let response = next.run(req).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    let for_people = response.extensions().get::<PageForPeople>().is_some();
    if !(status.is_client_error() || status.is_server_error()) || is_json || for_people {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_TEXT)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let message = if text.is_empty() {
        status
            .canonical_reason()
            .unwrap_or("request failed")
            .to_ascii_lowercase()
    } else {
        text
    };
    let json = ApiError::new(status, message).into_response();
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    let (json_parts, json_body) = json.into_parts();
    parts.headers.extend(json_parts.headers);
    Response::from_parts(parts, json_body)
}
