//! Passthrough deliveries: places a join admitted at once (nobody was waiting; see
//! `join.lua`) wait in their queue's `passed` list for this replica, which holds the signing
//! key, to mint their tokens and send `admitted` to their gateways.
//!
//! The gateway that ran the join publishes the queue's id on the wake channel; the courier
//! here drains that queue's list at once if this replica holds its lease. Pub/sub may lose a
//! message (a reconnect, a replica starting), so the courier also drains every held queue
//! once per tick: a lost wake costs one tick, never an admission.
//!
//! Each queue drains in a task of its own ([`Drains`]), so queues never wait for each other:
//! a drain may wait up to a tick's lead for its admissions' time (a join within a tick's lead
//! is admitted at that tick's admission time), or for a slow Redis call, and another queue's
//! join meanwhile is delivered at once
//! (`passthrough_courier::a_held_join_does_not_delay_another_queues_admission`).
//!
//! One queue never drains twice at once: a drain trims (lease-checked) as many entries from
//! the head of the list as it delivered, so two drains of one list would both send its first
//! entries and then trim each other's, some never sent. A wake (or sweep) for a queue already
//! draining marks it to drain once more when the current drain ends, so a wake that comes
//! after the drain read its list is never lost
//! (`passthrough_courier::many_wakes_for_a_draining_queue_deliver_each_place_once`). The tick
//! never touches the `passed` lists. After a lease hand-over the new holder delivers what the
//! old one did not trim, with the same deterministic tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::{JoinError, JoinSet};
use tokio_util::sync::CancellationToken;
use usher_core::ids::QueueId;
use usher_core::store::{Lease, OutboxList, Store, StoreError, Wakes};
use usher_core::time::now_ms;
use usher_mint::token::SigningKey;

use super::deliver::{Courier, Delivery};

/// The leases this replica holds, as the tick loop last left them: the courier drains only
/// these queues, with these leases.
#[derive(Clone, Default)]
pub(super) struct HeldLeases(Arc<Mutex<HashMap<QueueId, Lease>>>);

impl HeldLeases {
    fn lock(&self) -> MutexGuard<'_, HashMap<QueueId, Lease>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Replaces the set (after a tick).
    pub(super) fn set(&self, leases: impl IntoIterator<Item = (QueueId, Lease)>) {
        *self.lock() = leases.into_iter().collect();
    }

    fn get(&self, q: &QueueId) -> Option<Lease> {
        self.lock().get(q).cloned()
    }

    fn queues(&self) -> Vec<QueueId> {
        self.lock().keys().cloned().collect()
    }
}

/// The courier of passthrough admissions.
pub(super) struct Passthrough {
    pub(super) store: Store,
    pub(super) key: Arc<SigningKey>,
    pub(super) redis: usher_core::store::RedisArgs,
    pub(super) leases: HeldLeases,
    pub(super) tick: Duration,
}

/// Whether a queue draining now drains once more when its drain ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Again {
    No,
    /// A wake or a sweep came meanwhile: entries may have joined the list after the drain
    /// read it.
    Yes,
}

/// The drains in flight, one task per queue, owned by [`Passthrough::run`]: on cancel it
/// aborts them all and waits for them to stop (and dropped, it aborts them too).
struct Drains {
    tasks: JoinSet<QueueId>,
    /// The queues draining now, by task (a task that panics is known by its id alone).
    by_task: HashMap<tokio::task::Id, QueueId>,
    /// Each queue draining now, and whether it drains again.
    draining: HashMap<QueueId, Again>,
}

impl Drains {
    fn new() -> Self {
        Self {
            tasks: JoinSet::new(),
            by_task: HashMap::new(),
            draining: HashMap::new(),
        }
    }

    /// Drains `q` in a task of its own, or, if it is draining already, once more after.
    fn start(&mut self, courier: &Arc<Passthrough>, q: QueueId) {
        if let Some(again) = self.draining.get_mut(&q) {
            *again = Again::Yes;
            return;
        }
        // A queue another replica holds: nothing to spawn (the drain would find no lease).
        if courier.leases.get(&q).is_none() {
            return;
        }
        let task = self.tasks.spawn({
            let (courier, q) = (courier.clone(), q.clone());
            async move {
                courier.drain(&q).await;
                q
            }
        });
        self.by_task.insert(task.id(), q.clone());
        self.draining.insert(q, Again::No);
    }

    /// The next drain to end; never while none runs.
    async fn next_done(&mut self) -> Result<(tokio::task::Id, QueueId), JoinError> {
        match self.tasks.join_next_with_id().await {
            Some(done) => done,
            None => std::future::pending().await,
        }
    }

    /// Reaps the drain that ended with `done`: its queue may drain again, and does so at once
    /// if a wake or a sweep came meanwhile.
    fn ended(
        &mut self,
        courier: &Arc<Passthrough>,
        done: Result<(tokio::task::Id, QueueId), JoinError>,
    ) {
        let id = match &done {
            Ok((id, _)) => *id,
            Err(e) => {
                // A bug, not a Redis error (those are logged by the drain): the queue is
                // freed all the same, or it would never drain again.
                tracing::error!(error = %e, "a passthrough drain failed");
                e.id()
            }
        };
        let Some(q) = self.by_task.remove(&id) else {
            return;
        };
        if self.draining.remove(&q) == Some(Again::Yes) {
            self.start(courier, q);
        }
    }
}

impl Passthrough {
    /// Delivers on every wake, and sweeps every held queue once per tick, until `cancel`.
    /// Each queue drains in a task of its own ([`Drains`]); this loop only starts and reaps
    /// them, so it is always ready for the next wake.
    pub(super) async fn run(self, cancel: CancellationToken) {
        let courier = Arc::new(self);
        let mut drains = Drains::new();
        let mut wakes: Option<Wakes> = None;
        let mut sweep = tokio::time::interval(courier.tick);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = sweep.tick() => {
                    if wakes.is_none() {
                        // (Re)subscribe; until then, the sweep alone delivers.
                        match Wakes::subscribe(&courier.redis).await {
                            Ok(w) => wakes = Some(w),
                            Err(e) if !warned => {
                                warned = true;
                                tracing::warn!(error = %e, "cannot subscribe to passthrough wake signals; delivering them once per tick");
                            }
                            Err(_) => {}
                        }
                    }
                    for q in courier.leases.queues() {
                        drains.start(&courier, q);
                    }
                }
                woken = next_wake(&mut wakes) => match woken {
                    Some(Some(q)) => drains.start(&courier, q),
                    Some(None) => {}
                    None => wakes = None,
                },
                done = drains.next_done() => drains.ended(&courier, done),
            }
        }
        // Stop every drain now (each stops at its next await: a wait for an admission time
        // or a Redis reply) and wait until they have: what one sent and did not trim, the
        // next holder sends again with the same tokens.
        drains.tasks.shutdown().await;
    }

    /// Delivers every passthrough admission of `q` waiting in its list, if this replica holds
    /// the queue. Failures are logged; the next sweep tries again.
    async fn drain(&self, q: &QueueId) {
        let Some(lease) = self.leases.get(q) else {
            return;
        };
        if let Err(e) = self.deliver(q, &lease).await {
            crate::metrics::redis_error();
            tracing::debug!(queue = %q, error = %e, "passthrough delivery failed; retried at the next sweep");
        }
    }

    async fn deliver(&self, q: &QueueId, lease: &Lease) -> Result<(), StoreError> {
        // Most sweeps find nothing: one cheap read, and no registry read.
        if self.store.outbox(q, OutboxList::Passed, 1).await?.0 == 0 {
            return Ok(());
        }
        let now = now_ms();
        let gateways = self.store.gateways(now).await?;
        let courier = Courier {
            store: &self.store,
            key: &self.key,
            gateways: &gateways,
            q,
            lease,
            now,
            list: OutboxList::Passed,
            // The courier runs only in the wall-clock loop (`Admitter::run`).
            clock: &usher_core::time::WallClock,
            store_delay: Duration::ZERO,
            burst: 0,
            // A join in a tick's lead is admitted at that tick's admission time: it waits
            // for it, as the tick's own do (`join.lua`).
            ahead_cap: super::timing::admit_lead_cap(self.tick),
        };
        match courier.deliver_outbox(u64::MAX).await? {
            Delivery::Done(0) | Delivery::Closed(0) => {}
            Delivery::Done(n) | Delivery::Closed(n) => {
                tracing::debug!(queue = %q, delivered = n, "passthrough admissions delivered");
            }
            Delivery::LeaseLost => {
                tracing::debug!(queue = %q, "lease lost; the new holder delivers passthrough admissions");
            }
        }
        Ok(())
    }
}

/// The next wake signal, or never while not subscribed.
async fn next_wake(wakes: &mut Option<Wakes>) -> Option<Option<QueueId>> {
    match wakes {
        Some(w) => w.next().await,
        None => std::future::pending().await,
    }
}
