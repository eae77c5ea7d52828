//! The booking service's side of [usher](https://example.invalid/usher), for Rust services.
//!
//! A user reaches your booking service after usher admitted them, carrying an **entry token**
//! (`Authorization: Bearer <token>`): an Ed25519-signed JWT whose `aud` is the queue, `sub`
//! the place in line, `jti` the session and `exp` the session's hard cap. Two questions:
//!
//! * **Is it a genuine usher token within its cap, for a queue this service sells?** Answered
//!   offline by [`Admission::verify`] against the dispatcher's JWKS: fetched on first use,
//!   cached, and fetched again when a token names an unknown `kid` (key rotation needs no
//!   restart) or the set is older than its maximum age (a removed key stops being accepted).
//!   One fetch at a time, at most one per minimum gap whatever the `kid`
//!   ([`Builder::jwks_refresh`]); a token whose kid is cached never waits.
//! * **Is the session still active?** It may have been released or may have expired before
//!   the cap: an online question, answered by the dispatcher ([`Admission::check`]), always
//!   for the queue this service sells (`?queue=`: another queue's token is
//!   [`SessionStatus::OtherQueue`]). A sliding session is kept alive with
//!   [`Admission::touch`]. To book, [`Admission::consume`] ends the session and says whether
//!   this call ended it: book only on [`Consumption::Consumed`], and one admission books once
//!   however many requests race with its token.
//!
//! The builder requires the queues ([`Builder::audiences`], or [`Builder::any_queue`] for a
//! service that takes the queue per request and passes it to the `*_for` calls):
//! [`BuildError::NoAudience`] otherwise, so no service accepts every queue's tokens by
//! forgetting a line. A handle with only a service token still builds: it reports load and
//! judges no token.
//!
//! A queue with `bind: "browser_key"` binds its tokens to the browser's key (`cnf.jkt`): such a
//! token is accepted only with a proof of that key ([`check_proof`], [`Admission::verify_bound`]),
//! so a copied token is useless. The dispatcher asks for the proof too: pass the browser's on
//! with [`Admission::check_bound`], [`Admission::touch_bound`], [`Admission::consume_bound`]
//! and [`Admission::release_bound`] ([`Proof`]); the plain calls get
//! [`SessionStatus::ProofRefused`] for a bound token.
//!
//! A queue with `on_outage: "open"` lets browsers through while usher's Redis is unreachable,
//! each with a **door token** ([`Claims::is_door`]): a bearer pass for its window, signed by the
//! dispatcher's key, that names no place. The session calls answer it here, offline, without
//! the dispatcher (`Active` until its `exp`; a consume records nothing, so it may book more
//! than once: limit door bookings yourself where that matters).
//!
//! [`Admission::layer`] does both for every request to the routes it guards,
//! [`Admission::report_load`] feeds the dispatcher's adaptive admission rate, and
//! [`Admission::report_inventory`] tells it what is left to sell.
//!
//! HTTP goes through `reqwest` with rustls: `https://` URLs work without OpenSSL.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use axum::routing::post;
//! use axum::{Extension, Json, Router};
//! use usher_admission::{Admission, Claims, Consumption};
//!
//! async fn book(Extension(claims): Extension<Claims>) -> Json<serde_json::Value> {
//!     // Only admitted users with an active session get here.
//!     Json(serde_json::json!({ "booked_for": claims.sub, "queue": claims.aud }))
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let admission = Admission::builder("http://usher-dispatcher:8081")
//!     .audiences(["show"]) // or .any_queue(), with the *_for calls
//!     .jwks_refresh(Duration::from_secs(3), Duration::from_secs(300))
//!     .service_token("the USHER_SERVICE_TOKEN of the dispatcher")
//!     .build()?;
//!
//! let app: Router = Router::new()
//!     .route("/book", post(book))
//!     // 401 without a token, 403 for a bad, expired or ended one or another queue's.
//!     .route_layer(admission.layer());
//!
//! // Outside the layer, the same checks by hand:
//! # let token = "";
//! let claims = admission.verify(token).await?; // offline
//! let session = admission.check(token).await?; // online: Active, Ended, OtherQueue, …
//! if let Consumption::Consumed(_) = admission.consume(token).await? {
//!     // This call, and no other, ended the session: book.
//! }
//! admission.report_load("booking-main", 42.5).await?; // adaptive rate
//! # let _ = (claims, session, app);
//! # Ok(())
//! # }
//! ```

mod builder;
mod calls;
mod claims;
// >>> door
mod door;
// <<< door
mod error;
mod keys;
mod layer;
mod proof;
mod reports;
mod session;

use std::sync::Arc;

use http::HeaderMap;

pub use builder::{Builder, DEFAULT_TIMEOUT};
pub use claims::{Claims, VerifyError};
pub use error::{BuildError, Error};
pub use keys::{KeyError, DEFAULT_JWKS_MAX_AGE, DEFAULT_JWKS_MIN_GAP};
pub use layer::{AdmissionGuard, AdmissionLayer};
pub use proof::{
    check_proof, check_proof_at, BoundError, Confirmation, ProofClaims, ProofError,
    PROOF_MAX_AGE_SECS,
};
pub use session::{ActiveSession, Consumption, Proof, SessionStatus};

use keys::Keys;
use session::SessionApi;

/// Which queues' tokens a handle accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Audience {
    /// Only these.
    Queues(Vec<String>),
    /// Any queue of the dispatcher's; the service names one per call (`*_for`).
    Any,
    /// None: the handle only reports load (built with a service token and no audience).
    LoadOnly,
}

impl Audience {
    /// Is `queue`, named by a request, one this handle judges tokens for? A queue outside
    /// its audiences is refused whatever the token's own queue: else a quiet queue's token
    /// passes a busy queue's route that takes the queue from the request.
    fn takes(&self, queue: &str) -> bool {
        match self {
            Audience::Queues(qs) => qs.iter().any(|q| q == queue),
            Audience::Any => true,
            Audience::LoadOnly => false,
        }
    }
}

/// The booking service's handle on usher: cheap to clone, shared by every request.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Keys,
    sessions: SessionApi,
    audience: Audience,
    service_token: Option<String>,
}

impl Admission {
    /// Offline: is `token` a genuine usher entry token within its cap, for one of the
    /// configured [audiences](Builder::audiences)? Says nothing about whether the session is
    /// still active; see [`Admission::check`].
    ///
    /// A token bound to a browser key (`cnf`) is refused here ([`VerifyError::Bound`]): a
    /// bearer check cannot tell its browser from a copy. Use [`Admission::verify_bound`].
    pub async fn verify(&self, token: &str) -> Result<Claims, VerifyError> {
        let audiences = match &self.inner.audience {
            Audience::Queues(q) => q.as_slice(),
            // Any queue's token would pass: the queue must come from the request (`*_for`).
            Audience::Any => return Err(VerifyError::QueueRequired),
            Audience::LoadOnly => return Err(VerifyError::NoAudience),
        };
        unbound(claims::verify(&self.inner.keys, token, audiences).await?)
    }

    /// [`Admission::verify`] for a token that must admit to `queue` (a bound token refused
    /// alike).
    pub async fn verify_for(&self, token: &str, queue: &str) -> Result<Claims, VerifyError> {
        unbound(self.verify_for_any_binding(token, queue).await?)
    }

    /// [`Admission::verify_for`] whether or not the token is bound: for
    /// [`Admission::verify_bound`], which checks the proof next.
    pub(crate) async fn verify_for_any_binding(
        &self,
        token: &str,
        queue: &str,
    ) -> Result<Claims, VerifyError> {
        match &self.inner.audience {
            Audience::LoadOnly => return Err(VerifyError::NoAudience),
            a if !a.takes(queue) => return Err(VerifyError::Audience),
            _ => {}
        }
        claims::verify(&self.inner.keys, token, &[queue.to_owned()]).await
    }

    /// A tower layer that guards routes with this handle (see [`AdmissionLayer`]).
    pub fn layer(&self) -> AdmissionLayer {
        AdmissionLayer::new(self.clone())
    }
}

/// The bearer token of `Authorization: Bearer <token>` (the scheme in any case).
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Refuses a token bound to a browser key on a bearer path (see [`VerifyError::Bound`]).
fn unbound(c: Claims) -> Result<Claims, VerifyError> {
    if c.cnf.is_some() {
        Err(VerifyError::Bound)
    } else {
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_in_any_scheme_case() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        for (value, want) in [
            ("Bearer abc", Some("abc")),
            ("bearer abc", Some("abc")),
            ("Basic abc", None),
            ("Bearer ", None),
            ("Bearer", None),
        ] {
            h.insert(
                http::header::AUTHORIZATION,
                http::HeaderValue::from_static(value),
            );
            assert_eq!(bearer_token(&h), want, "{value}");
        }
    }
}
