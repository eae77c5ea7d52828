//! usher-gateway: the SSE edge.
//!
//! Modules, each importing only those listed before it (no cycles):
//!
//! * `ticket` — the signed ticket a browser holds for its place, and the key every gateway
//!   shares to sign it.
//! * [`position`] — a browser's position read off the dispatcher's `state` snapshot.
//! * [`config`] — flags and `USHER_*` environment variables, and their validation.
//! * `metrics` — every series of `GET /metrics`, named in one place.
//! * `frames` — SSE text: events, comments, `retry:`.
//! * `client` — who a client is: its address (socket, PROXY protocol, trusted
//!   `X-Forwarded-For` hops) and the key its limits count under.
//! * `bucket` — a token bucket (burst, then a rate), refilled lazily.
//! * `limits` — per-IP limits: token buckets for joins and for status polls and leaves,
//!   streams, places held.
//! * `request` — strict request-head parsing and error answers written without the router.
//! * `errors` — the API errors of the browser contract and the checks that produce them.
//! * `away` — disconnects waiting to be written to Redis in batches.
//! * `keepalive` — one timer for every stream's keepalive comments.
//! * `update` — what a held connection sends next, and its SSE text.
//! * `latest` — a held connection's channel: the latest update for its one receiver.
//! * `hub` — the browsers held here, by queue and place.
//! * `joins` — joins batched per queue (one Redis call for the joins that arrive together).
//! * `pow_gate` — the proof-of-work gate: puzzles issued, a join's solution checked before
//!   Redis is asked anything.
//! * `proof` — a proof of possession of the browser's key (queues with `bind:
//!   "browser_key"`): checked before Redis is asked anything.
//! * `recovery` — after Redis lost data: which queues' places to put back, and when to stop.
//! * `draw` — `GET /api/queues/{queue}/draw`: a scheduled sale's public draw record.
//! * `shared` — `Gateway`, the state every task reaches: identity, Redis,
//!   and the above.
//! * `binding` — a binding queue's checks: the request's proof, the place's key, one use.
//! * `admissions_first` — the order a batch read from the stream is applied in.
//! * `inbox` — this gateway's Redis Stream, read and applied to the browsers held here.
//! * `tasks` — heartbeat, flush of disconnects, drain.
//! * `stream` — an SSE stream: setup (join or resume) and the per-connection pump.
//! * `waiting_room` — the waiting-room page at `/q/{queue}` (built in, or `USHER_PAGE_DIR`).
//! * `openapi` — the API description's frame: the event stream (served by `server`, outside
//!   the router) and the schemas of every frame it writes.
//! * `routes` — the other HTTP routes: status, leave, health, the page; one table that also
//!   makes the API description (`GET /openapi.json`).
//! * `server` — the HTTP/1.1 accept loop: streams served directly, the rest by `routes`
//!   (each request carrying its client's [`IpKey`](client::IpKey) as an extension).
//! * this module — startup and shutdown ([`run`]).
//!
//! [`run`] is the whole server: tests call it with a listener on port 0.

pub mod config;
pub mod position;
mod ticket;

mod admissions_first;
mod away;
mod binding;
mod client;
// >>> door
mod door;
mod door_tasks;
// <<< door
mod draw;
mod errors;
mod frames;
mod hub;
mod inbox;
mod invitation;
mod invitation_settings;
mod joins;
mod keepalive;
mod lanes;
mod latest;
mod limits;
mod metrics;
mod openapi;
mod pow_gate;
mod recovery;
mod request;
mod respond;
mod routes;
mod server;
mod shared;
mod sockets;
mod stream;
mod tasks;
mod update;
mod waiting_room;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::ticket::{TicketKey, TicketKeyError};
use tokio::net::TcpListener;
use usher_core::ids::ServerId;
use usher_core::store::{DevSecret, Store, StoreError};
use usher_core::time::now_ms;
use usher_pow::ChallengeSecret;

pub use config::{Config, ConfigError};

use shared::Gateway;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Its message says "redis: …" already.
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("USHER_TICKET_KEY: {0}")]
    TicketKey(#[from] TicketKeyError),
    #[error("http server: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Page(#[from] waiting_room::PageError),
}

/// How long after the drain window the process gives up on streams that are still open.
const DRAIN_HARD_MARGIN: Duration = Duration::from_secs(5);

/// Runs a gateway on `listener` until `shutdown` resolves, then drains: `/readyz` fails at
/// once, new streams are sent elsewhere, and open streams end spread over the drain window
/// with a jittered `retry:`, so browsers reconnect (through the load balancer, to other
/// gateways) and resume their places. Returns at the latest 5 s after the drain window.
pub async fn run(
    cfg: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    cfg.validate()?;
    usher_http::metrics::install();
    metrics::describe();
    let page = Arc::new(waiting_room::Page::load(cfg.page_dir.as_deref())?);
    let gw = start(cfg).await?;
    let addr = listener.local_addr()?;
    tracing::info!(listen = %addr, server_id = %gw.id(), index = %gw.index(), "gateway running");
    let app = routes::router(gw.clone(), page);
    let drain_started = Arc::new(tokio::sync::Notify::new());
    let (stopping, started) = (gw.clone(), drain_started.clone());
    let serve = server::serve(listener, gw.clone(), app, async move {
        shutdown.await;
        stopping.start_draining();
        tracing::info!(
            connections = stopping.connections(),
            "draining: /readyz fails now; open streams end over the drain window"
        );
        tokio::time::sleep(Duration::from_millis(stopping.config().drain_delay_ms)).await;
        started.notify_one();
        tokio::spawn(tasks::drain(stopping.clone()));
    });
    let window = Duration::from_secs(gw.config().drain_secs);
    tokio::select! {
        () = serve => {}
        () = async {
            drain_started.notified().await;
            tokio::time::sleep(window + DRAIN_HARD_MARGIN).await;
        } => {
            tracing::warn!(left = gw.connections(), "drain deadline reached; closing what is left");
        }
    }
    gw.stopped().cancel();
    if let Err(e) = gw.store().deregister_gateway(gw.index(), now_ms()).await {
        tracing::warn!(error = %e, "could not deregister; the registry entry expires by itself");
    }
    tracing::info!("gateway stopped");
    Ok(())
}

/// The puzzle signer: the configured secret, or the one every gateway shares through Redis.
async fn challenges(cfg: &Config, store: &Store) -> Result<pow_gate::Challenges, Error> {
    let (secret, shared) = match cfg.challenge_secret()? {
        Some(s) => (s, None),
        None => {
            let s = store
                .shared_dev_secret(DevSecret::ChallengeSecret, ChallengeSecret::generate_hex())
                .await?;
            let secret = ChallengeSecret::new(s.as_bytes()).map_err(ConfigError::from)?;
            (secret, Some(s))
        }
    };
    Ok(pow_gate::Challenges::new(
        secret,
        shared,
        cfg.challenge_ttl(),
    ))
}

/// Connects, registers this gateway, and starts its background tasks.
async fn start(cfg: Config) -> Result<Arc<Gateway>, Error> {
    let id = cfg.server_id.clone().unwrap_or_else(ServerId::random);
    let store = Store::open(&cfg.redis).await?;
    // Its own connection: a blocked XREADGROUP would hold up every command behind it.
    let reader =
        Store::open_with_timeout(&cfg.redis, inbox::READ_BLOCK + Duration::from_secs(5)).await?;
    let mut dev_ticket_key = None;
    let ticket_key = match cfg.ticket_key()? {
        Some(k) => k,
        None => {
            let k = store
                .shared_dev_secret(DevSecret::TicketKey, TicketKey::generate_hex())
                .await?;
            tracing::warn!(
                "no ticket key configured (USHER_TICKET_KEY): using a development key stored in \
                 Redis and shared by all gateways using it"
            );
            dev_ticket_key = Some(k.clone());
            TicketKey::new(k.into_bytes())?
        }
    };
    let challenges = challenges(&cfg, &store).await?;
    let index = store
        .register_gateway(&id, now_ms(), cfg.registry_ttl())
        .await?;
    store.ensure_stream(&id, cfg.stream_ttl()).await?;
    let gw = Arc::new(Gateway::new(
        id,
        index,
        cfg,
        store,
        ticket_key,
        dev_ticket_key,
        challenges,
    ));
    tokio::spawn({
        let gw = gw.clone();
        async move { gw.keepalive().run(gw.stopped().clone()).await }
    });
    tokio::spawn(tasks::flush_away(gw.clone()));
    tokio::spawn(tasks::heartbeat(gw.clone()));
    tokio::spawn(inbox::consume(gw.clone(), reader));
    // >>> door
    tokio::spawn(door_tasks::release(gw.clone()));
    tokio::spawn(door_tasks::record(gw.clone()));
    // <<< door
    Ok(gw)
}
