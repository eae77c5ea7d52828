//! usher-dispatcher: admission at a controlled rate, entry tokens, the admin API and JWKS.
//!
//! * [`config`] — flags and `USHER_*` environment variables.
//! * [`signing`] — where the entry-token keys come from.
//! * [`admission`] — the tick loop.
//! * [`admin`] — HTTP routes: admin API, JWKS, health.
//! * [`sessions`] — the session API booking services call with an entry token.
//! * `schedule` — `opens_at` in the admin API: a scheduled sale and its seed.
//! * `metrics` — every series of `GET /metrics`, named in one place.
//!
//! [`run`] is the whole server: tests call it with a listener on port 0.

pub mod admin;
pub mod admission;
pub mod config;
mod metrics;
mod schedule;
pub mod sessions;
pub mod signing;
mod state;

use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use usher_core::store::{Store, StoreError};
use usher_core::token::KeyError;

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
    let store = Store::connect(&cfg.redis_url).await?;
    let keys = Arc::new(signing::load(&cfg, &store).await?);
    let key = keys.signer().clone();
    if cfg.admin_token.is_none() {
        tracing::warn!("USHER_ADMIN_TOKEN is not set: the admin API answers loopback clients only");
    }
    let cancel = CancellationToken::new();
    let settings = admission::Settings {
        replica: cfg.replica_id.clone(),
        tick: cfg.tick(),
        lease_ttl: std::time::Duration::from_millis(cfg.lease_ttl_ms),
        exact_positions: cfg.exact_positions,
    };
    tracing::info!(replica = %settings.replica, "dispatcher replica starting");
    let admitter = admission::Admitter::new(store.clone(), key.clone(), settings);
    let (hint_tx, hints) = tokio::sync::mpsc::unbounded_channel();
    let ticking = tokio::spawn(admitter.run(cancel.clone(), hints));
    let app = admin::router(admin::AppState {
        store,
        keys: keys.clone(),
        admin_token: cfg.admin_token.as_deref().map(Arc::from),
        hints: hint_tx,
    });
    tracing::info!(listen = %listener.local_addr()?, kid = key.kid(), verify_only = ?keys.verify_only_kids(), tick_ms = cfg.tick_ms, "dispatcher running");
    let served = usher_http::serve(listener, app, shutdown).await;
    // Stop ticking and release every lease, so other replicas take over at once.
    cancel.cancel();
    let _ = ticking.await;
    served?;
    Ok(())
}
