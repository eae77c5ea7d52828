//! Places and entry tokens bound to the browser (a queue's `bind: "browser_key"`), in the words
//! the store, the gateway, the dispatcher and the browser contract share.
//!
//! In a queue that binds, the waiting-room page makes a non-extractable ECDSA P-256 key pair
//! at join (WebCrypto, kept in IndexedDB) and proves it holds the private key with every
//! stream request: a compact JWS (`alg: ES256`) whose header carries the public key (`jwk`)
//! and whose payload names the queue, a fresh `jti` and the time (`iat`), as DPoP (RFC 9449)
//! does. The key's RFC 7638 thumbprint ([`Thumbprint`]) is stored with the place at join; a
//! resume, a status poll and the entry token (its `cnf.jkt`, RFC 7800) all name that key, so
//! a ticket or a token copied elsewhere is useless without it.
//!
//! The proof itself is checked by [`crate::proof`] (for the gateway and the dispatcher's session
//! API) and, at a booking service, by `usher-admission`; this module names the setting, the
//! thumbprint and the reasons a proof is refused.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::ids::QueueId;

/// How old a proof's `iat` may be (and how far in the future, for clocks that differ): a
/// proof is made just before the request that carries it.
pub const PROOF_MAX_AGE_SECS: u64 = 60;

/// How long a spent proof's `jti` is remembered (ms): past it, the proof's `iat` is too old
/// anyway, so a replay is refused either way.
pub const PROOF_JTI_TTL_MS: u64 = 2 * PROOF_MAX_AGE_SECS * 1000 + 10_000;

/// What a queue binds its places and entry tokens to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Bind {
    /// Nothing: the ticket alone resumes the place, the token alone enters (as before).
    #[default]
    None,
    /// The browser's key: every stream request and status poll carries a proof of
    /// possession, and the entry token names the key (`cnf.jkt`).
    BrowserKey,
}

impl Bind {
    /// The name stored in the queue's `meta` (`bind`) and used in the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            Bind::None => "none",
            Bind::BrowserKey => "browser_key",
        }
    }

    /// Whether requests must prove a key.
    pub fn binds(self) -> bool {
        self == Bind::BrowserKey
    }
}

impl FromStr for Bind {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "none" => Ok(Bind::None),
            "browser_key" => Ok(Bind::BrowserKey),
            _ => Err(()),
        }
    }
}

/// A public key's RFC 7638 thumbprint: base64url (no padding) of SHA-256 of the key's
/// canonical JWK, 43 characters. Stored per place (43 bytes) and carried by the entry token
/// as `cnf.jkt`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Thumbprint(String);

impl Thumbprint {
    /// The length of a SHA-256 thumbprint in base64url without padding.
    pub const LEN: usize = 43;

    /// A thumbprint as stored or sent; `None` unless 43 base64url characters.
    pub fn parse(s: &str) -> Option<Self> {
        (s.len() == Self::LEN
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        .then(|| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Thumbprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a request that needs a proof of the browser's key was refused: a stream request, a
/// status poll or a leave of a binding queue (gateway), or a session call with a bound entry
/// token (dispatcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProofRefusal {
    /// No proof (the `proof` parameter at the gateway, the `DPoP` header at the session API).
    Missing,
    /// Not a compact ES256 JWS with a P-256 `jwk` header, a bad signature, or claims for
    /// another request (`htm`, `htu`) or another token (`ath`).
    Invalid,
    /// `iat` more than 60 s away from the checking server's clock.
    Expired,
    /// Its `jti` was already used: every request needs a fresh proof.
    Replayed,
    /// A good proof, but by another key than the one the place was joined with (a copied
    /// ticket).
    WrongKey,
}

impl ProofRefusal {
    /// Its name, as `event: proof_required` and the `403`/`401` answers write it.
    pub fn as_str(self) -> &'static str {
        match self {
            ProofRefusal::Missing => "missing",
            ProofRefusal::Invalid => "invalid",
            ProofRefusal::Expired => "expired",
            ProofRefusal::Replayed => "replayed",
            ProofRefusal::WrongKey => "wrong_key",
        }
    }
}

/// The payload of `event: proof_required`: the request of a queue that binds places to the
/// browser's key brought no good proof (`reason`), and the stream ends. A join took no place; a
/// resume left the place as it was (its own browser resumes it with a fresh proof).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProofRequiredEvent {
    pub queue: QueueId,
    pub reason: ProofRefusal,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_and_thumbprints() {
        assert_eq!("browser_key".parse(), Ok(Bind::BrowserKey));
        assert_eq!("none".parse(), Ok(Bind::None));
        assert_eq!("Browser_Key".parse::<Bind>(), Err(()));
        assert!(Thumbprint::parse(&"a".repeat(43)).is_some());
        assert!(Thumbprint::parse(&"a".repeat(42)).is_none());
        assert!(Thumbprint::parse(&format!("{}=", "a".repeat(42))).is_none());
        for r in [
            ProofRefusal::Missing,
            ProofRefusal::Invalid,
            ProofRefusal::Expired,
            ProofRefusal::Replayed,
            ProofRefusal::WrongKey,
        ] {
            assert_eq!(serde_json::to_value(r).ok(), Some(r.as_str().into()));
        }
    }
}
