//! Passthrough deliveries: places a join admitted at once (nobody was waiting; see
//! `join.lua`) wait in their queue's `passed` list for this replica, which holds the signing
//! key, to mint their tokens and send `admitted` to their gateways.
//!
//! The gateway that ran the join publishes the queue's id on the wake channel; the courier
//! here drains that queue's list at once if this replica holds its lease. Pub/sub may lose a
//! message (a reconnect, a replica starting), so the courier also drains every held queue
//! once per tick: a lost wake costs one tick, never an admission.
//!
//! One courier task per replica drains the `passed` lists, and the tick never touches them:
//! entries are trimmed (lease-checked) only by the courier that delivered them, so two
//! drains can never trim each other's entries. After a lease hand-over the new holder
//! delivers what the old one did not trim, with the same deterministic tokens.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

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

impl Passthrough {
    /// Delivers on every wake, and sweeps every held queue once per tick, until `cancel`.
    pub(super) async fn run(self, cancel: CancellationToken) {
        let mut wakes: Option<Wakes> = None;
        let mut sweep = tokio::time::interval(self.tick);
        sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut warned = false;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = sweep.tick() => {
                    if wakes.is_none() {
                        // (Re)subscribe; until then, the sweep alone delivers.
                        match Wakes::subscribe(&self.redis).await {
                            Ok(w) => wakes = Some(w),
                            Err(e) if !warned => {
                                warned = true;
                                tracing::warn!(error = %e, "cannot subscribe to passthrough wake signals; delivering them once per tick");
                            }
                            Err(_) => {}
                        }
                    }
                    for q in self.leases.queues() {
                        self.drain(&q).await;
                    }
                }
                woken = next_wake(&mut wakes) => match woken {
                    Some(Some(q)) => self.drain(&q).await,
                    Some(None) => {}
                    None => wakes = None,
                },
            }
        }
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
