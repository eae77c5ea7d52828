//! usher-dispatcher: admission at a controlled rate, entry tokens, the admin API and JWKS.
//!
//! * [`config`] — flags and `USHER_*` environment variables.
//! * `metrics` — every series of `GET /metrics`, named in one place.
//! * `dev_secrets` — development secrets shared through Redis, written back after a loss.
//! * `facts` — what this replica reports about itself for the readiness report.
//! * `keys` — where the entry-token keys come from, and the JWKS that publishes them.
//! * [`tick`] — the tick loop: each queue this replica leads admits at its rate, its tokens
//!   minted and delivered to the gateways.
//! * `state` — what every HTTP handler shares; how a failed Redis call is answered.
//! * `admin` — the admin API (queues, scheduled sales, gateways, audit trail, its errors and
//!   descriptions) and the operator dashboard.
//! * `queues_file` — `USHER_QUEUES_FILE`: queues configured again after a Redis data loss.
//! * `sessions` — the session API booking services call with an entry token;
//!   `session_proof` — the proof of the browser's key a bound token needs there.
//! * `backends` — booking backends' load reports, which adaptive queues follow.
//! * `inventory` — booking services' inventory reports, which admission follows.
//! * `openapi` — the API description's frame (`GET /openapi.json`); the routes describe
//!   themselves.
//! * `routes` — every route, in the one table that serves and describes them.
//!
//! [`run`] is the whole server: tests call it with a listener on port 0.

mod admin;
mod backends;
pub mod config;
mod dev_secrets;
// >>> door
mod door_session;
// <<< door
mod facts;
mod inventory;
mod keys;
mod metrics;
mod openapi;
pub mod queues_file;
mod routes;
mod session_proof;
mod sessions;
mod state;
pub mod tick;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use usher_core::store::{DevSecret, Store, StoreError};
use usher_mint::token::KeyError;

pub use config::Config;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Already reads "redis: …" (or "unexpected reply from redis: …").
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error("entry-token keys in {origin}: {source}")]
    Keys { origin: String, source: KeyError },
    #[error("cannot read the entry-token key file {path}: {source}")]
    KeyFile {
        path: String,
        source: std::io::Error,
    },
    #[error("http server: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    QueuesFile(#[from] queues_file::QueuesFileError),
}

/// Runs the dispatcher on `listener` until `shutdown` resolves.
pub async fn run(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    cfg.validate()?;
    usher_http::metrics::install();
    metrics::describe();
    metrics::tick_period(cfg.tick());
    let queues_file = cfg
        .queues_file
        .as_deref()
        .map(queues_file::QueuesFile::load)
        .transpose()?;
    let store = Store::open(&cfg.redis).await?;
    let (keys, dev_jwt_key) = keys::load(&cfg, &store).await?;
    let dev_signing_key = dev_jwt_key.is_some();
    let keys = Arc::new(keys);
    let key = keys.signer().clone();
    let (admin_tokens, dev_admin_token) = admin_tokens(&cfg, &store).await?;
    let admin_tokens = Arc::new(admin_tokens);
    let cancel = CancellationToken::new();
    let settings = tick::Settings {
        replica: cfg.replica_id.clone(),
        tick: cfg.tick(),
        lease_ttl: std::time::Duration::from_millis(cfg.lease_ttl_ms),
        exact_positions: cfg.exact_positions,
        redis: cfg.redis.clone(),
    };
    tracing::info!(replica = %settings.replica, "dispatcher replica starting");
    let admitter = tick::Admitter::new(store.clone(), key.clone(), settings);
    let dev: Vec<_> = [
        dev_jwt_key.map(|k| (DevSecret::JwtKey, k)),
        dev_admin_token.map(|t| (DevSecret::AdminToken, t)),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !dev.is_empty() {
        tokio::spawn(dev_secrets::keep(store.clone(), dev, cancel.clone()));
    }
    tokio::spawn(facts::report(
        store.clone(),
        cfg.replica_id.clone(),
        cfg.serve.max_sockets,
        dev_signing_key,
        cancel.clone(),
    ));
    let (hint_tx, hints) = tokio::sync::mpsc::unbounded_channel();
    if let Some(file) = queues_file {
        let created = queues_file::configure_missing(&store, &file).await?;
        tracing::info!(
            queues = file.len(),
            created = created.len(),
            "USHER_QUEUES_FILE loaded"
        );
        let hints = hint_tx.clone();
        tokio::spawn(queues_file::watch(
            store.clone(),
            file,
            cancel.clone(),
            move |q| {
                let _ = hints.send(q);
            },
        ));
    }
    let ticking = tokio::spawn(admitter.run(cancel.clone(), hints));
    let app = routes::router(state::AppState {
        store,
        keys: keys.clone(),
        admin_tokens,
        service_token: cfg.service_token.as_deref().map(Arc::from),
        hints: hint_tx,
        session_proofs: Arc::new(usher_http::bucket::Buckets::new(
            session_proof::SESSION_PROOFS,
        )),
        dev_signing_key,
        max_sockets: cfg.serve.max_sockets,
        replica: cfg.replica_id.clone(),
        reports: Arc::new(tokio::sync::Semaphore::new(1)),
    });
    tracing::info!(listen = %listener.local_addr()?, kid = key.kid(), verify_only = ?keys.verify_only_kids(), tick_ms = cfg.tick_ms, "dispatcher running");
    let served = usher_http::serve(listener, app, cfg.serve, shutdown).await;
    // Stop ticking and release every lease, so other replicas take over at once.
    cancel.cancel();
    let _ = ticking.await;
    served?;
    Ok(())
}

/// The admin tokens: `USHER_ADMIN_TOKEN`, or with `USHER_DEV=1` a development token shared
/// through Redis (the first dispatcher stores it, every one reads it back), logged once.
/// The development token is returned too, to be written back after a loss.
async fn admin_tokens(
    cfg: &Config,
    store: &Store,
) -> Result<(admin::auth::AdminTokens, Option<String>), Error> {
    if let Some(spec) = &cfg.admin_token {
        let tokens = admin::auth::AdminTokens::parse(spec).map_err(config::ConfigError::from)?;
        return Ok((tokens, None));
    }
    if !cfg.dev {
        return Err(config::ConfigError::NoAdminToken.into());
    }
    let generated: [u8; 24] = rand::random();
    let generated: String = generated.iter().map(|b| format!("{b:02x}")).collect();
    let token = store
        .shared_dev_secret(DevSecret::AdminToken, generated)
        .await?;
    tracing::warn!(
        admin_token = %token,
        "USHER_DEV=1 and no USHER_ADMIN_TOKEN: development admin token (label \"{}\") shared \
         through Redis; anyone with Redis access can read it",
        admin::auth::DEV_LABEL
    );
    Ok((admin::auth::AdminTokens::dev(&token), Some(token)))
}
