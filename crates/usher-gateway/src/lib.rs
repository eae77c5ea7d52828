//! usher-gateway: the SSE edge.
//!
//! * [`config`] — flags and `USHER_*` environment variables.
//! * [`hub`] — the browsers held here and what each should see next.
//! * [`routes`] — the HTTP contract browsers use.
//! * this module — startup, the heartbeat and the stream consumer.
//!
//! [`run`] is the whole server: tests call it with a listener on port 0.

pub mod config;
pub mod hub;
pub mod routes;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use usher_core::ids::{PlaceId, QueueId, ServerId};
use usher_core::messages::StreamMessage;
use usher_core::secret::{SecretError, TicketKey};
use usher_core::store::{DevSecret, Store, StoreError};
use usher_core::time::now_ms;

pub use config::Config;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("redis: {0}")]
    Store(#[from] StoreError),
    #[error("USHER_TICKET_KEY: {0}")]
    TicketKey(#[from] SecretError),
    #[error("http server: {0}")]
    Io(#[from] std::io::Error),
}

/// Entries read from the stream per call.
const READ_COUNT: usize = 500;
/// How long one `XREADGROUP` blocks.
const READ_BLOCK: Duration = Duration::from_secs(5);

/// One gateway's shared state.
pub struct Gateway {
    pub(crate) store: Store,
    pub(crate) hub: hub::Hub,
    pub(crate) ticket_key: TicketKey,
    pub(crate) config: Config,
    pub(crate) id: ServerId,
    index: RwLock<String>,
    pub(crate) shutdown: CancellationToken,
    draining: AtomicBool,
}

impl Gateway {
    /// This gateway's index in the registry (base 36); it appears in waiting-set members.
    pub fn index(&self) -> String {
        self.index
            .read()
            .map(|g| g.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    pub fn id(&self) -> &ServerId {
        &self.id
    }

    pub fn connections(&self) -> u64 {
        self.hub.connections()
    }

    pub(crate) fn shutting_down(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// Tells the gateway with index `idx` that it no longer holds `place`.
    pub(crate) async fn tell_gateway(&self, idx: &str, q: &QueueId, place: PlaceId, reason: &str) {
        let msg = StreamMessage::Ended {
            queue: q.clone(),
            place,
            reason: reason.to_owned(),
        };
        let r = async {
            let live = self.store.live_gateways(now_ms()).await?;
            match live.get(idx) {
                Some(id) => self.store.send(&[(id.clone(), vec![msg])]).await,
                None => Ok(()),
            }
        }
        .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, gateway = idx, "could not notify the gateway that held a place");
        }
    }
}

/// Runs a gateway on `listener` until `shutdown` resolves. On shutdown every stream ends
/// without an event, so browsers reconnect (to another gateway) and resume their places.
pub async fn run(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let gw = start(cfg).await?;
    let addr = listener.local_addr()?;
    tracing::info!(listen = %addr, server_id = %gw.id, index = %gw.index(), "gateway running");
    let app = routes::router(gw.clone());
    let stopping = gw.clone();
    let served = usher_http::serve(listener, app, async move {
        shutdown.await;
        stopping.draining.store(true, Ordering::Relaxed);
        stopping.shutdown.cancel();
        let n = stopping.hub.end_all();
        tracing::info!(
            connections = n,
            "ending open streams; browsers reconnect elsewhere"
        );
    })
    .await;
    gw.shutdown.cancel();
    if let Err(e) = gw.store.deregister_gateway(&gw.id).await {
        tracing::warn!(error = %e, "could not deregister from the gateway registry");
    }
    served?;
    Ok(())
}

async fn start(cfg: Config) -> Result<Arc<Gateway>, Error> {
    let id = cfg.server_id.clone().unwrap_or_else(ServerId::random);
    let store = Store::connect(&cfg.redis_url).await?;
    let reader =
        Store::connect_with_timeout(&cfg.redis_url, READ_BLOCK + Duration::from_secs(5)).await?;
    let ticket_key = match &cfg.ticket_key {
        Some(k) => TicketKey::new(k.as_bytes())?,
        None => {
            let k = store
                .shared_dev_secret(DevSecret::TicketKey, TicketKey::generate_hex())
                .await?;
            tracing::warn!(
                "no ticket key configured (USHER_TICKET_KEY): using a development key stored in \
                 Redis and shared by all gateways using it"
            );
            TicketKey::new(k.into_bytes())?
        }
    };
    let index = store
        .register_gateway(&id, now_ms(), cfg.registry_ttl())
        .await?;
    store.ensure_stream(&id, cfg.stream_ttl()).await?;
    let gw = Arc::new(Gateway {
        store,
        hub: hub::Hub::new(),
        ticket_key,
        config: cfg,
        id,
        index: RwLock::new(index),
        shutdown: CancellationToken::new(),
        draining: AtomicBool::new(false),
    });
    tokio::spawn(heartbeat(gw.clone()));
    tokio::spawn(consume(gw.clone(), reader));
    Ok(gw)
}

/// Keeps the registry entry, the stream and this gateway's queue interests alive.
async fn heartbeat(gw: Arc<Gateway>) {
    let mut every = tokio::time::interval(gw.config.heartbeat());
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            () = gw.shutdown.cancelled() => break,
            _ = every.tick() => {}
        }
        let r: Result<(), StoreError> = async {
            let idx = gw
                .store
                .register_gateway(&gw.id, now_ms(), gw.config.registry_ttl())
                .await?;
            if idx != gw.index() {
                tracing::warn!(old = %gw.index(), new = %idx, "gateway index changed (redis lost its registry)");
                if let Ok(mut g) = gw.index.write() {
                    *g = idx.clone();
                }
            }
            gw.store.ensure_stream(&gw.id, gw.config.stream_ttl()).await?;
            gw.store
                .refresh_interest(&gw.hub.queues(), &idx, now_ms())
                .await?;
            Ok(())
        }
        .await;
        match r {
            Ok(()) if failing => {
                tracing::info!("redis is back; heartbeat resumed");
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "heartbeat failed; browsers stay connected while redis is away");
                }
                failing = true;
            }
        }
        gw.hub.sweep_orphans();
    }
}

/// Reads this gateway's stream and applies each message to the browsers held here.
async fn consume(gw: Arc<Gateway>, reader: Store) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let read = tokio::select! {
            () = gw.shutdown.cancelled() => break,
            r = reader.read_stream(&gw.id, READ_COUNT, READ_BLOCK) => r,
        };
        match read {
            Ok(Some(entries)) => {
                backoff = Duration::from_millis(100);
                if entries.is_empty() {
                    continue;
                }
                let ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
                for e in entries {
                    match e.message {
                        Some(m) => routes::apply(&gw, m),
                        None => tracing::warn!(entry = %e.id, "undecodable stream entry skipped"),
                    }
                }
                if let Err(e) = gw.store.ack(&gw.id, &ids).await {
                    tracing::warn!(error = %e, "could not acknowledge stream entries");
                }
            }
            Ok(None) => {
                tracing::warn!("stream or consumer group missing; recreating");
                if let Err(e) = gw.store.ensure_stream(&gw.id, gw.config.stream_ttl()).await {
                    tracing::warn!(error = %e, "could not recreate the stream");
                    tokio::time::sleep(backoff).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading the stream failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}
