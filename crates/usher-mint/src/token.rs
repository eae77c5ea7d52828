//! Entry tokens: JWTs signed with Ed25519 (`alg: EdDSA`) by the dispatcher.
//!
//! Claims: `sub` = place id, `aud` = queue id, `iat`, `exp` (session TTL), `jti` = the
//! active-session id (`<queue>.<n>`, where `n` counts the queue's admissions); in a queue
//! that binds places to the browser's key, also `cnf.jkt` ([`BoundClaims`]). Ed25519
//! signatures are deterministic, so minting the same admission twice yields the very same
//! token: re-delivery after a crash can never hand out a second, different token.
//!
//! A booking service verifies tokens with any stock JWT library against the JWKS document
//! ([`crate::keyring::KeyRing::jwks`]) the dispatcher publishes at `/.well-known/jwks.json`.
//! A key's `kid` is its RFC 7638 thumbprint ([`kid_of`]): a function of the public key alone,
//! so every replica holding the same key names it the same way.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::Signer;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("the entry-token key is not a PKCS#8 PEM Ed25519 private key: {0}")]
    Parse(String),
    #[error("could not encode the entry-token key: {0}")]
    Encode(String),
    #[error("no PEM block: nothing to sign entry tokens with (expected one or more `-----BEGIN PRIVATE KEY-----` blocks)")]
    NoKeys,
    #[error("block 1 is a public key: the first block must be the private key that signs entry tokens (public keys may follow it, as verify-only keys)")]
    FirstNotPrivate,
    #[error("block {block} is the same key as block {first} (kid {kid}): list each key once")]
    Duplicate {
        block: usize,
        first: usize,
        kid: String,
    },
    #[error("block {block} is `{label}`: expected `PRIVATE KEY` (PKCS#8 Ed25519) or `PUBLIC KEY` (Ed25519)")]
    Label { block: usize, label: String },
    #[error("block {block} has no `-----END {label}-----` line")]
    Unterminated { block: usize, label: String },
    #[error("block {block}: {reason}")]
    Block { block: usize, reason: String },
}

/// The claims of an entry token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Place id.
    pub sub: String,
    /// Queue id.
    pub aud: String,
    /// Issued at, seconds since the epoch (the admission time).
    pub iat: u64,
    /// Expiry, seconds since the epoch: the session's hard cap (admission time +
    /// `max_session_seconds` for a sliding session, + the session TTL otherwise).
    pub exp: u64,
    /// Active-session id.
    pub jti: String,
}

/// The claims of an entry token bound to the browser's key (a queue with `bind:
/// "browser_key"`): the [`Claims`], then `cnf` (RFC 7800) naming the key by its RFC 7638
/// thumbprint, `{"jkt": "<thumbprint>"}` as DPoP (RFC 9449) writes it. A booking service
/// accepts the token only with a proof signed by that key (`usher-admission`'s `proof`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BoundClaims {
    #[serde(flatten)]
    pub claims: Claims,
    pub cnf: Confirmation,
}

/// RFC 7800's confirmation claim, with the key's thumbprint (`jkt`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    pub jkt: String,
}

/// Why a token is not a genuine entry token of this key.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    #[error("not a compact JWS")]
    Malformed,
    #[error("not signed by any of this dispatcher's keys")]
    Signature,
    #[error("claims are not an entry token's")]
    Claims,
}

#[derive(Serialize)]
struct Header<'a> {
    alg: &'static str,
    typ: &'static str,
    kid: &'a str,
}

/// The dispatcher's Ed25519 signing key plus its key id.
#[derive(Clone)]
pub struct SigningKey {
    key: ed25519_dalek::SigningKey,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Parses a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`) Ed25519 key.
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        let key = ed25519_dalek::SigningKey::from_pkcs8_pem(pem.trim())
            .map_err(|e| KeyError::Parse(e.to_string()))?;
        Ok(Self::from_dalek(key))
    }

    /// A new random key, as PKCS#8 PEM.
    pub fn generate_pem() -> Result<String, KeyError> {
        let key = ed25519_dalek::SigningKey::generate(&mut rand::rngs::OsRng);
        key.to_pkcs8_pem(Default::default())
            .map(|p| p.to_string())
            .map_err(|e| KeyError::Encode(e.to_string()))
    }

    pub(crate) fn from_dalek(key: ed25519_dalek::SigningKey) -> Self {
        let kid = kid_of(&key.verifying_key());
        Self { key, kid }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public half.
    pub fn verifying_key(&self) -> ed25519_dalek::VerifyingKey {
        self.key.verifying_key()
    }

    /// The public key as a JWK.
    pub fn jwk(&self) -> serde_json::Value {
        jwk_of(&self.key.verifying_key())
    }

    /// Signs `claims` (an entry token's [`Claims`], or [`BoundClaims`]) as a compact JWS.
    pub fn mint(&self, claims: &impl Serialize) -> String {
        let header = Header {
            alg: "EdDSA",
            typ: "JWT",
            kid: &self.kid,
        };
        // Serialising these plain structs cannot fail.
        let h = serde_json::to_vec(&header).unwrap_or_default();
        let c = serde_json::to_vec(claims).unwrap_or_default();
        let mut out = String::with_capacity(64 + h.len() * 4 / 3 + c.len() * 4 / 3 + 86);
        URL_SAFE_NO_PAD.encode_string(h, &mut out);
        out.push('.');
        URL_SAFE_NO_PAD.encode_string(c, &mut out);
        let sig = self.key.sign(out.as_bytes());
        out.push('.');
        URL_SAFE_NO_PAD.encode_string(sig.to_bytes(), &mut out);
        out
    }
}

impl SigningKey {
    /// The claims of `token` if this key signed it (EdDSA over `<header>.<claims>`). Expiry
    /// and audience are the caller's to check.
    pub fn verify(&self, token: &str) -> Result<Claims, VerifyError> {
        verify_with(&self.key.verifying_key(), token)
    }
}

/// The claims of `token` if `key` signed it (EdDSA over `<header>.<claims>`). Expiry and
/// audience are the caller's to check.
pub fn verify_with(key: &ed25519_dalek::VerifyingKey, token: &str) -> Result<Claims, VerifyError> {
    verify_as(key, token)
}

/// A verified token's claims and, for a token bound to a browser key, its `cnf`: whoever
/// answers for such a token must also check a proof of that key.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Verified {
    #[serde(flatten)]
    pub claims: Claims,
    #[serde(default)]
    pub cnf: Option<Confirmation>,
}

/// [`verify_with`], into `T`: [`Claims`] or [`Verified`].
pub(crate) fn verify_as<T: serde::de::DeserializeOwned>(
    key: &ed25519_dalek::VerifyingKey,
    token: &str,
) -> Result<T, VerifyError> {
    let (signed, sig) = token.rsplit_once('.').ok_or(VerifyError::Malformed)?;
    let (_, claims) = signed.split_once('.').ok_or(VerifyError::Malformed)?;
    let sig: [u8; 64] = URL_SAFE_NO_PAD
        .decode(sig)
        .ok()
        .and_then(|s| s.try_into().ok())
        .ok_or(VerifyError::Malformed)?;
    key.verify_strict(
        signed.as_bytes(),
        &ed25519_dalek::Signature::from_bytes(&sig),
    )
    .map_err(|_| VerifyError::Signature)?;
    let json = URL_SAFE_NO_PAD
        .decode(claims)
        .map_err(|_| VerifyError::Claims)?;
    serde_json::from_slice(&json).map_err(|_| VerifyError::Claims)
}

/// The key id of a public key: its RFC 7638 JWK thumbprint (SHA-256 over the required
/// members in lexicographic order, base64url).
pub fn kid_of(key: &ed25519_dalek::VerifyingKey) -> String {
    let x = URL_SAFE_NO_PAD.encode(key.as_bytes());
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

/// A public key as a JWK, with its [`kid_of`] key id.
pub fn jwk_of(key: &ed25519_dalek::VerifyingKey) -> serde_json::Value {
    serde_json::json!({
        "kty": "OKP",
        "crv": "Ed25519",
        "x": URL_SAFE_NO_PAD.encode(key.as_bytes()),
        "kid": kid_of(key),
        "alg": "EdDSA",
        "use": "sig",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound token's `cnf` is read with its claims; an unbound token has none.
    #[test]
    fn a_bound_tokens_key_is_read_with_its_claims() {
        let key = SigningKey::from_pkcs8_pem(&SigningKey::generate_pem().expect("generate"))
            .expect("parse");
        let claims = Claims {
            sub: "4".into(),
            aud: "show".into(),
            iat: 1_700_000_000,
            exp: 4_000_000_000,
            jti: "show.4".into(),
        };
        let cnf = Confirmation {
            jkt: "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I".into(),
        };
        let bound = key.mint(&BoundClaims {
            claims: claims.clone(),
            cnf: cnf.clone(),
        });
        let v: Verified = verify_as(&key.key.verifying_key(), &bound).expect("verifies");
        assert_eq!((v.claims, v.cnf), (claims.clone(), Some(cnf)));
        let v: Verified = verify_as(&key.key.verifying_key(), &key.mint(&claims)).expect("plain");
        assert_eq!((v.claims, v.cnf), (claims, None));
    }

    #[test]
    fn tokens_verify_with_a_stock_jwt_library_and_are_deterministic() {
        let pem = SigningKey::generate_pem().expect("generate");
        let key = SigningKey::from_pkcs8_pem(&pem).expect("parse");
        let claims = Claims {
            sub: "17".into(),
            aud: "show".into(),
            iat: 1_700_000_000,
            exp: 4_000_000_000,
            jti: "show.3".into(),
        };
        let t = key.mint(&claims);
        assert_eq!(t, key.mint(&claims), "Ed25519 signing is deterministic");

        let set: jsonwebtoken::jwk::JwkSet =
            serde_json::from_value(serde_json::json!({ "keys": [key.jwk()] })).expect("valid JWKS");
        let jwk = set.find(key.kid()).expect("kid listed");
        let dk = jsonwebtoken::DecodingKey::from_jwk(jwk).expect("decoding key");
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::EdDSA);
        v.set_audience(&["show"]);
        let got = jsonwebtoken::decode::<Claims>(&t, &dk, &v).expect("verifies");
        assert_eq!(got.claims, claims);
        assert_eq!(got.header.kid.as_deref(), Some(key.kid()));

        v.set_audience(&["other"]);
        assert!(jsonwebtoken::decode::<Claims>(&t, &dk, &v).is_err());
    }

    #[test]
    fn verify_accepts_own_tokens_only() {
        let key =
            SigningKey::from_pkcs8_pem(&SigningKey::generate_pem().expect("pem")).expect("key");
        let other =
            SigningKey::from_pkcs8_pem(&SigningKey::generate_pem().expect("pem")).expect("key");
        let claims = Claims {
            sub: "1".into(),
            aud: "q".into(),
            iat: 1,
            exp: 2,
            jti: "q.1".into(),
        };
        assert_eq!(key.verify(&key.mint(&claims)).expect("own"), claims);
        assert!(matches!(
            key.verify(&other.mint(&claims)),
            Err(VerifyError::Signature)
        ));
        assert!(matches!(key.verify("a.b"), Err(VerifyError::Malformed)));
    }

    #[test]
    fn rejects_garbage_pem() {
        assert!(SigningKey::from_pkcs8_pem("nope").is_err());
    }
}
