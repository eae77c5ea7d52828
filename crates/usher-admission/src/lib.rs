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

mod claims;
// >>> door
mod door;
// <<< door
mod keys;
mod layer;
mod proof;
mod session;

use std::sync::Arc;
use std::time::Duration;

use http::HeaderMap;
use url::Url;

pub use claims::{Claims, VerifyError};
pub use keys::{KeyError, DEFAULT_JWKS_MAX_AGE, DEFAULT_JWKS_MIN_GAP};
pub use layer::{AdmissionGuard, AdmissionLayer};
pub use proof::{
    check_proof, check_proof_at, BoundError, Confirmation, ProofClaims, ProofError,
    PROOF_MAX_AGE_SECS,
};
pub use session::{ActiveSession, Consumption, Proof, SessionStatus};

use keys::{Keys, Refresh};
use session::{Call, SessionApi};

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
    /// [`Admission::report_load`] or [`Admission::report_inventory`] without a service token ([`Builder::service_token`]).
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
    /// Neither [`Builder::audiences`] nor [`Builder::any_queue`] (nor a service token, for a
    /// handle that only reports load): such a handle would accept every queue's tokens.
    #[error(
        "no audience: name the queues whose tokens this service accepts (Builder::audiences), \
         or say Builder::any_queue and pass the queue to the *_for calls"
    )]
    NoAudience,
    /// [`Builder::jwks_refresh`] with a maximum age shorter than the minimum gap.
    #[error("jwks_refresh: max_age ({max_age:?}) must be at least min_gap ({min_gap:?})")]
    JwksRefresh {
        min_gap: Duration,
        max_age: Duration,
    },
}

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

/// Configures an [`Admission`]; from [`Admission::builder`].
pub struct Builder {
    dispatcher_url: String,
    jwks_url: Option<String>,
    audience: Option<Audience>,
    service_token: Option<String>,
    timeout: Duration,
    http: Option<reqwest::Client>,
    refresh: Refresh,
}

impl Builder {
    /// The JWKS URL; default `<dispatcher URL>/.well-known/jwks.json`.
    pub fn jwks_url(mut self, url: impl Into<String>) -> Self {
        self.jwks_url = Some(url.into());
        self
    }

    /// The queues whose tokens [`Admission::verify`] (and so the layer) accepts, and that the
    /// session calls ask about (`?queue=`). At least one: an empty list is
    /// [`BuildError::NoAudience`].
    pub fn audiences<I, S>(mut self, queues: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.audience = Some(Audience::Queues(
            queues.into_iter().map(Into::into).collect(),
        ));
        self
    }

    /// Tokens of any queue of the dispatcher's: for a service that takes the queue per request
    /// and names it in [`Admission::verify_for`], [`Admission::check_for`],
    /// [`Admission::touch_for`] and [`Admission::consume_for`] (or the layer's
    /// [`AdmissionLayer::queue_from_query`]). The plain calls then accept any queue's token.
    pub fn any_queue(mut self) -> Self {
        self.audience = Some(Audience::Any);
        self
    }

    /// How often the JWKS is fetched: at most once per `min_gap` whatever the tokens' key ids
    /// (a request with an unknown kid waits for the next fetch, due `min_gap` after the last,
    /// and shared by every request waiting then), and again once the cached set is older than
    /// `max_age`, so a key removed from the set stops being accepted within `max_age`.
    /// Defaults: [`DEFAULT_JWKS_MIN_GAP`] and [`DEFAULT_JWKS_MAX_AGE`].
    pub fn jwks_refresh(mut self, min_gap: Duration, max_age: Duration) -> Self {
        self.refresh = Refresh { min_gap, max_age };
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
        let audience = match self.audience {
            Some(Audience::Queues(q)) if q.is_empty() => return Err(BuildError::NoAudience),
            Some(a) => a,
            None if self.service_token.is_some() => Audience::LoadOnly,
            None => return Err(BuildError::NoAudience),
        };
        let Refresh { min_gap, max_age } = self.refresh;
        if max_age < min_gap {
            return Err(BuildError::JwksRefresh { min_gap, max_age });
        }
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
                keys: Keys::new(jwks.to_string(), http, self.refresh),
                sessions,
                audience,
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
            audience: None,
            service_token: None,
            timeout: DEFAULT_TIMEOUT,
            http: None,
            refresh: Refresh::default(),
        }
    }

    /// Offline: is `token` a genuine usher entry token within its cap, for one of the
    /// configured [audiences](Builder::audiences)? Says nothing about whether the session is
    /// still active; see [`Admission::check`].
    ///
    /// A token bound to a browser key (`cnf`) is refused here ([`VerifyError::Bound`]): a
    /// bearer check cannot tell its browser from a copy. Use [`Admission::verify_bound`].
    pub async fn verify(&self, token: &str) -> Result<Claims, VerifyError> {
        let audiences = match &self.inner.audience {
            Audience::Queues(q) => Some(q.as_slice()),
            Audience::Any => None,
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
        if self.inner.audience == Audience::LoadOnly {
            return Err(VerifyError::NoAudience);
        }
        let audiences = [queue.to_owned()];
        claims::verify(&self.inner.keys, token, Some(&audiences)).await
    }

    /// Online: where the token's session stands (`GET /api/session?queue=`), for the queue of
    /// [`Builder::audiences`] (of several, the token's own when it is one of them).
    pub async fn check(&self, token: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Check, token, None, None).await
    }

    /// [`Admission::check`] for a token that must admit to `queue`.
    pub async fn check_for(&self, token: &str, queue: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Check, token, Some(queue), None)
            .await
    }

    /// Online: keeps a sliding session alive, up to its cap (`POST /api/session/touch`); a
    /// fixed session is only checked.
    pub async fn touch(&self, token: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Touch, token, None, None).await
    }

    /// [`Admission::touch`] for a token that must admit to `queue`.
    pub async fn touch_for(&self, token: &str, queue: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Touch, token, Some(queue), None)
            .await
    }

    /// Online: ends the session and says whether this call ended it
    /// (`POST /api/session/consume`). Book only on [`Consumption::Consumed`]: of any number of
    /// concurrent consumes with one token exactly one gets it, so one admission books once.
    /// The slot frees at once either way.
    pub async fn consume(&self, token: &str) -> Result<Consumption, Error> {
        consumption(self.session_call(Call::Consume, token, None, None).await?)
    }

    /// [`Admission::consume`] for a token that must admit to `queue`.
    pub async fn consume_for(&self, token: &str, queue: &str) -> Result<Consumption, Error> {
        consumption(
            self.session_call(Call::Consume, token, Some(queue), None)
                .await?,
        )
    }

    /// Ends the token's session (`DELETE /api/session`): the slot frees at once and the
    /// token is refused from then on. Idempotent: [`SessionStatus::Ended`], or
    /// [`SessionStatus::Invalid`] for a token the dispatcher does not accept. It does not say
    /// whether this call ended the session: to book once, [`Admission::consume`].
    pub async fn release(&self, token: &str) -> Result<SessionStatus, Error> {
        self.session_call(Call::Release, token, None, None).await
    }

    /// [`Admission::check_for`] for a token bound to the browser's key (`cnf.jkt`), with the
    /// browser's `proof` for the request it sent: the dispatcher checks it and takes it once
    /// (a second call needs the browser's next proof). [`SessionStatus::ProofRefused`] when
    /// it is not good. A token without `cnf` is answered as by [`Admission::check_for`].
    pub async fn check_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<SessionStatus, Error> {
        self.session_call(Call::Check, token, Some(queue), Some(&proof))
            .await
    }

    /// [`Admission::touch_for`] with the browser's proof (see [`Admission::check_bound`]).
    pub async fn touch_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<SessionStatus, Error> {
        self.session_call(Call::Touch, token, Some(queue), Some(&proof))
            .await
    }

    /// [`Admission::consume_for`] with the browser's proof (see [`Admission::check_bound`]):
    /// book only on [`Consumption::Consumed`]; a copied bound token alone gets
    /// [`Consumption::ProofRefused`] and its session stays as it was.
    pub async fn consume_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<Consumption, Error> {
        consumption(
            self.session_call(Call::Consume, token, Some(queue), Some(&proof))
                .await?,
        )
    }

    /// [`Admission::release`] with the browser's proof (see [`Admission::check_bound`]).
    pub async fn release_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Proof<'_>,
    ) -> Result<SessionStatus, Error> {
        self.session_call(Call::Release, token, Some(queue), Some(&proof))
            .await
    }

    /// A session call, asking about `queue` or the configured one, with the browser's proof
    /// of its key when there is one.
    async fn session_call(
        &self,
        call: Call,
        token: &str,
        queue: Option<&str>,
        proof: Option<&Proof<'_>>,
    ) -> Result<SessionStatus, Error> {
        let queue = match (queue, &self.inner.audience) {
            (_, Audience::LoadOnly) => return Err(Error::NoAudience),
            (Some(q), _) => Some(q.to_owned()),
            (None, Audience::Any) => None,
            (None, Audience::Queues(qs)) => {
                // The token's own queue when it is one of ours (the dispatcher checks the
                // signature); otherwise the first, which the dispatcher answers with 403.
                let aud = unverified_aud(token);
                qs.iter()
                    .find(|q| aud.as_deref() == Some(q.as_str()))
                    .or(qs.first())
                    .cloned()
            }
        };
        // >>> door
        if let Some(answer) = self.door_session(call, token, queue.as_deref()).await {
            return answer;
        }
        // <<< door
        self.inner
            .sessions
            .call(call, token, queue.as_deref(), proof)
            .await
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

    /// Reports what is left of `queue`'s inventory (`PUT /api/queues/{queue}/inventory` with
    /// the service token): usher admits only while `remaining`, less a basket per session
    /// consumed since and per active session, is above 0, and tells each waiting browser
    /// whether its place is likely to get something. Report after each sale, or whenever
    /// carts return items; a report older than the queue's `inventory_stale_after_seconds`
    /// leaves browsers told `unknown`.
    pub async fn report_inventory(&self, queue: &str, remaining: u64) -> Result<(), Error> {
        let token = self
            .inner
            .service_token
            .as_deref()
            .ok_or(Error::NoServiceToken)?;
        self.inner
            .sessions
            .report_inventory(token, queue, remaining)
            .await
    }

    /// A tower layer that guards routes with this handle (see [`AdmissionLayer`]).
    pub fn layer(&self) -> AdmissionLayer {
        AdmissionLayer::new(self.clone())
    }
}

fn consumption(s: SessionStatus) -> Result<Consumption, Error> {
    Ok(match s {
        SessionStatus::Active(a) => Consumption::Consumed(a),
        SessionStatus::Ended => Consumption::Ended,
        SessionStatus::Invalid => Consumption::Invalid,
        SessionStatus::OtherQueue => Consumption::OtherQueue,
        SessionStatus::ProofRefused(reason) => Consumption::ProofRefused(reason),
    })
}

/// The `aud` a token claims, unverified: only to choose which of several configured queues
/// to ask the dispatcher about (it verifies the token itself).
fn unverified_aud(token: &str) -> Option<String> {
    jsonwebtoken::dangerous::insecure_decode::<serde_json::Value>(token)
        .ok()
        .and_then(|d| d.claims["aud"].as_str().map(str::to_owned))
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

    /// The session API's and the JWKS's URLs.
    fn urls(a: &Admission) -> (String, String) {
        (
            a.inner.sessions.session.to_string(),
            a.inner.keys.url.clone(),
        )
    }

    #[test]
    fn a_handle_names_its_queues_or_only_reports_load() {
        let b = || Admission::builder("http://d:8081");
        assert!(matches!(b().build(), Err(BuildError::NoAudience)));
        let none: [&str; 0] = [];
        assert!(matches!(
            b().audiences(none).build(),
            Err(BuildError::NoAudience)
        ));
        assert!(b().any_queue().build().is_ok());
        assert!(b().audiences(["show"]).build().is_ok());
        // A load reporter is unaffected: it builds, and judges no token.
        let reporter = b().service_token("t").build();
        assert!(reporter.is_ok_and(|a| a.inner.audience == Audience::LoadOnly));
        let gap = Duration::from_secs(10);
        assert!(matches!(
            b().any_queue().jwks_refresh(gap, gap / 2).build(),
            Err(BuildError::JwksRefresh { .. })
        ));
    }

    #[test]
    fn urls_keep_a_path_prefix_and_refuse_other_schemes() {
        let a = Admission::builder("http://d:8081/usher")
            .any_queue()
            .build();
        assert_eq!(
            a.as_ref().ok().map(urls),
            Some((
                "http://d:8081/usher/api/session".to_owned(),
                "http://d:8081/usher/.well-known/jwks.json".to_owned()
            ))
        );
        let jwks = Admission::builder("https://d")
            .audiences(["show"])
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
