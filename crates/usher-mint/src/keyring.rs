//! The entry-token keys a dispatcher holds: one that signs, any number that only verify.
//!
//! They are read from PEM text (the contents of `USHER_JWT_KEY_FILE` or `USHER_JWT_KEY`):
//! one or more blocks, concatenated. The **first** block must be a PKCS#8 Ed25519 private key
//! (`-----BEGIN PRIVATE KEY-----`): it signs every new token. Every later block is a
//! **verify-only** key, either a private key (a retired signing key) or a public key
//! (`-----BEGIN PUBLIC KEY-----`, a key whose private half is not here, e.g. the next signing
//! key while it is being rolled out). All of them are published in the JWKS, the signing key
//! first, so a token signed by a retired key verifies until it expires, and a key that will
//! sign is known to every verifier before it signs anything.
//!
//! Text outside the blocks is ignored (PEM's explanatory text); a key listed twice is refused.

use std::sync::Arc;

use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey};
use ed25519_dalek::VerifyingKey;

use crate::token::{
    jwk_of, kid_of, verify_as, Claims, KeyError, SigningKey, Verified, VerifyError,
};

/// The signing key and the verify-only keys, in the order they were given.
#[derive(Debug, Clone)]
pub struct KeyRing {
    signer: Arc<SigningKey>,
    /// Every key's public half, the signing key's first.
    public: Vec<VerifyingKey>,
}

/// One PEM block of the input: its label and its whole text (BEGIN and END lines included).
struct Block<'a> {
    label: &'a str,
    text: String,
}

impl KeyRing {
    /// Reads one or more PEM blocks; the first must be a private key (see the module docs).
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        let mut signer = None;
        let mut public: Vec<VerifyingKey> = Vec::new();
        for (i, block) in blocks(text)?.into_iter().enumerate() {
            let n = i + 1;
            let bad = |e: &dyn std::fmt::Display| KeyError::Block {
                block: n,
                reason: e.to_string(),
            };
            let key = match block.label {
                "PRIVATE KEY" => {
                    let key = ed25519_dalek::SigningKey::from_pkcs8_pem(&block.text)
                        .map_err(|e| bad(&e))?;
                    let verifying = key.verifying_key();
                    signer.get_or_insert_with(|| SigningKey::from_dalek(key));
                    verifying
                }
                "PUBLIC KEY" if n == 1 => return Err(KeyError::FirstNotPrivate),
                "PUBLIC KEY" => {
                    VerifyingKey::from_public_key_pem(&block.text).map_err(|e| bad(&e))?
                }
                other => {
                    return Err(KeyError::Label {
                        block: n,
                        label: other.to_owned(),
                    })
                }
            };
            if let Some(first) = public.iter().position(|k| *k == key) {
                return Err(KeyError::Duplicate {
                    block: n,
                    first: first + 1,
                    kid: kid_of(&key),
                });
            }
            public.push(key);
        }
        let signer = signer.ok_or(KeyError::NoKeys)?;
        Ok(Self {
            signer: Arc::new(signer),
            public,
        })
    }

    /// A ring of one key, which signs.
    pub fn single(key: SigningKey) -> Self {
        let public = vec![key.verifying_key()];
        Self {
            signer: Arc::new(key),
            public,
        }
    }

    /// The key that signs new tokens.
    pub fn signer(&self) -> &Arc<SigningKey> {
        &self.signer
    }

    /// The key ids of the verify-only keys, in order.
    pub fn verify_only_kids(&self) -> Vec<String> {
        self.public.iter().skip(1).map(kid_of).collect()
    }

    /// The claims of `token` if any key of the ring signed it: a token signed by a verify-only
    /// key (a retired signing key) is as genuine as one signed by the current key.
    pub fn verify(&self, token: &str) -> Result<Claims, VerifyError> {
        self.verify_as(token)
    }

    /// [`KeyRing::verify`], with the token's `cnf` when it is bound to a browser key.
    pub fn verify_bound(&self, token: &str) -> Result<Verified, VerifyError> {
        self.verify_as(token)
    }

    /// The claims of `token` if it is a door token (`crate::door`) any key of the ring signed.
    /// Its window is the caller's to check ([`crate::door::DoorClaims::within`]).
    pub fn verify_door(&self, token: &str) -> Result<crate::door::DoorClaims, VerifyError> {
        self.verify_as(token)
    }

    fn verify_as<T: serde::de::DeserializeOwned>(&self, token: &str) -> Result<T, VerifyError> {
        for key in &self.public {
            match verify_as(key, token) {
                Err(VerifyError::Signature) => continue,
                result => return result,
            }
        }
        Err(VerifyError::Signature)
    }

    /// The JWKS document: every key, the signing key first.
    pub fn jwks(&self) -> serde_json::Value {
        let keys: Vec<_> = self.public.iter().map(jwk_of).collect();
        serde_json::json!({ "keys": keys })
    }
}

/// Splits `text` into its PEM blocks.
fn blocks(text: &str) -> Result<Vec<Block<'_>>, KeyError> {
    let mut out = Vec::new();
    let mut lines = text.lines().map(str::trim);
    while let Some(line) = lines.next() {
        let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        else {
            continue;
        };
        let end = format!("-----END {label}-----");
        let mut block = format!("{line}\n");
        loop {
            let Some(l) = lines.next() else {
                return Err(KeyError::Unterminated {
                    block: out.len() + 1,
                    label: label.to_owned(),
                });
            };
            block.push_str(l);
            block.push('\n');
            if l == end {
                break;
            }
        }
        out.push(Block { label, text: block });
    }
    if out.is_empty() {
        return Err(KeyError::NoKeys);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::pkcs8::EncodePublicKey;

    use super::*;

    fn private() -> String {
        SigningKey::generate_pem().expect("generate")
    }

    fn public_of(private_pem: &str) -> String {
        let key = ed25519_dalek::SigningKey::from_pkcs8_pem(private_pem).expect("parse");
        key.verifying_key()
            .to_public_key_pem(Default::default())
            .expect("encode")
    }

    fn kids(ring: &KeyRing) -> Vec<String> {
        ring.jwks()["keys"]
            .as_array()
            .expect("keys")
            .iter()
            .map(|k| k["kid"].as_str().expect("kid").to_owned())
            .collect()
    }

    #[test]
    fn the_first_block_signs_and_all_are_published_in_order() {
        let (a, b, c) = (private(), private(), private());
        let text = format!("# signing\n{a}\n{}{c}", public_of(&b));
        let ring = KeyRing::from_pem(&text).expect("ring");
        let kid = |pem: &str| {
            SigningKey::from_pkcs8_pem(pem)
                .expect("key")
                .kid()
                .to_owned()
        };
        assert_eq!(ring.signer().kid(), kid(&a));
        assert_eq!(kids(&ring), [kid(&a), kid(&b), kid(&c)]);
        assert_eq!(ring.verify_only_kids(), [kid(&b), kid(&c)]);
        // One key alone: the same kid as before key rotation existed.
        assert_eq!(kids(&KeyRing::from_pem(&a).expect("ring")), [kid(&a)]);
    }

    #[test]
    fn unusable_files_are_refused_with_the_block_named() {
        let (a, b) = (private(), private());
        let err = |text: &str| KeyRing::from_pem(text).expect_err("refused").to_string();
        assert!(err("").contains("no PEM block"));
        assert!(err("not a key").contains("no PEM block"));
        assert!(err(&public_of(&a)).contains("block 1 is a public key"));
        let dup = err(&format!("{a}{b}{a}"));
        assert!(dup.contains("block 3 is the same key as block 1"), "{dup}");
        let dup = err(&format!("{a}{}", public_of(&a)));
        assert!(dup.contains("block 2 is the same key as block 1"), "{dup}");
        let cut = &b[..b.len() / 2];
        assert!(err(&format!("{a}{cut}")).contains("block 2 has no"));
        let label = err(&format!(
            "{a}-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n"
        ));
        assert!(label.contains("block 2 is `EC PRIVATE KEY`"), "{label}");
        let garbage = err("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n");
        assert!(garbage.starts_with("block 1: "), "{garbage}");
    }
}
