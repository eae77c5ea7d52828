//! Where the entry-token signing key comes from.

use usher_core::store::{DevSecret, Store};
use usher_core::token::SigningKey;

use crate::config::Config;
use crate::Error;

/// Loads the configured key, or shares a development key through Redis (with a warning).
pub async fn load(cfg: &Config, store: &Store) -> Result<SigningKey, Error> {
    if let Some(path) = &cfg.jwt_key_file {
        let pem = std::fs::read_to_string(path).map_err(|e| Error::KeyFile {
            path: path.display().to_string(),
            source: e,
        })?;
        return Ok(SigningKey::from_pkcs8_pem(&pem)?);
    }
    if let Some(pem) = &cfg.jwt_key {
        return Ok(SigningKey::from_pkcs8_pem(pem)?);
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
    Ok(key)
}
