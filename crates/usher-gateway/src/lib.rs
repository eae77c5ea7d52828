//! usher-gateway: the SSE edge.
//!
//! * [`config`] — flags and `USHER_*` environment variables.
//! * [`hub`] — the browsers held here and what each should see next.
//! * `joins` — joins batched per queue (one Redis call for the joins that arrive together).
//! * [`server`] — the HTTP/1.1 accept loop; [`stream`] — SSE streams; [`routes`] — the rest of
//!   the browser contract, and what stream messages do.
//! * this module — startup, the heartbeat, the stream consumer and draining.
//!
//! [`run`] is the whole server: tests call it with a listener on port 0.

pub mod config;
pub mod hub;
mod joins;
mod keepalive;
pub mod routes;
pub mod server;
pub mod stream;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
/// Draining ends connections in steps this far apart.
const DRAIN_STEP: Duration = Duration::from_millis(100);
/// How long after the drain window the process gives up on streams that are still open.
const DRAIN_HARD_MARGIN: Duration = Duration::from_secs(5);

/// One gateway's shared state.
pub struct Gateway {
    pub(crate) store: Store,
    pub(crate) hub: hub::Hub,
    /// Joins waiting for the Redis call under way for their queue.
    pub(crate) joins: joins::Joiner,
    pub(crate) ticket_key: TicketKey,
    pub(crate) config: Config,
    pub(crate) id: ServerId,
    index: u16,
    pub(crate) shutdown: CancellationToken,
    draining: AtomicBool,
    /// Disconnects that could not be recorded in Redis yet (retried by the heartbeat).
    pending_away: Mutex<Vec<(QueueId, PlaceId)>>,
    /// One timer for every stream's keepalive comments, spread over the period.
    pub(crate) keepalive: keepalive::Keepalive,
    /// Open client connections (streams, requests and idle keep-alive connections).
    pub(crate) sockets: std::sync::atomic::AtomicU64,
    /// Tells idle keep-alive connections to close (descriptors are needed for streams).
    pub(crate) shed_idle: tokio::sync::Notify,
}

impl Gateway {
    /// This process's index in the gateway registry (base 36); it appears in waiting-set members.
    pub fn index(&self) -> u16 {
        self.index
    }

    pub fn id(&self) -> &ServerId {
        &self.id
    }

    /// Whether open connections are below the stream cap. At the cap, every new connection
    /// tells the idle ones to close ([`Gateway::shed_idle`]), so idle keep-alive connections
    /// never keep descriptors from streams.
    pub(crate) fn spare_sockets(&self) -> bool {
        self.sockets.load(std::sync::atomic::Ordering::Relaxed) < self.config.max_connections
    }

    pub fn connections(&self) -> u64 {
        self.hub.connections()
    }

    pub(crate) fn shutting_down(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    /// A browser went away: keep its place for the queue's grace period. Recorded in batches
    /// (see [`flush_away`]), so a mass disconnect costs Redis one call per thousand places.
    pub(crate) fn mark_away(&self, q: QueueId, place: PlaceId) {
        if let Ok(mut p) = self.pending_away.lock() {
            p.push((q, place));
        }
    }

    /// Tells the gateway with index `idx` that it no longer holds `place`.
    pub(crate) async fn tell_gateway(&self, idx: u16, q: &QueueId, place: PlaceId, reason: &str) {
        let msg = StreamMessage::Ended {
            queue: q.clone(),
            place,
            reason: reason.to_owned(),
        };
        let r = async {
            let live = self.store.live_gateways(now_ms()).await?;
            match live.get(&idx) {
                Some(id) => self.store.send(&[(id.clone(), vec![msg])]).await,
                None => Ok(()),
            }
        }
        .await;
        if let Err(e) = r {
            tracing::warn!(error = %e, gateway = idx, "could not notify the gateway that held a place");
        }
    }

    fn jittered_retry_ms(&self) -> u64 {
        stream::jittered(self.config.retry_ms)
    }
}

/// Runs a gateway on `listener` until `shutdown` resolves, then drains: `/readyz` fails at
/// once, new streams are sent elsewhere, and open streams end spread over the drain window
/// with a jittered `retry:`, so browsers reconnect (through the load balancer, to other
/// gateways) and resume their places. Returns at the latest 5 s after the drain window.
pub async fn run(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let gw = start(cfg).await?;
    let addr = listener.local_addr()?;
    tracing::info!(listen = %addr, server_id = %gw.id, index = %gw.index, "gateway running");
    let app = routes::router(gw.clone());
    let drain_started = Arc::new(tokio::sync::Notify::new());
    let (stopping, started) = (gw.clone(), drain_started.clone());
    let serve = server::serve(listener, gw.clone(), app, async move {
        shutdown.await;
        stopping.draining.store(true, Ordering::Relaxed);
        tracing::info!(
            connections = stopping.hub.connections(),
            "draining: /readyz fails now; open streams end over the drain window"
        );
        tokio::time::sleep(Duration::from_millis(stopping.config.drain_delay_ms)).await;
        started.notify_one();
        tokio::spawn(drain(stopping.clone()));
    });
    let window = Duration::from_secs(gw.config.drain_secs);
    tokio::select! {
        () = serve => {}
        () = async {
            drain_started.notified().await;
            tokio::time::sleep(window + DRAIN_HARD_MARGIN).await;
        } => {
            tracing::warn!(left = gw.hub.connections(), "drain deadline reached; closing what is left");
        }
    }
    gw.shutdown.cancel();
    if let Err(e) = gw.store.deregister_gateway(gw.index, now_ms()).await {
        tracing::warn!(error = %e, "could not deregister; the registry entry expires by itself");
    }
    tracing::info!("gateway stopped");
    Ok(())
}

/// Ends open streams spread over the drain window.
async fn drain(gw: Arc<Gateway>) {
    let steps = (Duration::from_secs(gw.config.drain_secs).as_millis() / DRAIN_STEP.as_millis())
        .max(1) as u64;
    let total = gw.hub.connections();
    let per_step = total.div_ceil(steps).max(1) as usize;
    let mut every = tokio::time::interval(DRAIN_STEP);
    loop {
        every.tick().await;
        let ended = gw.hub.end_some(per_step, || gw.jittered_retry_ms());
        if ended == 0 && gw.hub.connections() == 0 {
            break;
        }
    }
    tracing::info!(ended = total, "all streams ended");
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
    let keepalive = keepalive::Keepalive::new(cfg.keepalive());
    let gw = Arc::new(Gateway {
        store,
        hub: hub::Hub::new(),
        joins: joins::Joiner::default(),
        ticket_key,
        config: cfg,
        id,
        index,
        shutdown: CancellationToken::new(),
        draining: AtomicBool::new(false),
        pending_away: Mutex::new(Vec::new()),
        keepalive,
        sockets: std::sync::atomic::AtomicU64::new(0),
        shed_idle: tokio::sync::Notify::new(),
    });
    tokio::spawn({
        let gw = gw.clone();
        async move { gw.keepalive.run(gw.shutdown.clone()).await }
    });
    tokio::spawn(flush_away(gw.clone()));
    tokio::spawn(heartbeat(gw.clone()));
    tokio::spawn(consume(gw.clone(), reader));
    Ok(gw)
}

/// How often disconnects are written to Redis.
const AWAY_FLUSH: Duration = Duration::from_millis(50);

/// Writes the places of browsers that went away to Redis, batched per queue; keeps them for
/// the next round while Redis is unreachable.
async fn flush_away(gw: Arc<Gateway>) {
    let mut every = tokio::time::interval(AWAY_FLUSH);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            () = gw.shutdown.cancelled() => true,
            _ = every.tick() => false,
        };
        let pending: Vec<_> = gw
            .pending_away
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let mut by_queue: std::collections::HashMap<QueueId, Vec<PlaceId>> = Default::default();
        for (q, p) in pending {
            by_queue.entry(q).or_default().push(p);
        }
        for (q, places) in by_queue {
            match gw.store.mark_away(&q, &places, gw.index, now_ms()).await {
                Ok(n) => {
                    tracing::debug!(queue = %q, gone = places.len(), kept = n, "browsers went away")
                }
                Err(e) => {
                    tracing::debug!(queue = %q, n = places.len(), error = %e, "could not mark places away; will retry");
                    if let Ok(mut p) = gw.pending_away.lock() {
                        p.extend(places.into_iter().map(|pl| (q.clone(), pl)));
                    }
                }
            }
        }
        if stopping {
            break;
        }
    }
}

/// Keeps the registry entry, the stream and this gateway's queue interests alive; ends the
/// streams of queues that were closed; retries disconnects Redis could not record.
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
            let now = now_ms();
            gw.store
                .heartbeat_gateway(gw.index, &gw.id, now, gw.config.registry_ttl())
                .await?;
            gw.store
                .ensure_stream(&gw.id, gw.config.stream_ttl())
                .await?;
            let queues = gw.hub.queues();
            let open = gw.store.refresh_interest(&queues, gw.index, now).await?;
            for (q, open) in queues.iter().zip(open) {
                if !open {
                    gw.hub.close_queue(q, "queue_closed");
                }
            }
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
                // Acknowledge in the background: the next read must not wait for Redis to answer
                // (it may be busy with a large admission). Unacknowledged entries are only
                // memory: nothing re-reads them.
                let acker = gw.clone();
                tokio::spawn(async move {
                    if let Err(e) = acker.store.ack(&acker.id, &ids).await {
                        tracing::warn!(error = %e, "could not acknowledge stream entries");
                    }
                });
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
