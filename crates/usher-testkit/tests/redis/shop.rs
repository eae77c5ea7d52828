//! A shop's invitations (docs/sale-day.md, "Invitations"), signed in the tests as a shop's
//! code signs them: an Ed25519 key, the JWK the operator registers, compact JWS invitations.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use serde_json::{json, Value};

/// A shop's signing key and the JWK the operator registers for it.
pub struct Shop {
    key: SigningKey,
    kid: &'static str,
}

impl Shop {
    pub fn new(kid: &'static str) -> Self {
        Self {
            key: SigningKey::from_bytes(&rand::random::<[u8; 32]>()),
            kid,
        }
    }

    pub fn jwk(&self) -> Value {
        json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(self.key.verifying_key().as_bytes())})
    }

    /// A compact JWS over `header` and `claims`, as a shop's code makes one.
    pub fn sign_with(&self, header: Value, claims: Value) -> String {
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self.key.sign(signed.as_bytes());
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.to_bytes()))
    }

    /// An invitation for `account` to `queue`, good for an hour.
    pub fn invite(&self, account: &str, queue: &str) -> String {
        self.sign_with(
            json!({"alg": "EdDSA", "kid": self.kid, "typ": "JWT"}),
            json!({"sub": account, "aud": queue, "exp": now_secs() + 3600}),
        )
    }

    /// An invitation for `account` to wait in `queue`'s lane `lane`, good for an hour.
    pub fn invite_to_lane(&self, account: &str, queue: &str, lane: &str) -> String {
        self.sign_with(
            json!({"alg": "EdDSA", "kid": self.kid, "typ": "JWT"}),
            json!({"sub": account, "aud": queue, "lane": lane, "exp": now_secs() + 3600}),
        )
    }
}

fn now_secs() -> u64 {
    usher_core::time::now_ms() / 1000
}
