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
//! (`drains_tests::one_drain_per_queue_and_a_wake_meanwhile_drains_once_more`; end to end,
//! every place of many joins and wakes during one drain is sent once, and soon:
//! `passthrough_courier::many_wakes_for_a_draining_queue_deliver_each_place_once`). A drain
//! reads its list until it finds it empty, so only a join after that last read needs the
//! drain once more (`passthrough_courier::a_wake_after_a_drains_last_read_drains_the_queue_once_more`,
//! the last read's answer held back by a relay). The tick
//! never touches the `passed` lists. After a lease hand-over the new holder delivers what the
//! old one did not trim, with the same deterministic tokens.
//!
//! At most [`MAX_DRAINS`] drains talk to Redis at once (a sweep of thousands of held queues
//! does not put thousands of reads at once on the connection the tick shares), and on shutdown
//! the drains under way get [`SHUTDOWN_GRACE`] past a tick's lead to finish before they are
//! stopped: one stopped between its sends and its trim has its admissions sent again by the
//! next holder (same tokens, but twice on the wire).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Semaphore;
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

/// Drains that may talk to Redis at once; the others wait for a turn (still marked draining).
/// Most drains are one cheap read; one waiting for its admission time (a tick's lead at most)
/// keeps its turn meanwhile, so this is many more than ever wait at once in practice. Past it
/// (more queues than this each holding a join in a tick's lead) the others wait up to that
/// lead for a turn, and a wake for a queue still waiting for its turn drains it twice (a
/// second cheap read): the limits of the cap.
const MAX_DRAINS: usize = 256;

/// How long past a tick's lead the drains under way may take to finish on shutdown.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(500);

/// The drains in flight, one task per queue, owned by [`Passthrough::run`], which on cancel
/// lets them finish for a while, then aborts the rest (dropped, the set aborts them too).
///
/// It knows queues and tasks only, not what a drain does, so its rules (one drain per queue,
/// a wake meanwhile drains once more) are tested alone, below.
struct Drains {
    tasks: JoinSet<()>,
    /// The queues draining now, by task (a task that panics is known by its id alone).
    by_task: HashMap<tokio::task::Id, QueueId>,
    /// Each queue draining now, and whether it drains again.
    draining: HashMap<QueueId, Again>,
    /// Turns to talk to Redis ([`MAX_DRAINS`]).
    turns: Arc<Semaphore>,
}

impl Drains {
    fn new() -> Self {
        Self {
            tasks: JoinSet::new(),
            by_task: HashMap::new(),
            draining: HashMap::new(),
            turns: Arc::new(Semaphore::new(MAX_DRAINS)),
        }
    }

    /// Runs the drain `drain` makes for `q` in a task of its own, or, if `q` is draining
    /// already, marks it to drain once more when that drain ends ([`Drains::ended`]).
    fn start<F>(&mut self, q: QueueId, drain: impl FnOnce(&QueueId) -> F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        if let Some(again) = self.draining.get_mut(&q) {
            *again = Again::Yes;
            return;
        }
        let (turns, drain) = (self.turns.clone(), drain(&q));
        let task = self.tasks.spawn(async move {
            // Held for the whole drain. Closed on shutdown: a drain still waiting for its turn
            // then never starts (the next holder delivers its queue).
            let Ok(_turn) = turns.acquire_owned().await else {
                return;
            };
            drain.await;
        });
        self.by_task.insert(task.id(), q.clone());
        self.draining.insert(q, Again::No);
    }

    /// The next drain to end; never while none runs.
    async fn next_done(&mut self) -> Result<tokio::task::Id, JoinError> {
        match self.tasks.join_next_with_id().await {
            Some(done) => done.map(|(id, ())| id),
            None => std::future::pending().await,
        }
    }

    /// Reaps the drain that ended with `done`: its queue may drain again. Returns the queue
    /// if a wake or a sweep came meanwhile: it is to drain once more, now.
    fn ended(&mut self, done: Result<tokio::task::Id, JoinError>) -> Option<QueueId> {
        let id = match done {
            Ok(id) => id,
            Err(e) => {
                // A bug, not a Redis error (the drain logs those): the queue is freed all
                // the same, or it would never drain again.
                tracing::error!(error = %e, "a passthrough drain failed");
                e.id()
            }
        };
        let q = self.by_task.remove(&id)?;
        match self.draining.remove(&q) {
            Some(Again::Yes) => Some(q),
            _ => None,
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
                        courier.drain_soon(&mut drains, q);
                    }
                }
                woken = next_wake(&mut wakes) => match woken {
                    Some(Some(q)) => courier.drain_soon(&mut drains, q),
                    Some(None) => {}
                    None => wakes = None,
                },
                done = drains.next_done() => {
                    if let Some(q) = drains.ended(done) {
                        courier.drain_soon(&mut drains, q);
                    }
                }
            }
        }
        // Let the drains under way finish (one waits at most a tick's lead for its admissions'
        // time, then its Redis calls), starting no more; then stop the rest, each at its next
        // await, and wait until they have: what one sent and did not trim, the next holder
        // sends again with the same tokens.
        drains.turns.close();
        let grace = super::timing::admit_lead_cap(courier.tick) + SHUTDOWN_GRACE;
        let finished = async {
            while let Some(done) = drains.tasks.join_next().await {
                if let Err(e) = done {
                    tracing::error!(error = %e, "a passthrough drain failed");
                }
            }
        };
        if tokio::time::timeout(grace, finished).await.is_err() {
            tracing::warn!("passthrough drains still running at shutdown were stopped; the next holder sends their admissions again");
        }
        drains.tasks.shutdown().await;
    }

    /// Drains `q` in a task of its own, or once more after the drain running now.
    fn drain_soon(self: &Arc<Self>, drains: &mut Drains, q: QueueId) {
        // A queue another replica holds: nothing to spawn (the drain would find no lease).
        if self.leases.get(&q).is_none() {
            return;
        }
        drains.start(q, |q| {
            let (courier, q) = (self.clone(), q.clone());
            async move { courier.drain(&q).await }
        });
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

#[cfg(test)]
mod drains_tests {
    //! The bookkeeping of [`Drains`] alone, with drains the test ends when it likes (the
    //! courier's drains on a real Redis: `passthrough_courier` in `usher-testkit`).

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::sync::Semaphore;
    use usher_core::ids::QueueId;

    use super::{Drains, MAX_DRAINS};

    /// One queue's drains, which count their starts and each wait for a permit to end.
    #[derive(Clone)]
    struct Gated {
        started: Arc<AtomicUsize>,
        gate: Arc<Semaphore>,
    }

    impl Gated {
        fn new() -> Self {
            Self {
                started: Arc::new(AtomicUsize::new(0)),
                gate: Arc::new(Semaphore::new(0)),
            }
        }

        fn start(&self, drains: &mut Drains, q: &str) {
            let q = QueueId::new(q).expect("a valid queue id");
            let gated = self.clone();
            drains.start(q, move |_| async move {
                gated.started.fetch_add(1, Ordering::SeqCst);
                if let Ok(permit) = gated.gate.acquire().await {
                    permit.forget();
                }
            });
        }

        fn started(&self) -> usize {
            self.started.load(Ordering::SeqCst)
        }
    }

    /// The queue to drain once more when the next drain to end ends, as the courier's loop
    /// reaps it.
    async fn reap(drains: &mut Drains) -> Option<QueueId> {
        let done = drains.next_done().await;
        drains.ended(done)
    }

    #[tokio::test]
    async fn one_drain_per_queue_and_a_wake_meanwhile_drains_once_more() {
        let (a, b) = (Gated::new(), Gated::new());
        let mut drains = Drains::new();
        a.start(&mut drains, "a");
        // Two wakes for `a` while it drains: no second drain of it; `b` drains beside it.
        a.start(&mut drains, "a");
        a.start(&mut drains, "a");
        b.start(&mut drains, "b");
        assert_eq!(drains.tasks.len(), 2, "one drain of a, one of b beside it");
        // `b` ends, not woken meanwhile: it is done.
        b.gate.add_permits(1);
        assert_eq!(reap(&mut drains).await, None);
        // `a` ends, woken meanwhile: it drains once more (the two wakes count once).
        a.gate.add_permits(1);
        let again = reap(&mut drains).await;
        assert_eq!(again.as_ref().map(QueueId::as_str), Some("a"));
        a.start(&mut drains, "a");
        a.gate.add_permits(1);
        assert_eq!(reap(&mut drains).await, None);
        assert_eq!((a.started(), b.started()), (2, 1), "drains run of a and b");
        assert!(drains.draining.is_empty() && drains.by_task.is_empty());
    }

    #[tokio::test]
    async fn at_most_max_drains_talk_to_redis_at_once() {
        let gated = Gated::new();
        let mut drains = Drains::new();
        for i in 0..=MAX_DRAINS {
            gated.start(&mut drains, &format!("q{i}"));
        }
        // Every queue is draining (marked), but one waits for a turn.
        assert_eq!(drains.tasks.len(), MAX_DRAINS + 1);
        let all_but_one = async {
            while gated.started() < MAX_DRAINS {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), all_but_one)
            .await
            .expect("the drains with a turn start");
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert_eq!(gated.started(), MAX_DRAINS, "one waits for a turn");
        // One ends: the last gets its turn.
        gated.gate.add_permits(1);
        assert_eq!(reap(&mut drains).await, None);
        let last = async {
            while gated.started() < MAX_DRAINS + 1 {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), last)
            .await
            .expect("the last drain starts once another ends");
    }

    #[tokio::test]
    async fn a_drain_that_panics_frees_its_queue() {
        let mut drains = Drains::new();
        let q = QueueId::new("a").expect("a valid queue id");
        drains.start(q, |_| async { panic!("a bug in a drain") });
        assert_eq!(reap(&mut drains).await, None);
        assert!(drains.draining.is_empty(), "the queue may drain again");
        let a = Gated::new();
        a.gate.add_permits(1);
        a.start(&mut drains, "a");
        assert_eq!(reap(&mut drains).await, None);
        assert_eq!(a.started(), 1);
    }
}
