//! Offline verification: is this a genuine usher entry token within its cap?
//!
//! The token is a compact JWS signed with Ed25519 (`alg: EdDSA`) by the dispatcher, whose
//! public keys (the JWKS) are found by the token's `kid`. A token that verifies here was
//! admitted by usher and is not past its `exp`, the session's hard cap; whether the session is
//! still active (it may have been released, or may have expired before the cap) is an online
//! question: [`crate::Admission::check`].

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde::{Deserialize, Serialize};

use crate::keys::{KeyError, Keys};

/// Clock skew tolerated on `exp` between the dispatcher and this service, in seconds.
const LEEWAY_SECONDS: u64 = 5;

/// An entry token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// The place in line that was admitted.
    pub sub: String,
    /// The queue (audience) the token admits to.
    pub aud: String,
    /// Admission time, seconds since the Unix epoch.
    pub iat: u64,
    /// The session's hard cap, seconds since the Unix epoch.
    pub exp: u64,
    /// The session id (`<queue>.<place>`).
    pub jti: String,
    /// In a queue that binds tokens to the browser's key: that key's RFC 7638 thumbprint
    /// (`{"jkt": …}`, RFC 7800). Such a token is accepted only with a proof of the key:
    /// [`crate::check_proof`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnf: Option<crate::proof::Confirmation>,
    // >>> door
    /// A door token's window start (seconds since the epoch): the token was handed out by a
    /// gateway's open door while usher's Redis was unreachable (a queue with `on_outage:
    /// "open"`). It names no place (`sub` is `"door"`) and is a bearer pass until `exp`,
    /// shared by everyone let through in the window; the session calls answer it offline
    /// ([`crate::Admission::check`] is `Active` until `exp`, a consume records nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<u64>,
    /// Not before (seconds since the epoch): a door token's window start, less a small skew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nbf: Option<u64>,
    // <<< door
}

impl Claims {
    // >>> door
    /// Whether this is a door token (see [`Claims::door`]).
    pub fn is_door(&self) -> bool {
        self.door.is_some()
    }
    // <<< door
}

/// Why a token is not accepted offline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// Not a JWS with a readable header.
    #[error("malformed token: {0}")]
    Malformed(#[source] jsonwebtoken::errors::Error),
    /// Signed with another algorithm than EdDSA (usher signs with Ed25519 only).
    #[error("token must be signed with EdDSA")]
    Algorithm,
    /// The header names no key.
    #[error("token has no kid")]
    NoKid,
    /// No key of the dispatcher's JWKS has the token's `kid`, or it cannot be fetched.
    #[error(transparent)]
    Key(#[from] KeyError),
    /// Genuine, but past its `exp`: the session has ended.
    #[error("token expired")]
    Expired,
    // >>> door
    /// Genuine, but before its `nbf`: a door token of a window that has not begun.
    #[error("token not valid yet")]
    NotYetValid,
    // <<< door
    /// Genuine, but for another queue.
    #[error("token is for another queue")]
    Audience,
    /// This handle names no queue ([`crate::Builder::audiences`] or
    /// [`crate::Builder::any_queue`]): it only reports load, and judges no token.
    #[error("usher-admission is set up without an audience: name the queues this service sells")]
    NoAudience,
    /// A handle built with [`crate::Builder::any_queue`] asked without a queue
    /// ([`crate::Admission::verify`] rather than [`crate::Admission::verify_for`], or its
    /// layer without [`crate::AdmissionLayer::queue_from_query`]): every queue's token would
    /// pass, so none does.
    #[error("an any_queue handle needs the queue of each request: use the *_for calls (or the layer's queue_from_query)")]
    QueueRequired,
    /// Genuine, but bound to a browser key (`cnf.jkt`: its queue has `bind: "browser_key"`):
    /// a bearer route refuses it, since a copy of the token would pass there. Accept it only
    /// with its proof ([`crate::Admission::verify_bound`]).
    #[error("token is bound to a browser key: present it with its proof (verify_bound)")]
    Bound,
    /// The signature or the claims do not verify.
    #[error("invalid token: {0}")]
    Invalid(#[source] jsonwebtoken::errors::Error),
}

impl VerifyError {
    /// True when the token could not be judged because the JWKS could not be fetched: the
    /// fault is ours (answer `503`), not the client's.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            VerifyError::Key(KeyError::Unavailable(_) | KeyError::Stale)
        )
    }
}

/// Verifies `token` against the keys in `keys`; its `aud` must be one of `audiences`.
pub(crate) async fn verify(
    keys: &Keys,
    token: &str,
    audiences: &[String],
) -> Result<Claims, VerifyError> {
    let header = jsonwebtoken::decode_header(token).map_err(VerifyError::Malformed)?;
    if header.alg != Algorithm::EdDSA {
        return Err(VerifyError::Algorithm);
    }
    let kid = header.kid.ok_or(VerifyError::NoKid)?;
    let key = keys.key(&kid).await?;
    let mut v = Validation::new(Algorithm::EdDSA);
    v.set_audience(audiences);
    v.set_required_spec_claims(&["exp", "aud", "sub"]);
    v.leeway = LEEWAY_SECONDS;
    // A door token's window starts at its `nbf`; entry tokens have none.
    v.validate_nbf = true;
    jsonwebtoken::decode::<Claims>(token, &key, &v)
        .map(|d| d.claims)
        .map_err(|e| match e.kind() {
            ErrorKind::ExpiredSignature => VerifyError::Expired,
            ErrorKind::ImmatureSignature => VerifyError::NotYetValid,
            ErrorKind::InvalidAudience => VerifyError::Audience,
            _ => VerifyError::Invalid(e),
        })
}
