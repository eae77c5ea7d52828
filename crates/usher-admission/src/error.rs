//! The errors of this crate's calls: [`Error`] for a call to the dispatcher that failed,
//! [`BuildError`] for a handle that could not be configured.

use std::time::Duration;

/// A failed call to the dispatcher.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The dispatcher could not be reached, or timed out.
    #[error("cannot reach the dispatcher: {0}")]
    Unreachable(#[source] reqwest::Error),
    /// The dispatcher answered a status this call does not expect (e.g. `503`).
    #[error("the dispatcher answered {status}")]
    Unexpected { status: http::StatusCode },
    /// The dispatcher's answer could not be read.
    #[error("cannot read the dispatcher's answer: {0}")]
    BadReply(String),
    /// [`Admission::report_load`] or [`Admission::report_inventory`] without a service token
    /// ([`Builder::service_token`]).
    ///
    /// [`Admission::report_load`]: crate::Admission::report_load
    /// [`Admission::report_inventory`]: crate::Admission::report_inventory
    /// [`Builder::service_token`]: crate::Builder::service_token
    #[error("no service token is configured")]
    NoServiceToken,
    /// The dispatcher refused the service token (`401`).
    #[error("the dispatcher refused the service token")]
    Unauthorized,
    /// The dispatcher refused the load report (`400`), or it was not a finite number; or it
    /// refused the inventory report (`400`, or `404` for an unknown queue).
    #[error("report refused: {0}")]
    Rejected(String),
    /// A URL could not be built.
    #[error("bad URL: {0}")]
    Url(#[from] url::ParseError),
    /// A session call on a handle that names no queue (built with only a service token).
    #[error("usher-admission is set up without an audience: name the queues this service sells")]
    NoAudience,
    /// A session call without a queue on a handle built with
    /// [`Builder::any_queue`](crate::Builder::any_queue): the dispatcher would answer for a
    /// token of any queue. Use the `*_for` calls.
    #[error("an any_queue handle needs the queue of each request: use the *_for calls")]
    QueueRequired,
}

/// Why an [`Admission`] could not be built.
///
/// [`Admission`]: crate::Admission
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("bad URL {url:?}: {source}")]
    Url {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("{0:?} is not an http:// or https:// URL")]
    Scheme(String),
    #[error("cannot build the HTTP client: {0}")]
    Client(#[from] reqwest::Error),
    /// Neither [`Builder::audiences`] nor [`Builder::any_queue`] (nor a service token, for a handle
    /// that only reports load): such a handle would accept every queue's tokens.
    ///
    /// [`Builder::audiences`]: crate::Builder::audiences
    /// [`Builder::any_queue`]: crate::Builder::any_queue
    #[error(
        "no audience: name the queues whose tokens this service accepts (Builder::audiences), \
         or say Builder::any_queue and pass the queue to the *_for calls"
    )]
    NoAudience,
    /// [`Builder::jwks_refresh`] with a maximum age shorter than the minimum gap.
    ///
    /// [`Builder::jwks_refresh`]: crate::Builder::jwks_refresh
    #[error("jwks_refresh: max_age ({max_age:?}) must be at least min_gap ({min_gap:?})")]
    JwksRefresh {
        min_gap: Duration,
        max_age: Duration,
    },
}
