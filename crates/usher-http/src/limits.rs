//! What a slow or greedy client may take from a server: how long a request head and a request
//! body may take to arrive, how large a body may be, and how many connections may be open.
//!
//! The dispatcher and the demo booking service take these as flags ([`ServeLimits`], flattened
//! into their configurations) and [`crate::serve`] applies them; the gateway has its own HTTP
//! server and applies the same rules itself.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use tokio::time::Instant;

use crate::ApiError;

/// Largest request body read (the APIs take small JSON documents).
pub const MAX_BODY: usize = 1024 * 1024;

/// Limits on slow and idle clients, for servers run with [`crate::serve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct ServeLimits {
    /// Seconds a client has to send a whole request head, from the moment the server waits for
    /// it: on a new connection, and between requests on a keep-alive connection (hyper times
    /// both with one timer, so this is also the idle keep-alive timeout). A client that is
    /// slower is disconnected, so slow clients cannot hold descriptors.
    #[arg(long, env = "USHER_HEADER_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub header_timeout_secs: u64,

    /// Seconds a client has to send a whole request body, however it trickles in (a deadline
    /// for the whole body, not for each read). Past it the request is answered `408`.
    #[arg(long, env = "USHER_BODY_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub body_timeout_secs: u64,

    /// Most client connections open at once. A connection past it is closed as soon as it is
    /// accepted (it would otherwise sit in the kernel's backlog, or take a descriptor the
    /// process needs). Keep it below the process's open-file limit.
    #[arg(long, env = "USHER_MAX_SOCKETS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sockets: u64,
}

impl Default for ServeLimits {
    fn default() -> Self {
        Self {
            header_timeout_secs: 10,
            body_timeout_secs: 10,
            max_sockets: 4096,
        }
    }
}

impl ServeLimits {
    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs(self.header_timeout_secs)
    }
    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs(self.body_timeout_secs)
    }
}

/// Why a request body was cut.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    TooLarge,
    Late,
}

/// Puts a deadline and [`MAX_BODY`] on the request body, without reading it: the body is
/// read by whoever needs it, after the checks before it (the admin token), so a request that
/// fails them is answered at once and its body never read (buffering it first let anyone
/// without a token make the server hold a megabyte for ten seconds). A body that trickles in
/// past the deadline is cut (`408`), one too large is refused (`413`), whatever the handler
/// made of the failed read.
pub async fn body_deadline(deadline: Duration, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let cut: Arc<OnceLock<Cut>> = Arc::default();
    let body = Body::from_stream(limited(body, Instant::now() + deadline, cut.clone()));
    let response = next.run(Request::from_parts(parts, body)).await;
    match cut.get() {
        None => response,
        Some(Cut::TooLarge) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "request bodies are limited to 1 MiB",
        )
        .into_response(),
        Some(Cut::Late) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time",
        )
        .into_response(),
    }
}

/// `body`'s data, ending with an error (recorded in `cut`) past `deadline` or [`MAX_BODY`].
fn limited(
    body: Body,
    deadline: Instant,
    cut: Arc<OnceLock<Cut>>,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Send {
    let state = Some((body.into_data_stream(), 0usize));
    futures::stream::unfold(state, move |state| {
        let cut = cut.clone();
        async move {
            let (mut frames, seen) = state?;
            let failed = |c: Cut| {
                let _ = cut.set(c);
                Some((
                    Err(axum::Error::new(format!("request body cut: {c:?}"))),
                    None,
                ))
            };
            match tokio::time::timeout_at(deadline, frames.next()).await {
                Err(_) => failed(Cut::Late),
                Ok(None) => None,
                Ok(Some(Err(e))) => Some((Err(e), None)),
                Ok(Some(Ok(b))) if seen + b.len() > MAX_BODY => failed(Cut::TooLarge),
                Ok(Some(Ok(b))) => {
                    let seen = seen + b.len();
                    Some((Ok(b), Some((frames, seen))))
                }
            }
        }
    })
}
