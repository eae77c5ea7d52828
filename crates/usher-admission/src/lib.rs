//! The booking service's side of [usher](https://example.invalid/usher), for Rust services.
//!
//! A user reaches your booking service after usher admitted them, carrying an **entry token**
//! (`Authorization: Bearer <token>`): an Ed25519-signed JWT whose `aud` is the queue, `sub`
//! the place in line, `jti` the session and `exp` the session's hard cap. Two questions:
//!
//! * **Is it a genuine usher token within its cap?** Answered offline by [`Admission::verify`]
//!   against the dispatcher's JWKS: fetched on first use, cached, and fetched again when a
//!   token names an unknown `kid` (key rotation needs no restart). One fetch at a time;
//!   concurrent callers with unknown kids wait for it, a token whose kid is cached never waits,
//!   and a kid still unknown after a fetch is refused without fetching again for a few seconds.
//! * **Is the session still active?** It may have been released or may have expired before
//!   the cap: an online question, answered by the dispatcher ([`Admission::check`]). A sliding
//!   session is kept alive with [`Admission::touch`]; [`Admission::release`] ends it when the
//!   booking is done, so the token cannot be used again and the slot frees at once.
//!
//! A queue with `bind: "browser_key"` binds its tokens to the browser's key (`cnf.jkt`): such a
//! token is accepted only with a proof of that key ([`check_proof`], [`Admission::verify_bound`]),
//! so a copied token is useless.
//!
//! [`Admission::layer`] does both for every request to the routes it guards, and
//! [`Admission::report_load`] feeds the dispatcher's adaptive admission rate.
//!
//! HTTP goes through `reqwest` with rustls: `https://` URLs work without OpenSSL.
//!
//! # Example
//!
//! ```no_run
//! use axum::routing::post;
//! use axum::{Extension, Json, Router};
//! use usher_admission::{Admission, Claims};
//!
//! async fn book(Extension(claims): Extension<Claims>) -> Json<serde_json::Value> {
//!     // Only admitted users with an active session get here.
//!     Json(serde_json::json!({ "booked_for": claims.sub, "queue": claims.aud }))
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let admission = Admission::builder("http://usher-dispatcher:8081")
//!     .audiences(["show"])
//!     .service_token("the USHER_SERVICE_TOKEN of the dispatcher")
//!     .build()?;
//!
//! let app: Router = Router::new()
//!     .route("/book", post(book))
//!     // 401 without a token, 403 for a bad, expired or ended one, JSON errors.
//!     .route_layer(admission.layer());
//!
//! // Outside the layer, the same checks by hand:
//! # let token = "";
//! let claims = admission.verify(token).await?; // offline
//! let session = admission.check(token).await?; // online: Active, Ended or Invalid
//! admission.release(token).await?; // done: free the slot
//! admission.report_load("booking-main", 42.5).await?; // adaptive rate
//! # let _ = (claims, session, app);
//! # Ok(())
//! # }
//! ```

mod claims;
mod keys;
mod layer;
mod proof;
mod session;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use url::Url;

pub use claims::{Claims, VerifyError};
pub use keys::{KeyError, NEGATIVE_TTL};
pub use layer::{AdmissionGuard, AdmissionLayer};
pub use proof::{
    check_proof, check_proof_at, BoundError, Confirmation, ProofClaims, ProofError,
    PROOF_MAX_AGE_SECS,
};
pub use session::{ActiveSession, SessionStatus};

use keys::Keys;
use session::SessionApi;

/// How long one HTTP call to the dispatcher (or the JWKS URL) may take, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// A failed call to the dispatcher.
#[derive(Debug, thiserror::Error)]
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
    /// [`Admission::report_load`] without a service token ([`Builder::service_token`]).
    #[error("no service token is configured")]
    NoServiceToken,
    /// The dispatcher refused the service token (`401`).
    #[error("the dispatcher refused the service token")]
    Unauthorized,
    /// The dispatcher refused the load report (`400`), or it was not a finite number.
    #[error("load report refused: {0}")]
    Rejected(String),
    /// A URL could not be built.
    #[error("bad URL: {0}")]
    Url(#[from] url::ParseError),
}

/// Why an [`Admission`] could not be built.
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
}

/// The booking service's handle on usher: cheap to clone, shared by every request.
#[derive(Clone)]
pub struct Admission {
    inner: Arc<Inner>,
}

struct Inner {
    keys: Keys,
    sessions: SessionApi,
    audiences: Option<Vec<String>>,
    service_token: Option<String>,
}

/// Configures an [`Admission`]; from [`Admission::builder`].
pub struct Builder {
    dispatcher_url: String,
    jwks_url: Option<String>,
    audiences: Option<Vec<String>>,
    service_token: Option<String>,
    timeout: Duration,
    http: Option<reqwest::Client>,
}

impl Builder {
    /// The JWKS URL; default `<dispatcher URL>/.well-known/jwks.json`.
    pub fn jwks_url(mut self, url: impl Into<String>) -> Self {
        self.jwks_url = Some(url.into());
        self
    }

    /// The queues whose tokens [`Admission::verify`] (and so the layer) accepts; by default
    /// any queue of the dispatcher's.
    pub fn audiences<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.audiences = Some(queues.into_iter().map(Into::into).collect());
        self
    }

    /// The dispatcher's `USHER_SERVICE_TOKEN`, for [`Admission::report_load`].
    pub fn service_token(mut self, token: impl Into<String>) -> Self {
        self.service_token = Some(token.into());
        self
    }

    /// How long one HTTP call may take (default [`DEFAULT_TIMEOUT`]); ignored with
    /// [`Builder::http_client`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The HTTP client to use, e.g. one that trusts a private CA
    /// (`reqwest::ClientBuilder::add_root_certificate`). Give it a timeout.
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.http = Some(client);
        self
    }

    pub fn build(self) -> Result<Admission, BuildError> {
        let mut base = http_url(&self.dispatcher_url)?;
        // A base URL: joined paths go below its path prefix, if any.
        if !base.path().ends_with('/') {
            let p = format!("{}/", base.path());
            base.set_path(&p);
        }
        let jwks = match self.jwks_url {
            Some(u) => http_url(&u)?,
            None => base
                .join(".well-known/jwks.json")
                .map_err(|source| BuildError::Url {
                    url: self.dispatcher_url.clone(),
                    source,
                })?,
        };
        let http = match self.http {
            Some(c) => c,
            None => reqwest::Client::builder().timeout(self.timeout).build()?,
        };
        let sessions = SessionApi::new(&base, http.clone()).map_err(|source| BuildError::Url {
            url: self.dispatcher_url.clone(),
            source,
        })?;
        Ok(Admission {
            inner: Arc::new(Inner {
                keys: Keys::new(jwks.to_string(), http),
                sessions,
                audiences: self.audiences,
                service_token: self.service_token,
            }),
        })
    }
}

/// Parses an `http://` or `https://` URL.
fn http_url(s: &str) -> Result<Url, BuildError> {
    let url = Url::parse(s).map_err(|source| BuildError::Url {
        url: s.to_owned(),
        source,
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(BuildError::Scheme(s.to_owned()));
    }
    Ok(url)
}

impl Admission {
    /// Starts configuring a handle on the dispatcher at `dispatcher_url` (e.g.
    /// `http://usher-dispatcher:8081`).
    pub fn builder(dispatcher_url: impl Into<String>) -> Builder {
        Builder {
            dispatcher_url: dispatcher_url.into(),
            jwks_url: None,
            audiences: None,
            service_token: None,
            timeout: DEFAULT_TIMEOUT,
            http: None,
        }
    }

    /// Offline: is `token` a genuine usher entry token within its cap, for one of the
    /// configured [audiences](Builder::audiences)? Says nothing about whether the session is
    /// still active; see [`Admission::check`].
    pub async fn verify(&self, token: &str) -> Result<Claims, VerifyError> {
        let audiences = self.inner.audiences.as_deref();
        claims::verify(&self.inner.keys, token, audiences).await
    }

    /// [`Admission::verify`] for a token that must admit to `queue`.
    pub async fn verify_for(&self, token: &str, queue: &str) -> Result<Claims, VerifyError> {
        let audiences = [queue.to_owned()];
        claims::verify(&self.inner.keys, token, Some(&audiences)).await
    }

    /// Online: where the token's session stands (`GET /api/session`).
    pub async fn check(&self, token: &str) -> Result<SessionStatus, Error> {
        self.inner.sessions.check(token).await
    }

    /// Online: keeps a sliding session alive, up to its cap (`POST /api/session/touch`); a
    /// fixed session is only checked.
    pub async fn touch(&self, token: &str) -> Result<SessionStatus, Error> {
        self.inner.sessions.touch(token).await
    }

    /// Ends the token's session (`DELETE /api/session`): the slot frees at once and the
    /// token is refused from then on. Idempotent: [`SessionStatus::Ended`], or
    /// [`SessionStatus::Invalid`] for a token the dispatcher does not accept.
    pub async fn release(&self, token: &str) -> Result<SessionStatus, Error> {
        self.inner.sessions.release(token).await
    }

    /// Reports this service's load to the dispatcher, for the queues whose adaptive rate
    /// follows `backend` (`PUT /api/backends/{backend}/load` with the service token). Report
    /// regularly: a backend with no fresh report is read as down, and its queues stop admitting.
    pub async fn report_load(&self, backend: &str, load: f64) -> Result<(), Error> {
        let token = self
            .inner
            .service_token
            .as_deref()
            .ok_or(Error::NoServiceToken)?;
        self.inner.sessions.report_load(token, backend, load).await
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

    /// The session API's and the JWKS's URLs.
    fn urls(a: &Admission) -> (String, String) {
        (
            a.inner.sessions.session.to_string(),
            a.inner.keys.url.clone(),
        )
    }

    #[test]
    fn urls_keep_a_path_prefix_and_refuse_other_schemes() {
        let a = Admission::builder("http://d:8081/usher").build();
        assert_eq!(
            a.as_ref().ok().map(urls),
            Some((
                "http://d:8081/usher/api/session".to_owned(),
                "http://d:8081/usher/.well-known/jwks.json".to_owned()
            ))
        );
        let jwks = Admission::builder("https://d")
            .jwks_url("https://keys.example/jwks.json")
            .build();
        assert_eq!(
            jwks.as_ref().ok().map(|a| urls(a).1).as_deref(),
            Some("https://keys.example/jwks.json")
        );
        assert!(matches!(http_url("ftp://d/"), Err(BuildError::Scheme(_))));
        assert!(matches!(http_url("not a url"), Err(BuildError::Url { .. })));
    }
}
