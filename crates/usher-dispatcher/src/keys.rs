//! The entry-token keys: where they come from (`USHER_JWT_KEY_FILE`, `USHER_JWT_KEY`, or a
//! development key shared through Redis), and the JWKS document that publishes them
//! (`GET /.well-known/jwks.json`).

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use usher_core::store::{DevSecret, Store};
use usher_mint::keyring::KeyRing;
use usher_mint::token::SigningKey;
use utoipa::ToSchema;

use crate::config::Config;
use crate::state::AppState;
use crate::Error;

/// Loads the configured keys (the first signs, see [`KeyRing`]), or shares a development key
/// through Redis (with a warning; its PEM is returned too, to be written back after a loss:
/// see [`crate::dev_secrets`]).
pub(crate) async fn load(cfg: &Config, store: &Store) -> Result<(KeyRing, Option<String>), Error> {
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

/// How long a verifier may cache the JWKS. Short, so a retired key's removal spreads quickly; a
/// verifier meeting an unknown `kid` re-fetches anyway (rotation publishes a key on every
/// replica before any replica signs with it).
const JWKS_MAX_AGE: &str = "public, max-age=60";

#[utoipa::path(
    get,
    path = "/.well-known/jwks.json",
    tag = "keys",
    responses((status = 200, description = "The public keys that verify entry tokens, the signing key first (`Cache-Control: public, max-age=60`).", body = Jwks)),
)]
pub(crate) async fn jwks(State(st): State<AppState>) -> Response {
    (
        [(header::CACHE_CONTROL, JWKS_MAX_AGE)],
        Json(st.keys.jwks()),
    )
        .into_response()
}

/// The JWKS document: every key, the signing key first.
#[derive(ToSchema)]
#[allow(dead_code)] // A description: `KeyRing::jwks` builds the same JSON.
pub(crate) struct Jwks {
    pub keys: Vec<Jwk>,
}

/// One Ed25519 public key (RFC 8037).
#[derive(ToSchema)]
#[allow(dead_code)] // A description: `token::jwk_of` builds the same JSON.
pub(crate) struct Jwk {
    #[schema(example = "OKP")]
    pub kty: String,
    #[schema(example = "Ed25519")]
    pub crv: String,
    /// The public key, base64url without padding.
    pub x: String,
    /// The key id tokens name in their header.
    pub kid: String,
    #[schema(example = "EdDSA")]
    pub alg: String,
    #[schema(example = "sig", rename = "use")]
    pub use_: String,
}
