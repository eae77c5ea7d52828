//! The online side: the dispatcher's session API, called with the entry token as the bearer
//! and `?queue=` the queue this service sells (`GET /api/session`, `POST /api/session/touch`,
//! `POST /api/session/consume`, `DELETE /api/session`), and load reports
//! (`PUT /api/backends/{name}/load`, with the service token).

use http::StatusCode;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use url::Url;

use crate::Error;

/// An active session, as the dispatcher reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActiveSession {
    /// The queue it admits to.
    pub queue: String,
    /// The session id (the token's `jti`).
    pub session: String,
    /// When it ends unless touched (sliding sessions) or released first.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// Where a token's session stands.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStatus {
    /// The session is active (`200`).
    Active(ActiveSession),
    /// It has ended: released, consumed, expired, or past the token's cap (`410`; a release
    /// answers this too, `204`).
    Ended,
    /// The dispatcher does not accept the token: not signed by it, or not for a configured
    /// queue (`401`).
    Invalid,
    /// A genuine token of another queue than the one asked about (`403`), or a call naming a
    /// queue that is not one of the handle's [`crate::Builder::audiences`] (answered without
    /// asking): refuse it, whatever its session's state.
    OtherQueue,
    /// The token is bound to a browser key (`cnf.jkt`) and the call brought no good proof of
    /// it (`401` `proof_required: <reason>`): the reason, one of `missing`, `invalid`,
    /// `expired`, `replayed`, `wrong_key`. Pass the browser's proof on with the `*_bound`
    /// calls ([`Proof`]).
    ProofRefused(String),
}

/// What [`crate::Admission::consume`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Consumption {
    /// This call ended the active session (`200`): book now. Of any number of concurrent
    /// consumes of one session, exactly one gets this.
    Consumed(ActiveSession),
    /// The session had ended already: consumed or released by another call, expired, or past
    /// the token's cap (`410`). Do not book.
    Ended,
    /// The dispatcher does not accept the token (`401`).
    Invalid,
    /// A genuine token of another queue (`403`), or a queue named that is not one of the
    /// handle's audiences; its session is left as it was.
    OtherQueue,
    /// A token bound to a browser key without a good proof of it (see
    /// [`SessionStatus::ProofRefused`]); its session is left as it was. Do not book.
    ProofRefused(String),
}

/// The browser's proof of its key, passed on with a session call for a token bound to it
/// (`cnf.jkt`, a queue with `bind: "browser_key"`): the dispatcher answers for such a token only
/// with a fresh proof, made for the request the browser sent to this service, and takes each
/// proof once. Sent as the `DPoP`, `X-Original-Method` and `X-Original-URL` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proof<'a> {
    /// The proof the browser sent (the `DPoP` header, or the booking form's `proof` field).
    pub jws: &'a str,
    /// The method of the browser's request (`htm`), e.g. `POST`.
    pub method: &'a str,
    /// The URL of the browser's request as the browser signed it (`htu`): this service's
    /// public URL; a query is ignored.
    pub url: &'a str,
}

/// Which session call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Check,
    Touch,
    Consume,
    Release,
}

/// The session API's URL and the client that calls it.
pub(crate) struct SessionApi {
    pub(crate) http: reqwest::Client,
    pub(crate) session: Url,
    touch: Url,
    consume: Url,
    base: Url,
}

impl SessionApi {
    /// `base` is the dispatcher's URL, ending in `/` (a path prefix, if any, is kept).
    pub(crate) fn new(base: &Url, http: reqwest::Client) -> Result<Self, url::ParseError> {
        let base = base.clone();
        Ok(Self {
            http,
            session: base.join("api/session")?,
            touch: base.join("api/session/touch")?,
            consume: base.join("api/session/consume")?,
            base,
        })
    }

    /// One session call for `token`, with `?queue=` when `queue` is given and the browser's
    /// `proof` when it has one.
    pub(crate) async fn call(
        &self,
        call: Call,
        token: &str,
        queue: Option<&str>,
        proof: Option<&Proof<'_>>,
    ) -> Result<SessionStatus, Error> {
        let r = match call {
            Call::Check => self.http.get(self.session.clone()),
            Call::Touch => self.http.post(self.touch.clone()),
            Call::Consume => self.http.post(self.consume.clone()),
            Call::Release => self.http.delete(self.session.clone()),
        };
        let r = match queue {
            Some(q) => r.query(&[("queue", q)]),
            None => r,
        };
        let r = match proof {
            Some(p) => r
                .header("dpop", p.jws)
                .header("x-original-method", p.method)
                .header("x-original-url", p.url),
            None => r,
        };
        status(r.bearer_auth(token)).await
    }

    pub(crate) async fn report_load(
        &self,
        service_token: &str,
        backend: &str,
        load: f64,
    ) -> Result<(), Error> {
        if !load.is_finite() {
            return Err(Error::Rejected("the load must be a finite number".into()));
        }
        let body = serde_json::json!({ "load": load });
        self.put_report(self.load_url(backend)?, service_token, &body, &[])
            .await
    }

    /// `PUT /api/queues/{queue}/inventory`: what is left of `queue`'s inventory.
    pub(crate) async fn report_inventory(
        &self,
        service_token: &str,
        queue: &str,
        remaining: u64,
    ) -> Result<(), Error> {
        let body = serde_json::json!({ "remaining": remaining });
        // An unknown queue is the caller's mistake too: its answer says which.
        self.put_report(
            self.inventory_url(queue)?,
            service_token,
            &body,
            &[StatusCode::NOT_FOUND],
        )
        .await
    }

    /// `PUT`s a booking service's report `body` to `url` with its service token. `400` (and
    /// the statuses in `rejected_too`) carry the dispatcher's reason; `401` is a wrong token.
    async fn put_report(
        &self,
        url: Url,
        service_token: &str,
        body: &serde_json::Value,
        rejected_too: &[StatusCode],
    ) -> Result<(), Error> {
        let r = self
            .http
            .put(url)
            .bearer_auth(service_token)
            .json(body)
            .send()
            .await
            .map_err(Error::Unreachable)?;
        match r.status() {
            StatusCode::NO_CONTENT | StatusCode::OK => Ok(()),
            StatusCode::UNAUTHORIZED => Err(Error::Unauthorized),
            s if s == StatusCode::BAD_REQUEST || rejected_too.contains(&s) => {
                Err(Error::Rejected(error_text(r).await))
            }
            status => Err(Error::Unexpected { status }),
        }
    }

    /// `PUT` URL of `queue`'s inventory: the name is one path segment, percent-encoded.
    fn inventory_url(&self, queue: &str) -> Result<Url, Error> {
        self.api_url(["api", "queues", queue, "inventory"])
    }

    /// `PUT` URL of `backend`'s load: the name is one path segment, percent-encoded.
    fn load_url(&self, backend: &str) -> Result<Url, Error> {
        self.api_url(["api", "backends", backend, "load"])
    }

    /// The dispatcher's URL with `segments` as its path, each percent-encoded.
    fn api_url<const N: usize>(&self, segments: [&str; N]) -> Result<Url, Error> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| Error::Url(url::ParseError::RelativeUrlWithCannotBeABaseBase))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }
}

/// Sends a session call and reads its answer.
async fn status(r: reqwest::RequestBuilder) -> Result<SessionStatus, Error> {
    let r = r.send().await.map_err(Error::Unreachable)?;
    match r.status() {
        StatusCode::OK => {
            let body = r.bytes().await.map_err(Error::Unreachable)?;
            serde_json::from_slice(&body)
                .map(SessionStatus::Active)
                .map_err(|e| Error::BadReply(e.to_string()))
        }
        StatusCode::NO_CONTENT | StatusCode::GONE => Ok(SessionStatus::Ended),
        StatusCode::UNAUTHORIZED => Ok(match proof_refusal(&error_text(r).await) {
            Some(reason) => SessionStatus::ProofRefused(reason),
            None => SessionStatus::Invalid,
        }),
        StatusCode::FORBIDDEN => Ok(SessionStatus::OtherQueue),
        status => Err(Error::Unexpected { status }),
    }
}

/// The reason of a `401` `proof_required: <reason> (...)`: a bound token without a good proof.
fn proof_refusal(error: &str) -> Option<String> {
    let rest = error.strip_prefix("proof_required: ")?;
    Some(rest.split(' ').next().unwrap_or_default().to_owned())
}

/// The `error` of a JSON error body, or the body itself.
async fn error_text(r: reqwest::Response) -> String {
    let body = r.text().await.unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v["error"].as_str().map(str::to_owned))
        .unwrap_or(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_proof_is_told_from_a_refused_token() {
        assert_eq!(
            proof_refusal("proof_required: replayed (its `jti` was used already)").as_deref(),
            Some("replayed")
        );
        assert_eq!(proof_refusal("not an entry token: not a compact JWS"), None);
    }

    #[test]
    fn a_backend_name_is_one_encoded_segment_below_the_base_path() -> Result<(), Error> {
        for (base, backend, want) in [
            (
                "http://d:8081/",
                "booking-main",
                "http://d:8081/api/backends/booking-main/load",
            ),
            (
                "http://d/usher/",
                "a/b c",
                "http://d/usher/api/backends/a%2Fb%20c/load",
            ),
        ] {
            let api = SessionApi::new(&Url::parse(base)?, reqwest::Client::new())?;
            assert_eq!(api.load_url(backend)?.as_str(), want);
        }
        Ok(())
    }

    #[test]
    fn a_queue_name_is_one_encoded_segment_of_the_inventory_url() -> Result<(), Error> {
        let api = SessionApi::new(&Url::parse("http://d/usher/")?, reqwest::Client::new())?;
        assert_eq!(
            api.inventory_url("show")?.as_str(),
            "http://d/usher/api/queues/show/inventory"
        );
        assert_eq!(
            api.inventory_url("a/b")?.as_str(),
            "http://d/usher/api/queues/a%2Fb/inventory"
        );
        Ok(())
    }
}
