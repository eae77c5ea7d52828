//! The error answers admin routes share, as the API description lists them.
//!
//! Apart from `openapi.rs` so that every module describing an admin route can name them
//! without importing the module that imports it (`sale` is imported by `queues`, which
//! `openapi` imports).

use usher_http::openapi::ErrorBody;
use utoipa::IntoResponses;

/// Errors every admin read may answer.
#[derive(IntoResponses)]
#[allow(dead_code)] // A description: the handlers answer `ApiError`.
pub(crate) enum AdminReadErrors {
    /// Missing or wrong admin bearer token.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Redis is unreachable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// Errors every admin change may answer (beyond the route's own).
#[derive(IntoResponses)]
#[allow(dead_code)] // A description: the handlers answer `ApiError`.
pub(crate) enum AdminWriteErrors {
    /// A malformed queue id or body, or a setting out of range.
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// Missing or wrong admin bearer token.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// Redis is unreachable.
    #[response(status = 503)]
    Unavailable(ErrorBody),
    /// Redis is out of memory: the change was refused (reads and `DELETE` still work).
    #[response(status = 507)]
    OutOfMemory(ErrorBody),
}
