//! The tick loop: one tick per `tick_ms`; every queue this replica holds the lease of, each
//! tick admitting at the queue's rate.
//!
//! * `lease` — which replica drives which queue (rendezvous hashing over live replicas).
//! * `timing` — when a tick reads, admits and stores its token records.
//! * `queue` — one queue's tick: lease, tick script calls, state, next pre-mint; and the
//!   [`Settings`] every tick is run with.
//! * `draw` — a scheduled sale's draw, run by `queue` when it is due, before the tick.
//! * `premint` — tokens minted and staged on the gateways ahead of the tick.
//! * `tokens` — one tick's tokens: pre-minted where they match, minted now otherwise.
//! * `deliver` — the outbox drain loop: admissions to the gateways, then their records.
//! * `passthrough` — the courier of admissions made by joins themselves (woken per join;
//!   each queue drains in a task of its own).
//! * `rate` — the measured admission rate and a tick's expected admissions.
//! * `registry` — the queue and sale registries as a tick reads them, lost entries listed again.
//! * `sold_out` — the `sold_out` close of a queue whose inventory is gone, after its grace.
//! * `gateways` — live gateways and stream-message batching, shared by the above.
//!
//! Imports run one way: this file uses its submodules, and none of them uses it.

mod deliver;
// >>> door
mod door;
// <<< door
mod draw;
mod gateways;
mod lanes;
mod lease;
mod passthrough;
mod premint;
mod queue;
mod rate;
mod registry;
mod sold_out;
mod timing;
mod tokens;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;
use usher_core::ids::QueueId;
use usher_core::store::{GatewayInfo, Store, StoreError};
use usher_core::time::{now_ms, wall_clock, SharedClock};
use usher_mint::token::SigningKey;

use crate::metrics;

use lease::preferred;

use passthrough::{HeldLeases, Passthrough};
use premint::{spawn_premint, PremintPlan};
pub use queue::Settings;
use queue::{Held, Outcome, QueueTick};
use rate::expected_per_tick;
use registry::Registries;
use timing::{admission_time, admit_lead, admit_lead_cap, Timing};

/// Drives admission for the queues this replica holds.
pub struct Admitter {
    store: Store,
    key: Arc<SigningKey>,
    settings: Settings,
    held: HashMap<QueueId, Held>,
    /// The gateway registry as the last tick read it.
    gateways: Arc<Vec<GatewayInfo>>,
    /// `held`'s leases, shared with the passthrough courier.
    leases: HeldLeases,
    /// What the queue registries listed since this replica started.
    registries: Registries,
    /// Where [`Admitter::tick`], the rate and the pre-mint take the time from: the wall
    /// clock, unless [`Admitter::with_clock`] gave another (a rehearsal's virtual clock).
    clock: SharedClock,
    /// Admissions over every queue at the last tick: how long this tick's token records and
    /// states wait for a burst to deliver (`timing::records_delay`). A small queue's state
    /// must not cut into another queue's burst on the same gateways.
    last_burst: u64,
}

/// Queues whose admission just became possible or faster (sent by the admin API).
pub type Hints = tokio::sync::mpsc::UnboundedReceiver<QueueId>;

/// What one tick did, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct TickReport {
    pub queues: usize,
    pub admitted: u64,
    pub delivered: u64,
    pub dropped: u64,
}

/// Queues ticked concurrently.
const QUEUE_CONCURRENCY: usize = 16;

impl Admitter {
    pub fn new(store: Store, key: Arc<SigningKey>, settings: Settings) -> Self {
        Self {
            store,
            key,
            settings,
            held: HashMap::new(),
            gateways: Default::default(),
            leases: HeldLeases::default(),
            registries: Registries::default(),
            clock: wall_clock(),
            last_burst: 0,
        }
    }

    /// This admitter, taking the time from `clock` instead of the wall clock: the seam a
    /// rehearsal (`usher-rehearse`) drives a virtual day through, calling
    /// [`Admitter::tick_at`] with the clock's time. [`Admitter::run`] is the wall-clock loop
    /// and is not meant for another clock.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Ticks until `cancel` fires, then releases every lease. Redis errors are logged and the
    /// next tick tries again: while Redis is away nobody is admitted, and admission resumes by
    /// itself when it returns.
    pub async fn run(mut self, cancel: CancellationToken, mut hints: Hints) {
        let mut interval = tick_interval(self.settings.tick);
        let mut failing = false;
        let mut timing = Timing::start(self.settings.tick);
        let tick_ms = self.settings.tick.as_millis() as u64;
        let mut last_planned = None;
        let courier = Passthrough {
            store: self.store.clone(),
            key: self.key.clone(),
            redis: self.settings.redis.clone(),
            leases: self.leases.clone(),
            tick: self.settings.tick,
        };
        let passing = tokio::spawn(courier.run(cancel.child_token()));
        loop {
            let scheduled = tokio::select! {
                () = cancel.cancelled() => break,
                at = interval.tick() => at,
                Some(q) = hints.recv() => {
                    // A queue was just unpaused, opened or sped up: mint its next tick's
                    // tokens now instead of at the tick.
                    if let Some(last) = last_planned {
                        self.premint_now(&q, last + tick_ms).await;
                    }
                    continue;
                }
            };
            let planned = timing.planned_now(scheduled);
            last_planned = Some(planned);
            let cap = admit_lead_cap(self.settings.tick);
            let now = admission_time(planned, now_ms() + cap.as_millis() as u64);
            // The grid, for whoever times an operator's change against it (`bench16.sh`'s
            // `UNPAUSE_LEAD_MS`).
            tracing::debug!(admission_ms = now, "tick planned");
            self.lead_to(now, &mut hints, &cancel).await;
            if cancel.is_cancelled() {
                break;
            }
            let started = Instant::now();
            let ticked = self.tick_on_grid(now, planned).await;
            metrics::tick_took(started.elapsed());
            match ticked {
                Ok(r) => {
                    if failing {
                        tracing::info!("redis is back; admission resumed");
                        failing = false;
                    }
                    tracing::debug!(
                        queues = r.queues,
                        admitted = r.admitted,
                        delivered = r.delivered,
                        dropped = r.dropped,
                        elapsed_ms = started.elapsed().as_millis() as u64,
                        "tick"
                    );
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(error = %e, "tick failed; nobody is admitted until redis answers again");
                    }
                    failing = true;
                }
            }
        }
        let _ = passing.await;
        self.release_all().await;
        tracing::info!("admission loop stopped");
    }

    /// Waits until the tick admitting at `now` starts: ahead of it by as much as the burst
    /// expected needs (`timing::admit_lead`; the interval fired at the cap), so the reads and
    /// the script calls run before it and the sends at it. A hint meanwhile (a queue
    /// unpaused, opened or sped up just before the tick) starts that queue's pre-mint for
    /// this very tick, which lengthens the lead to its burst: the first tick after an unpause
    /// is admitted ahead too. (Each wait is capped: a wall clock stepped back must not stall
    /// every tick.)
    async fn lead_to(&mut self, now: u64, hints: &mut Hints, cancel: &CancellationToken) {
        let cap = admit_lead_cap(self.settings.tick);
        loop {
            let lead = admit_lead(self.settings.tick, self.expected_burst());
            let start = now.saturating_sub(lead.as_millis() as u64);
            let wait = self.clock.wait_for(start).min(cap);
            if wait.is_zero() {
                return;
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait) => return,
                Some(q) = hints.recv() => {
                    // A pre-mint for this very tick, read and staged half a tick ago, is
                    // kept: a rate raised now mints its extra tokens on the tick's path.
                    let minted = self.held.get(&q).and_then(|h| h.premint.as_ref());
                    if minted.is_none_or(|p| p.at_ms != now) {
                        self.premint_now(&q, now).await;
                    }
                }
            }
        }
    }

    /// Starts minting, right away, the tokens a queue held here will need at `at_ms`.
    async fn premint_now(&mut self, q: &QueueId, at_ms: u64) {
        let Some(held) = self.held.get_mut(q) else {
            return;
        };
        let cfg = match self.store.queue_config(q).await {
            Ok(Some(c)) if c.open && !c.paused => c,
            _ => return,
        };
        held.premint = Some(spawn_premint(
            &self.store,
            &self.key,
            &self.gateways,
            &self.clock,
            PremintPlan {
                q,
                expected: expected_per_tick(0.0, cfg.admit_per_second, self.settings.tick),
                at_ms,
                exp_ms: at_ms + cfg.session_ttl_seconds * 1000,
                token_exp_ms: at_ms + cfg.token_ttl_seconds() * 1000,
                read_at_ms: None,
            },
        ));
    }

    /// The admissions this tick is expected to make over every queue: the larger of the last
    /// tick's and what the queues' pre-mints expect, as far as their lines reach (so the
    /// first tick after a queue is unpaused, whose pre-mint the hint started, is admitted
    /// ahead too).
    fn expected_burst(&self) -> u64 {
        let minting: u64 = self
            .held
            .values()
            .filter_map(|h| h.premint.as_ref())
            .map(|p| p.expected.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        minting.max(self.last_burst)
    }

    /// Releases every lease and leaves the registry, so other replicas take over at once.
    pub async fn release_all(&mut self) {
        self.leases.set([]);
        for (q, h) in self.held.drain() {
            if let Err(e) = self.store.release_lease(&q, &h.lease).await {
                tracing::warn!(queue = %q, error = %e, "could not release a lease; it expires by itself");
            }
        }
        if let Err(e) = self
            .store
            .deregister_dispatcher(&self.settings.replica)
            .await
        {
            tracing::warn!(error = %e, "could not leave the dispatcher registry; the entry expires by itself");
        }
    }

    /// One tick over every queue this replica holds or should hold, now.
    pub async fn tick(&mut self) -> Result<TickReport, StoreError> {
        self.tick_at(self.clock.now_ms()).await
    }

    /// One tick with admission time `now`. When `now` is still ahead, the registries are read
    /// and the queues ticked at once, stamped `now`; their admissions are sent at `now` (at
    /// most [`timing::admit_lead_cap`] from now).
    pub async fn tick_at(&mut self, now: u64) -> Result<TickReport, StoreError> {
        self.tick_on_grid(now, now).await
    }

    /// One tick with admission time `now`, planned for `planned` on the tick loop's grid (the
    /// same unless the tick started late): the next tick's tokens are minted for `planned`
    /// plus a tick, the time the loop will admit at next ([`tick_interval`] keeps the grid).
    async fn tick_on_grid(&mut self, now: u64, planned: u64) -> Result<TickReport, StoreError> {
        let me = self.settings.replica.clone();
        // Four independent round trips (separate keys), pipelined on the one connection.
        let (replicas, queues, gateways, sales) = tokio::try_join!(
            self.store
                .heartbeat_dispatcher(&me, now, self.settings.lease_ttl),
            self.store.queue_ids(),
            self.store.gateways(now),
            self.store.sale_queues(),
        )
        .inspect_err(|_| metrics::redis_error())?;
        let (queues, sales) = self.registries.relist(&self.store, queues, sales).await;
        let gateways = Arc::new(gateways);
        self.gateways = gateways.clone();
        let sales: HashSet<QueueId> = sales.into_iter().collect();
        let mut jobs = Vec::new();
        for q in queues {
            let mine = preferred(&q, &replicas) == Some(me.as_str());
            let held = self.held.remove(&q);
            if let (Some(h), false) = (&held, mine) {
                // Another replica is preferred now: hand the queue over.
                tracing::info!(queue = %q, "handing queue over to its preferred replica");
                self.store.release_lease(&q, &h.lease).await?;
                continue;
            }
            if held.is_none() && !mine {
                continue;
            }
            let job = QueueTick {
                store: self.store.clone(),
                key: self.key.clone(),
                gateways: gateways.clone(),
                settings: self.settings.clone(),
                now,
                next_at: planned + self.settings.tick.as_millis() as u64,
                burst: self.last_burst,
                sale: sales.contains(&q),
                clock: self.clock.clone(),
            };
            jobs.push(async move {
                let r = job.run(&q, held).await;
                (q, r)
            });
        }
        let results: Vec<_> = stream::iter(jobs)
            .buffer_unordered(QUEUE_CONCURRENCY)
            .collect()
            .await;
        let mut report = TickReport::default();
        let mut first_err = None;
        for (q, r) in results {
            match r {
                Ok(Outcome::Ticked {
                    held,
                    admitted,
                    delivered,
                    dropped,
                }) => {
                    report.queues += 1;
                    report.admitted += admitted;
                    report.delivered += delivered;
                    report.dropped += dropped;
                    self.held.insert(q, held);
                }
                Ok(Outcome::NotHeld) => {}
                Err(e) => {
                    metrics::redis_error();
                    // The lease (if any) is forgotten here; it is re-acquired with the same
                    // owner next tick if it has not expired, or by whoever comes first.
                    tracing::debug!(queue = %q, error = %e, "queue tick failed");
                    first_err.get_or_insert(e);
                }
            }
        }
        self.last_burst = report.admitted;
        self.leases
            .set(self.held.iter().map(|(q, h)| (q.clone(), h.lease.clone())));
        match first_err {
            Some(e) if report.queues == 0 => Err(e),
            _ => Ok(report),
        }
    }
}

/// The tick loop's schedule: a tick every `tick`, on a fixed grid. A tick that fires late (a
/// busy machine, a tick that ran long) does not move the ticks after it: each tick's admission
/// time stays the one planned when the tick before it minted the tokens for it
/// ([`premint`]), so a late start costs no token. (Shifted, the schedule would admit a few
/// milliseconds off the planned time, and the whole tick's tokens, minted ahead for that
/// time, would be minted again on the tick's own path.) A tick missed altogether is
/// skipped; the next one's budget covers the time since.
fn tick_interval(tick: Duration) -> tokio::time::Interval {
    let mut interval = tokio::time::interval(tick);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    interval
}

#[cfg(test)]
mod schedule_tests {
    use std::time::Duration;

    /// A tick polled late does not shift the ones after it (tokio's `Delay` would: every
    /// later admission time would then miss the tokens minted ahead for it). On tokio's paused
    /// clock: the loop is busy past the next tick's time by more than tokio's 5 ms leeway.
    #[tokio::test(start_paused = true)]
    async fn a_late_tick_keeps_the_schedule_of_the_next_ones() {
        let tick = Duration::from_millis(200);
        let mut interval = super::tick_interval(tick);
        let first = interval.tick().await;
        tokio::time::advance(tick + Duration::from_millis(15)).await;
        let late = interval.tick().await;
        assert_eq!(late, first + tick, "a late tick keeps its scheduled time");
        let next = interval.tick().await;
        assert_eq!(next, first + 2 * tick, "and the next one its own");
    }
}
