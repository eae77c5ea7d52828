//! Where the entry-token keys come from: `USHER_JWT_KEY_FILE`, `USHER_JWT_KEY`, or a
//! development key shared through Redis.

use usher_core::store::{DevSecret, Store};
use usher_mint::keyring::KeyRing;
use usher_mint::token::SigningKey;

use crate::config::Config;
use crate::Error;

/// Loads the configured keys (the first signs, see [`KeyRing`]), or shares a development key
/// through Redis (with a warning; its PEM is returned too, to be written back after a loss:
/// see [`crate::dev_secrets`]).
pub async fn load(cfg: &Config, store: &Store) -> Result<(KeyRing, Option<String>), Error> {
    let configured = if let Some(path) = &cfg.jwt_key_file {
        let origin = format!("USHER_JWT_KEY_FILE {}", path.display());
        let pem = std::fs::read_to_string(path).map_err(|e| Error::KeyFile {
            path: path.display().to_string(),
            source: e,
        })?;
        Some((origin, pem))
    } else {
        cfg.jwt_key
            .as_ref()
            .map(|pem| ("USHER_JWT_KEY".to_owned(), pem.clone()))
    };
    if let Some((origin, pem)) = configured {
        let ring = KeyRing::from_pem(&pem).map_err(|source| Error::Keys { origin, source })?;
        return Ok((ring, None));
    }
    let pem = store
        .shared_dev_secret(DevSecret::JwtKey, SigningKey::generate_pem()?)
        .await?;
    let key = SigningKey::from_pkcs8_pem(&pem)?;
    tracing::warn!(
        kid = key.kid(),
        "no entry-token key configured (USHER_JWT_KEY_FILE / USHER_JWT_KEY): using a development \
         key stored in Redis; anyone with Redis access can mint entry tokens"
    );
    Ok((KeyRing::single(key), Some(pem)))
}
