//! Entry tokens bound to the browser's key (a queue with `bind: "browser_key"`).
//!
//! Such a token carries `cnf.jkt` (RFC 7800): the RFC 7638 thumbprint of the P-256 key the
//! browser joined the line with. The key never leaves the browser (WebCrypto, not
//! extractable), so a copied token is useless on its own: the request that presents it must
//! also carry a **proof** made with that key, as DPoP (RFC 9449) does. usher's page sends one
//! in the booking form's `proof` field:
//!
//! * header: `{"alg":"ES256","typ":"usher-pop+jwt","jwk":{"kty":"EC","crv":"P-256","x":…,"y":…}}`
//! * payload: `{"jti":"<fresh>","iat":<seconds>,"htm":"POST","htu":"<the booking URL>","ath":"<base64url SHA-256 of the token>"}`
//!
//! [`check_proof`] checks, for a token whose claims verified: the proof is an ES256 JWS whose
//! `jwk` has the token's thumbprint, signed by that key, for this request (`htm`, `htu`) and
//! this token (`ath`, which covers the token and so its `jti`), made within
//! [`PROOF_MAX_AGE_SECS`] of now. A token without `cnf` needs no proof (a queue that does not
//! bind). Remembering the proofs' `jti` for as long as a proof could pass (refusing a second
//! use: 2 × [`PROOF_MAX_AGE_SECS`] + 1 s from when it was first seen, since its `iat` may be
//! that far ahead) is the caller's: the returned [`ProofClaims`] name it. Later calls of an embedded booking site
//! (`embed_origin`) send the same proof as a `DPoP` header, one per request.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::jwk::ThumbprintHash;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::{Admission, Claims, VerifyError};

/// How far a proof's `iat` may be from this clock, in seconds.
pub const PROOF_MAX_AGE_SECS: u64 = 60;

/// RFC 7800's confirmation claim of a bound token: the browser key's RFC 7638 thumbprint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confirmation {
    pub jkt: String,
}

/// A proof's claims, once checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProofClaims {
    /// The proof's own id: refuse a second proof with it (for 2 × [`PROOF_MAX_AGE_SECS`] + 1 s
    /// from when it was first seen).
    pub jti: String,
    /// When the proof was made, seconds since the Unix epoch.
    pub iat: u64,
    /// The request's method (`POST` for the booking form).
    pub htm: String,
    /// The request's URL, without query or fragment.
    pub htu: String,
    /// base64url SHA-256 of the entry token.
    pub ath: String,
}

/// Why a bound token's proof is refused.
#[derive(Debug, thiserror::Error)]
pub enum ProofError {
    /// The token is bound to a browser key and the request carries no proof.
    #[error("this entry token is bound to a browser key: a proof of it is required")]
    Missing,
    /// Not an ES256 JWS with a P-256 `jwk` header, or a bad signature.
    #[error("invalid proof: {0}")]
    Invalid(String),
    /// Signed by another key than the one the token names (`cnf.jkt`).
    #[error("the proof is signed by another key than the token's")]
    WrongKey,
    /// For another request (`htm`, `htu`) or another token (`ath`).
    #[error("the proof is for another request or token")]
    Mismatch,
    /// `iat` more than [`PROOF_MAX_AGE_SECS`] from now.
    #[error("the proof is too old")]
    Expired,
}

/// Why [`Admission::verify_bound`] refused a token.
#[derive(Debug, thiserror::Error)]
pub enum BoundError {
    /// The token itself ([`Admission::verify`]).
    #[error(transparent)]
    Token(#[from] VerifyError),
    /// Its proof of possession.
    #[error(transparent)]
    Proof(#[from] ProofError),
}

/// Checks `proof` (when the token is bound: `claims.cnf`) for a `htm` request to `htu` that
/// presents `token`. `Ok(None)` for a token that is not bound (no proof needed), `Ok(Some(_))`
/// with the proof's claims (spend its `jti`) when it is and the proof is good.
pub fn check_proof(
    claims: &Claims,
    token: &str,
    proof: Option<&str>,
    htm: &str,
    htu: &str,
) -> Result<Option<ProofClaims>, ProofError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    check_proof_at(claims, token, proof, htm, htu, now)
}

/// [`check_proof`] at `now` (seconds since the Unix epoch).
pub fn check_proof_at(
    claims: &Claims,
    token: &str,
    proof: Option<&str>,
    htm: &str,
    htu: &str,
    now: u64,
) -> Result<Option<ProofClaims>, ProofError> {
    let Some(cnf) = &claims.cnf else {
        return Ok(None);
    };
    let proof = proof.ok_or(ProofError::Missing)?;
    let invalid = |e: &dyn std::fmt::Display| ProofError::Invalid(e.to_string());
    let header = jsonwebtoken::decode_header(proof).map_err(|e| invalid(&e))?;
    if header.alg != Algorithm::ES256 {
        return Err(invalid(&"alg must be ES256"));
    }
    let jwk = header.jwk.ok_or_else(|| invalid(&"no jwk in the header"))?;
    if jwk.thumbprint(ThumbprintHash::SHA256) != cnf.jkt {
        return Err(ProofError::WrongKey);
    }
    let key = DecodingKey::from_jwk(&jwk).map_err(|e| invalid(&e))?;
    let mut v = Validation::new(Algorithm::ES256);
    v.required_spec_claims.clear();
    v.validate_exp = false;
    v.validate_aud = false;
    let c = jsonwebtoken::decode::<ProofClaims>(proof, &key, &v)
        .map_err(|e| invalid(&e))?
        .claims;
    let ath = URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes()));
    if c.htm != htm || c.htu != htu || c.ath != ath {
        return Err(ProofError::Mismatch);
    }
    if c.iat.abs_diff(now) > PROOF_MAX_AGE_SECS {
        return Err(ProofError::Expired);
    }
    Ok(Some(c))
}

impl Admission {
    /// [`Admission::verify_for`] `queue`, and for a token bound to a browser key its `proof`
    /// for this `htm` request to `htu` ([`check_proof`]). Spend the returned proof's `jti`.
    pub async fn verify_bound(
        &self,
        token: &str,
        queue: &str,
        proof: Option<&str>,
        htm: &str,
        htu: &str,
    ) -> Result<(Claims, Option<ProofClaims>), BoundError> {
        let claims = self.verify_for_any_binding(token, queue).await?;
        let proof = check_proof(&claims, token, proof, htm, htu)?;
        Ok((claims, proof))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A P-256 test key (a proof needs a private half), generated once with
    // `openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt`.
    const KEY_PEM: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQghdxJFWKcrzQHx9vu
MEuJVNwguhVKbaox8858Eb5w9KKhRANCAARtCsgngb1c6NPA+zBuPGFVNQf8PMv/
gnA9LyeGLTOMjTK+ONj7dJNpDh/4mt2mfaU86DRaHrjKjE6eGaSyF1Fl
-----END PRIVATE KEY-----";

    fn claims(jkt: Option<String>) -> Claims {
        Claims {
            sub: "1".into(),
            aud: "q".into(),
            iat: 1000,
            exp: 2000,
            jti: "q.1".into(),
            cnf: jkt.map(|jkt| Confirmation { jkt }),
            door: None,
            nbf: None,
        }
    }

    fn proof(token: &str, htu: &str, iat: u64) -> (String, String) {
        let der: String = KEY_PEM
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(der)
            .expect("base64");
        let key = jsonwebtoken::EncodingKey::from_ec_der(&der);
        let jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, Algorithm::ES256).expect("jwk");
        let mut header = jsonwebtoken::Header::new(Algorithm::ES256);
        header.typ = Some("usher-pop+jwt".into());
        header.jwk = Some(jwk.clone());
        let c = ProofClaims {
            jti: "p1".into(),
            iat,
            htm: "POST".into(),
            htu: htu.into(),
            ath: URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes())),
        };
        let p = jsonwebtoken::encode(&header, &c, &key).expect("sign");
        (p, jwk.thumbprint(ThumbprintHash::SHA256))
    }

    /// A bound token needs a fresh proof by its key, for this URL and this token; an unbound
    /// one needs none.
    #[test]
    fn a_bound_token_needs_its_keys_proof() {
        let url = "https://tickets.example/entry";
        let (p, jkt) = proof("tok", url, 1000);
        let bound = claims(Some(jkt));
        let ok = check_proof_at(&bound, "tok", Some(&p), "POST", url, 1030).expect("good");
        assert_eq!(ok.map(|c| c.jti).as_deref(), Some("p1"));
        assert!(matches!(
            check_proof_at(&bound, "tok", None, "POST", url, 1030),
            Err(ProofError::Missing)
        ));
        assert!(matches!(
            check_proof_at(&bound, "other", Some(&p), "POST", url, 1030),
            Err(ProofError::Mismatch)
        ));
        assert!(matches!(
            check_proof_at(
                &bound,
                "tok",
                Some(&p),
                "POST",
                "https://evil.example/entry",
                1030
            ),
            Err(ProofError::Mismatch)
        ));
        assert!(matches!(
            check_proof_at(&bound, "tok", Some(&p), "POST", url, 1100),
            Err(ProofError::Expired)
        ));
        let other = claims(Some("0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I".into()));
        assert!(matches!(
            check_proof_at(&other, "tok", Some(&p), "POST", url, 1030),
            Err(ProofError::WrongKey)
        ));
        assert!(matches!(
            check_proof_at(&claims(None), "tok", None, "POST", url, 1030),
            Ok(None)
        ));
    }
}
