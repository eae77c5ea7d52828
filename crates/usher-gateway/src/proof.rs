//! Proofs of possession of the browser's key, for queues that bind places to it (`bind:
//! "browser_key"`; docs/security.md, "Places and tokens bound to the browser").
//!
//! A proof is a compact JWS the page makes with its non-extractable WebCrypto key just before
//! each request, as DPoP (RFC 9449) does:
//!
//! * header: `{"alg":"ES256","typ":"usher-pop+jwt","jwk":{"kty":"EC","crv":"P-256","x":…,"y":…}}`
//! * payload: `{"jti":"<fresh, 1..=64 base64url characters>","iat":<seconds>,"htm":"<method>","htu":"<the route's path>"}`
//!   (`GET` `/api/queues/{queue}/stream` or `…/status`, `DELETE` `…/tickets/{ticket}`, without
//!   query).
//!
//! This module checks everything that needs no Redis: the shape, the signature (ECDSA P-256
//! with SHA-256), the route and the time (`iat` within [`PROOF_MAX_AGE_SECS`] of this clock).
//! The caller then compares the key's RFC 7638 thumbprint with the place's and spends the `jti`
//! in Redis (one proof, one request).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use usher_core::binding::{ProofRefusal, Thumbprint, PROOF_MAX_AGE_SECS};

use crate::bucket::Rate;

/// Proofs one place may spend on one gateway (`binding`): a browser spends one a stream
/// resume, status poll or leave, far fewer than one a second; the burst covers a reconnecting
/// tab's retries. A place's spent proofs in Redis (each kept 130 s) stay under 130 + 30 per
/// gateway it reaches, however many addresses share its key.
pub(crate) const PLACE_PROOFS: Rate = Rate {
    per_second: 1,
    burst: 30,
};

/// Longest proof accepted (a P-256 proof is about 450 characters).
const MAX_PROOF_LEN: usize = 2048;
/// Longest `jti` accepted (it becomes part of a Redis key name).
const MAX_JTI_LEN: usize = 64;

/// A proof whose signature, route and time are good: the key it was made with, and the `jti`
/// to spend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Checked {
    pub(crate) key: Thumbprint,
    pub(crate) jti: String,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    jwk: Jwk,
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    crv: String,
    x: String,
    y: String,
}

#[derive(Deserialize)]
struct Claims {
    jti: String,
    iat: u64,
    htm: String,
    htu: String,
}

/// Checks `proof` for a `method` request to `path` (the route's path, no query) at `now_secs`.
pub(crate) fn check(
    proof: &str,
    method: &str,
    path: &str,
    now_secs: u64,
) -> Result<Checked, ProofRefusal> {
    let invalid = ProofRefusal::Invalid;
    if proof.len() > MAX_PROOF_LEN {
        return Err(invalid);
    }
    let mut parts = proof.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid);
    };
    let header: Header = decode_json(h).ok_or(invalid)?;
    let Header { alg, jwk } = header;
    if alg != "ES256" || jwk.kty != "EC" || jwk.crv != "P-256" {
        return Err(invalid);
    }
    let coordinate = |v: &str| URL_SAFE_NO_PAD.decode(v).ok().filter(|b| b.len() == 32);
    let (x, y) = (
        coordinate(&jwk.x).ok_or(invalid)?,
        coordinate(&jwk.y).ok_or(invalid)?,
    );
    let mut sec1 = Vec::with_capacity(65);
    sec1.push(0x04);
    sec1.extend_from_slice(&x);
    sec1.extend_from_slice(&y);
    let key = VerifyingKey::from_sec1_bytes(&sec1).map_err(|_| invalid)?;
    let sig = URL_SAFE_NO_PAD.decode(s).map_err(|_| invalid)?;
    let sig = Signature::from_slice(&sig).map_err(|_| invalid)?;
    let signed = &proof[..h.len() + 1 + c.len()];
    key.verify(signed.as_bytes(), &sig).map_err(|_| invalid)?;
    let claims: Claims = decode_json(c).ok_or(invalid)?;
    if claims.htm != method || claims.htu != path || !jti_ok(&claims.jti) {
        return Err(invalid);
    }
    if claims.iat.abs_diff(now_secs) > PROOF_MAX_AGE_SECS {
        return Err(ProofRefusal::Expired);
    }
    Ok(Checked {
        key: thumbprint(&jwk.x, &jwk.y).ok_or(invalid)?,
        jti: claims.jti,
    })
}

/// RFC 7638: base64url of SHA-256 over the required members, in lexicographic order, without
/// whitespace.
pub(crate) fn thumbprint(x: &str, y: &str) -> Option<Thumbprint> {
    let canonical = format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#);
    Thumbprint::parse(&URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes())))
}

fn jti_ok(jti: &str) -> bool {
    (1..=MAX_JTI_LEN).contains(&jti.len())
        && jti
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Option<T> {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(part).ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use p256::ecdsa::signature::Signer;
    use p256::ecdsa::SigningKey;

    fn proof(key: &SigningKey, claims: serde_json::Value) -> String {
        let point = key.verifying_key().to_encoded_point(false);
        let (x, y) = (
            URL_SAFE_NO_PAD.encode(point.x().expect("x")),
            URL_SAFE_NO_PAD.encode(point.y().expect("y")),
        );
        let header = serde_json::json!({"alg": "ES256", "typ": "usher-pop+jwt",
            "jwk": {"kty": "EC", "crv": "P-256", "x": x, "y": y}});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig: Signature = key.sign(signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.to_bytes()))
    }

    /// A good proof names its key by its RFC 7638 thumbprint; a proof for another route, an old
    /// one, a tampered one or a malformed `jti` is refused.
    #[test]
    fn proofs_are_checked_before_redis() {
        let key = SigningKey::from_slice(&[7u8; 32]).expect("key");
        let path = "/api/queues/q1/stream";
        let claims = |jti: &str, iat: u64, htu: &str| serde_json::json!({"jti": jti, "iat": iat, "htm": "GET", "htu": htu});
        let good = proof(&key, claims("abc_1", 1000, path));
        let ok = check(&good, "GET", path, 1010).expect("a good proof");
        assert_eq!(ok.jti, "abc_1");
        assert_eq!(ok.key.as_str().len(), 43);
        assert_eq!(
            check(&good, "GET", "/api/queues/q2/stream", 1010),
            Err(ProofRefusal::Invalid)
        );
        assert_eq!(check(&good, "GET", path, 1061), Err(ProofRefusal::Expired));
        assert_eq!(
            check(&good, "DELETE", path, 1010),
            Err(ProofRefusal::Invalid)
        );
        let bad_jti = proof(&key, claims("a.b", 1000, path));
        assert_eq!(
            check(&bad_jti, "GET", path, 1000),
            Err(ProofRefusal::Invalid)
        );
        let mut tampered = good.clone();
        tampered.insert(good.len() - 5, 'A');
        assert!(check(&tampered, "GET", path, 1000).is_err());
        assert_eq!(check("x.y", "GET", path, 1000), Err(ProofRefusal::Invalid));
    }

    /// RFC 9449's example key (section 6.1: a DPoP proof's `jwk` and the `cnf.jkt` of the
    /// token bound to it): the thumbprint is RFC 7638's, computed over the EC members in order.
    #[test]
    fn thumbprint_matches_rfc_9449s_example() {
        let t = thumbprint(
            "l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs",
            "9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA",
        );
        assert_eq!(
            t.map(|t| t.to_string()).as_deref(),
            Some("0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I")
        );
    }
}
