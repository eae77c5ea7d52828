//! The proof a token bound to the browser's key needs at the session API.
//!
//! A queue with `bind: "browser_key"` mints tokens that name the browser's key (`cnf.jkt`):
//! the key never leaves the browser, so a copied token must be worth nothing on its own. The
//! session routes therefore answer for such a token only with a fresh proof of that key, as
//! DPoP (RFC 9449) asks of a resource server:
//!
//! * the proof travels in the `DPoP` header (a booking service or proxy passes on the one the
//!   browser sent it);
//! * it was made for the request the browser sent to the booking site, not for this call: the
//!   caller names that request in `X-Original-Method` and `X-Original-URL` (what
//!   `auth_request` setups pass; `htu` is the URL without query);
//! * it presents this token (`ath`), it is fresh (`iat`), it is signed by the key the token
//!   names, and its `jti` is spent in Redis, so one proof answers one call, here or at a
//!   gateway.
//!
//! A session spends at most [`SESSION_PROOFS`] here (`429` with `Retry-After` past it, checked
//! after the key and before Redis), so the key's holder cannot fill Redis with spent proofs.
//! (`session_dpop::a_bound_session_spends_a_bounded_number_of_proofs`)
//!
//! A refusal is `401` `proof_required: <reason>`, the reasons the gateway names
//! ([`ProofRefusal`]). A token without `cnf` needs no proof, as before.
//! (`session_dpop::a_bound_token_consumes_its_session_only_with_a_fresh_proof_of_its_key`)

use axum::http::{HeaderMap, StatusCode};
use usher_core::binding::ProofRefusal;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::time::now_ms;
use usher_http::bucket::Rate;
use usher_http::ApiError;

use crate::state::{redis_down, AppState};

/// Proofs one bound session may spend at this dispatcher: a booking page sends one with each
/// request it makes through the booking site (a few a second while a buyer picks seats); the
/// burst covers a page load's parallel requests. A session's spent proofs in Redis (each kept
/// 130 s) stay under 5 × 130 + 60 per dispatcher replica.
pub(crate) const SESSION_PROOFS: Rate = Rate {
    per_second: 5,
    burst: 60,
};

/// The headers that carry a bound token's proof, as every session route describes them.
#[derive(Debug, Default, utoipa::IntoParams)]
#[into_params(parameter_in = Header)]
pub(crate) struct ProofHeaders {
    /// For an entry token bound to the browser's key (`cnf.jkt`, a queue with `bind:
    /// "browser_key"`): the browser's fresh proof of that key, as it sent it (an ES256 compact
    /// JWS as RFC 9449's DPoP: `jwk` header; `jti`, `iat`, `htm`, `htu` of the request named
    /// by `X-Original-Method` and `X-Original-URL`, `ath` = base64url SHA-256 of the token).
    /// Required there (`401` `proof_required: missing` without it), each proof taken once;
    /// ignored for a token without `cnf`.
    #[param(rename = "DPoP")]
    dpop: Option<String>,
    /// With `DPoP`: the method of the request the browser made and signed (`htm`), e.g.
    /// `POST` (an `auth_request` proxy passes the client's).
    #[param(rename = "X-Original-Method")]
    method: Option<String>,
    /// With `DPoP`: the URL of the request the browser made and signed (`htu`), e.g.
    /// `https://tickets.example/api/bookings`; a query is ignored.
    #[param(rename = "X-Original-URL")]
    url: Option<String>,
}

impl ProofHeaders {
    /// The headers of a call (one that is not text counts as absent).
    fn read(headers: &HeaderMap) -> Self {
        let text = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Self {
            dpop: text("dpop"),
            method: text("x-original-method"),
            url: text("x-original-url"),
        }
    }
}

/// Checks the proof that `token`, bound to the key whose thumbprint is `jkt`, needs for a call
/// about `queue`'s session, and spends it: `Ok` once, `401` naming the reason otherwise.
pub(crate) async fn require(
    st: &AppState,
    queue: &QueueId,
    place: PlaceId,
    token: &str,
    jkt: &str,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let ProofHeaders { dpop, method, url } = ProofHeaders::read(headers);
    let proof = dpop.ok_or_else(|| {
        refused(
            ProofRefusal::Missing,
            "this entry token is bound to the browser's key (`cnf.jkt`): \
             pass on a fresh proof of it in the `DPoP` header",
        )
    })?;
    let (Some(method), Some(url)) = (method, url) else {
        return Err(refused(
            ProofRefusal::Invalid,
            "name the request the proof was made for in `X-Original-Method` and \
             `X-Original-URL`",
        ));
    };
    let htu = url.split(['?', '#']).next().unwrap_or_default();
    let checked = usher_core::proof::check(&proof, &method, htu, Some(token), now_ms() / 1000)
        .map_err(|r| refused(r, detail(r)))?;
    if checked.key.as_str() != jkt {
        return Err(refused(
            ProofRefusal::WrongKey,
            detail(ProofRefusal::WrongKey),
        ));
    }
    if let Err(wait) = st.session_proofs.take((queue.clone(), place)) {
        crate::metrics::session_proofs_refused();
        let secs = usher_http::bucket::retry_after_secs(wait);
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "this session sent proofs faster than a booking page does; try again after Retry-After",
        )
        .retry_after(secs));
    }
    if !st
        .store
        .spend_proof(queue, &checked.key, &checked.jti)
        .await
        .map_err(redis_down)?
    {
        return Err(refused(
            ProofRefusal::Replayed,
            detail(ProofRefusal::Replayed),
        ));
    }
    Ok(())
}

/// What each refusal means, for whoever reads the answer.
fn detail(r: ProofRefusal) -> &'static str {
    match r {
        ProofRefusal::Missing => "no proof",
        ProofRefusal::Invalid => {
            "not an ES256 proof with a P-256 `jwk`, a bad signature, or made for another \
             request (`htm`, `htu`) or another token (`ath`)"
        }
        ProofRefusal::Expired => "its `iat` is more than 60 s from the dispatcher's clock",
        ProofRefusal::Replayed => "its `jti` was used already: one proof, one request",
        ProofRefusal::WrongKey => "signed by another key than the one the token names",
    }
}

/// `401` `proof_required: <reason> (<detail>)`.
fn refused(r: ProofRefusal, detail: &str) -> ApiError {
    tracing::debug!(
        reason = r.as_str(),
        "session call refused: no good proof of the browser key"
    );
    ApiError::unauthorized(format!("proof_required: {} ({detail})", r.as_str()))
}
