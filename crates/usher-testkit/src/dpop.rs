//! A browser's key for tests of queues that bind to it (`bind: "browser_key"`): a P-256 key
//! pair, its RFC 7638 thumbprint, and proofs of possession (ES256 compact JWS, as DPoP, RFC
//! 9449), made the way a client outside the browser would make them. The thumbprint is
//! computed by `jsonwebtoken`, not by usher's own code, so a test checks usher against another
//! implementation; `crates/usher-testkit/browser/bind_client.py` does the same with PyJWT.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::jwk::{Jwk, ThumbprintHash};
use p256::ecdsa::signature::Signer;
use p256::ecdsa::{Signature, SigningKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A browser's non-extractable key, as far as a test needs it.
pub struct BrowserKey {
    key: SigningKey,
    jwk: Value,
}

impl BrowserKey {
    /// A fresh random key.
    pub fn generate() -> Self {
        loop {
            // A random scalar is a valid key but for a vanishing few (zero, >= the order).
            if let Ok(key) = SigningKey::from_slice(&rand::random::<[u8; 32]>()) {
                return Self::of(key);
            }
        }
    }

    /// The key whose secret scalar is `seed` repeated: the same key on every run (1 to 255;
    /// each is a valid P-256 scalar).
    pub fn from_seed(seed: u8) -> Self {
        match SigningKey::from_slice(&[seed.max(1); 32]) {
            Ok(key) => Self::of(key),
            Err(_) => Self::generate(),
        }
    }

    fn of(key: SigningKey) -> Self {
        let point = key.verifying_key().to_encoded_point(false);
        let coordinate =
            |c: Option<&p256::FieldBytes>| c.map(|c| URL_SAFE_NO_PAD.encode(c)).unwrap_or_default();
        let jwk = json!({"kty": "EC", "crv": "P-256",
            "x": coordinate(point.x()), "y": coordinate(point.y())});
        Self { key, jwk }
    }

    /// The key's RFC 7638 thumbprint: what a bound token carries as `cnf.jkt`.
    pub fn thumbprint(&self) -> String {
        serde_json::from_value::<Jwk>(self.jwk.clone())
            .map(|jwk| jwk.thumbprint(ThumbprintHash::SHA256))
            .unwrap_or_default()
    }

    /// A fresh proof for a `htm` request to `htu` (no query), made now, presenting `token`
    /// (`ath`) when given.
    pub fn proof(&self, htm: &str, htu: &str, token: Option<&str>) -> String {
        self.proof_with(json!({
            "jti": URL_SAFE_NO_PAD.encode(rand::random::<[u8; 16]>()),
            "iat": usher_core::time::now_ms() / 1000,
            "htm": htm,
            "htu": htu,
            "ath": token.map(ath),
        }))
    }

    /// A proof with exactly these claims (an old `iat`, a chosen `jti`, ...).
    pub fn proof_with(&self, mut claims: Value) -> String {
        if let Some(c) = claims.as_object_mut() {
            c.retain(|_, v| !v.is_null());
        }
        let header = json!({"alg": "ES256", "typ": "usher-pop+jwt", "jwk": self.jwk});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig: Signature = self.key.sign(signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.to_bytes()))
    }
}

/// The proofs spent in `queue`'s slot that Redis at `redis_url` holds now (each is kept
/// 130 s: what a flood of proofs would grow).
pub async fn spent_proofs(redis_url: &str, queue: &str) -> anyhow::Result<usize> {
    let q = usher_core::ids::QueueId::new(queue)?;
    let pattern = usher_core::keys::QueueKeys::new(&q).used_proof("*", "*");
    let mut c = redis::Client::open(redis_url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut cursor = 0u64;
    let mut found = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await?;
        found += keys.len();
        if next == 0 {
            return Ok(found);
        }
        cursor = next;
    }
}

/// A proof's `ath`: base64url SHA-256 of the token it presents.
pub fn ath(token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(token.as_bytes()))
}

/// `token` minted again by `key` with `cnf.jkt` = `jkt`: the token a queue that binds would
/// have issued for the same admission (same place, session and cap).
pub fn bound_token(
    key: &usher_mint::token::SigningKey,
    token: &str,
    jkt: &str,
) -> anyhow::Result<String> {
    let claims = crate::line::claims(token)?;
    Ok(key.mint(&usher_mint::token::BoundClaims {
        claims,
        cnf: usher_mint::token::Confirmation {
            jkt: jkt.to_owned(),
        },
    }))
}
