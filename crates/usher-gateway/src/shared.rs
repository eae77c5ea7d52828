//! One gateway's shared state: what every connection and background task reaches through an
//! `Arc<Gateway>`. Each concern owns its own state ([`Hub`], [`Joiner`], [`Away`],
//! [`Keepalive`]); the gateway holds them together with the identity and the Redis connection
//! they share, and is itself only read after startup, apart from its draining flag.

use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use crate::ticket::TicketKey;
use tokio_util::sync::CancellationToken;
use usher_core::ids::{PlaceId, QueueId, ServerId};
use usher_core::messages::{CloseReason, StreamMessage};
use usher_core::store::{PlaceState, Store};
use usher_core::time::now_ms;

use crate::away::Away;
use crate::config::Config;
use crate::hub::Hub;
use crate::joins::{JoinError, Joiner};
use crate::keepalive::Keepalive;
use crate::limits::{IpLimits, Limits};
use crate::metrics;
use crate::pow_gate::Challenges;
use crate::recovery::Recovery;
use usher_http::bucket::{Buckets, Rate};

/// One gateway's shared state.
pub(crate) struct Gateway {
    id: ServerId,
    /// This process's index in the gateway registry; it appears in waiting-set members.
    /// Changes only when the process must register again (another process took the index
    /// while Redis had lost the registry: see [`crate::recovery`]). Shared with [`Joiner`].
    index: Arc<AtomicU16>,
    /// After a Redis data loss: which queues' places to put back.
    recovery: Recovery,
    /// The development ticket key this process uses, when none is configured: written back
    /// to Redis at every heartbeat, so processes started after a loss read the same one.
    dev_ticket_key: Option<String>,
    config: Config,
    store: Store,
    ticket_key: TicketKey,
    draws: crate::draw::Draws,
    /// The browsers held here.
    hub: Hub,
    /// Joins waiting for the Redis call under way for their queue.
    joins: Joiner,
    /// Disconnects that are not recorded in Redis yet.
    away: Arc<Away>,
    /// One timer for every stream's keepalive comments, spread over the period.
    keepalive: Keepalive,
    /// Cancelled when the gateway stops: ends the background tasks and idle connections.
    stopped: CancellationToken,
    /// Set when draining starts: `/readyz` fails and new streams are sent elsewhere.
    draining: AtomicBool,
    /// Client connections open, streams or not (counted by [`crate::server`]).
    open_sockets: Arc<AtomicU64>,
    /// What each client address holds here, against the per-IP limits.
    ip_limits: Arc<IpLimits>,
    /// A binding queue's proofs spent per place here (`limits::PLACE_PROOFS`).
    place_proofs: Buckets<(QueueId, PlaceId)>,
    /// Proof-of-work puzzles: issued and checked here.
    challenges: Challenges,
    /// Queues' invitation settings, cached briefly.
    invitations: crate::invitation_settings::Settings,
    // >>> door
    /// The open door: passes learnt, when Redis last answered, periods.
    door: crate::door::Door,
    // <<< door
}

impl Gateway {
    /// A gateway registered as `id` with registry index `index`.
    pub(crate) fn new(
        id: ServerId,
        index: u16,
        config: Config,
        store: Store,
        ticket_key: TicketKey,
        dev_ticket_key: Option<String>,
        challenges: Challenges,
    ) -> Self {
        let away = Arc::new(Away::default());
        let ip_limits = Arc::new(IpLimits::new(Limits {
            joins: Rate {
                per_second: config.ip_join_rate,
                burst: config.ip_join_burst,
            },
            polls: Rate {
                per_second: config.ip_poll_rate,
                burst: config.ip_poll_burst,
            },
            max_streams: config.ip_max_streams,
            max_places: config.ip_max_places,
        }));
        let index = Arc::new(AtomicU16::new(index));
        Self {
            ip_limits,
            place_proofs: Buckets::new(crate::limits::PLACE_PROOFS),
            joins: Joiner::new(
                store.clone(),
                index.clone(),
                away.clone(),
                ticket_key.clone(),
            ),
            recovery: Recovery::new(config.restore_window()),
            dev_ticket_key,
            keepalive: Keepalive::new(config.keepalive()),
            hub: Hub::new(),
            away,
            id,
            index,
            config,
            store,
            ticket_key,
            draws: Default::default(),
            stopped: CancellationToken::new(),
            draining: AtomicBool::new(false),
            open_sockets: Arc::default(),
            challenges,
            invitations: Default::default(),
            door: crate::door::Door::new(),
        }
    }

    pub(crate) fn invitations(&self) -> &crate::invitation_settings::Settings {
        &self.invitations
    }

    // >>> door
    pub(crate) fn door(&self) -> &crate::door::Door {
        &self.door
    }
    // <<< door

    pub(crate) fn challenges(&self) -> &Challenges {
        &self.challenges
    }

    pub(crate) fn id(&self) -> &ServerId {
        &self.id
    }

    pub(crate) fn index(&self) -> u16 {
        self.index.load(Ordering::Relaxed)
    }

    /// Takes the new registry index this process registered again with.
    pub(crate) fn set_index(&self, index: u16) {
        self.index.store(index, Ordering::Relaxed);
    }

    pub(crate) fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    pub(crate) fn dev_ticket_key(&self) -> Option<&str> {
        self.dev_ticket_key.as_deref()
    }

    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Rendered records of finished draws (`GET /api/queues/{q}/draw`).
    pub(crate) fn draws(&self) -> &crate::draw::Draws {
        &self.draws
    }

    pub(crate) fn ticket_key(&self) -> &TicketKey {
        &self.ticket_key
    }

    pub(crate) fn hub(&self) -> &Hub {
        &self.hub
    }

    pub(crate) fn keepalive(&self) -> &Keepalive {
        &self.keepalive
    }

    pub(crate) fn ip_limits(&self) -> &Arc<IpLimits> {
        &self.ip_limits
    }

    pub(crate) fn place_proofs(&self) -> &Buckets<(QueueId, PlaceId)> {
        &self.place_proofs
    }

    pub(crate) fn away(&self) -> &Away {
        &self.away
    }

    /// Browsers held (or being set up) here.
    pub(crate) fn connections(&self) -> u64 {
        self.hub.connections()
    }

    /// The count of client connections open, which the server keeps.
    pub(crate) fn open_sockets_counter(&self) -> Arc<AtomicU64> {
        self.open_sockets.clone()
    }

    /// Client connections open now, streams or not.
    pub(crate) fn open_sockets(&self) -> u64 {
        self.open_sockets.load(Ordering::Relaxed)
    }

    /// Takes a new place in `q` for a browser held here (batched with the other joins of `q`).
    /// Takes a new place in `q`, spending the join's proof of work in a proof-of-work queue and
    /// recording its browser key in a queue that binds places to it.
    pub(crate) async fn join(
        &self,
        q: &QueueId,
        proof: crate::joins::Join,
    ) -> Result<PlaceState, JoinError> {
        self.joins.join(q, proof).await
    }

    /// A browser went away: keep its place for the queue's grace period. Recorded in batches
    /// (see [`crate::away`]), so a mass disconnect costs Redis one call per queue.
    pub(crate) fn mark_away(&self, q: QueueId, place: PlaceId) {
        self.away.mark(q, place);
    }

    /// Cancelled when the gateway stops.
    pub(crate) fn stopped(&self) -> &CancellationToken {
        &self.stopped
    }

    /// Whether draining started (see [`crate::run`]).
    pub(crate) fn shutting_down(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }

    pub(crate) fn start_draining(&self) {
        self.draining.store(true, Ordering::Relaxed);
    }

    /// A `retry:` delay for a browser sent away, jittered so they do not all come back at once.
    pub(crate) fn jittered_retry_ms(&self) -> u64 {
        crate::frames::jittered(self.config.retry_ms)
    }

    /// Tells the gateway with index `idx` that it no longer holds `place`, because of `reason`.
    pub(crate) async fn tell_gateway(
        &self,
        idx: u16,
        q: &QueueId,
        place: PlaceId,
        reason: CloseReason,
    ) {
        let msg = StreamMessage::Ended {
            queue: q.clone(),
            place,
            reason,
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
            metrics::redis_error();
            tracing::warn!(error = %e, gateway = idx, "could not notify the gateway that held a place");
        }
    }
}
