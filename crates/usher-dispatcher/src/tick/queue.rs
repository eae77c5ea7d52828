//! One queue's tick: its lease, its tick script calls, delivery, the measured rate, the
//! line's new state for the gateways, and the next tick's tokens minted ahead.

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use usher_core::ids::QueueId;
use usher_core::messages::{QueueState, StreamMessage};
use usher_core::policy::{LoadReport, RateReason, RateSource};
use usher_core::store::{
    GatewayInfo, Lease, OutboxList, RatePolicy, Store, StoreError, Tick, TickArgs, TickOutcome,
};
use usher_core::time::SharedClock;
use usher_mint::token::SigningKey;

use super::deliver::{Courier, Delivery, FIRST_CALL};
use super::draw::AfterDraw;
use super::gateways::live_at;
use super::premint::{spawn_premint, Premint, PremintPlan};
use super::rate::{expected_per_tick, MeasuredRate};
use super::timing::{admit_lead_cap, token_store_delay};
use super::tokens::TickTokens;

/// What the tick loop is told at start-up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This replica's id in the dispatcher registry and in leases.
    pub replica: String,
    pub tick: Duration,
    pub lease_ttl: Duration,
    pub exact_positions: u64,
    /// Where the passthrough courier subscribes to wake signals (its own connection).
    pub redis: usher_core::store::RedisArgs,
}

/// What this replica remembers of a queue it drives.
#[derive(Debug)]
pub(super) struct Held {
    pub(super) lease: Lease,
    rate: MeasuredRate,
    /// Tokens minted ahead for the next tick's expected admissions.
    pub(super) premint: Option<Premint>,
    /// When this replica last pruned the queue's browser keys (`Store::prune_bound`).
    bound_pruned_ms: u64,
    // >>> door
    /// The open door's setting and signed tokens (`on_outage: "open"`); boxed, so a queue
    /// that holds in an outage keeps `Held` small.
    door: Box<super::door::DoorCache>,
    // <<< door
}

/// How often the replica driving a queue prunes the keys of places over for good: one call
/// (a bounded slice of `bound`) at most this often, whatever the tick.
const PRUNE_BOUND_EVERY_MS: u64 = 1_000;

/// How one queue's tick ended.
pub(super) enum Outcome {
    Ticked {
        held: Held,
        admitted: u64,
        delivered: u64,
        dropped: u64,
    },
    /// Not ours (any more): forget it.
    NotHeld,
}

/// One queue's tick at admission time `now`: everything it needs, owned, so the queues of a
/// tick run concurrently.
pub(super) struct QueueTick {
    pub(super) store: Store,
    pub(super) key: Arc<SigningKey>,
    pub(super) gateways: Arc<Vec<GatewayInfo>>,
    pub(super) settings: Settings,
    pub(super) now: u64,
    /// The next tick's planned admission time: its tokens are minted for it.
    pub(super) next_at: u64,
    /// Admissions over every queue at the last tick (`Admitter::last_burst`).
    pub(super) burst: u64,
    /// The queue has a scheduled sale whose draw may be pending (`usher:draws`).
    pub(super) sale: bool,
    /// The admitter's clock: the wall clock, or a rehearsal's virtual one.
    pub(super) clock: SharedClock,
}

impl QueueTick {
    /// Ticks `q`, acquiring its lease first unless `held` (this replica drives it already),
    /// in a `tick` span carrying the queue and the count admitted. The admissions' stream
    /// entries carry the span's trace context, so each gateway's delivery joins its trace.
    pub(super) async fn run(self, q: &QueueId, held: Option<Held>) -> Result<Outcome, StoreError> {
        let span = tracing::info_span!("tick", queue = %q, admitted = tracing::field::Empty);
        self.run_traced(q, held).instrument(span).await
    }

    async fn run_traced(mut self, q: &QueueId, held: Option<Held>) -> Result<Outcome, StoreError> {
        let mut held = match held {
            Some(h) => h,
            None => {
                let Some(lease) = self
                    .store
                    .acquire_lease(q, &self.settings.replica, self.settings.lease_ttl)
                    .await?
                else {
                    return Ok(Outcome::NotHeld);
                };
                // Admission times never go backwards at a hand-over. The replica before may
                // have admitted right up to the moment it released the lease (or the lease
                // ran out), and that was before now: a tick planned earlier, which reached
                // its lease late (a loaded machine), is stamped with the time it holds it.
                // Nothing was minted ahead for a queue just taken over, so no token is lost.
                self.now = self.now.max(self.clock.now_ms());
                tracing::info!(queue = %q, fence = lease.fence, "driving queue");
                Held {
                    lease,
                    rate: MeasuredRate::default(),
                    premint: None,
                    bound_pruned_ms: 0,
                    door: Default::default(),
                }
            }
        };
        // Browser binding: forget the keys of places over for good, a slice at a time (a
        // closed queue's too, so before the tick below returns for it). Best effort: a failed
        // call is tried again a second later.
        if self.now >= held.bound_pruned_ms + PRUNE_BOUND_EVERY_MS {
            held.bound_pruned_ms = self.now;
            match self.store.prune_bound(q).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(queue = %q, forgotten = n, "browser keys pruned"),
                Err(e) => tracing::debug!(queue = %q, error = %e, "pruning browser keys failed"),
            }
        }
        // A scheduled sale's draw, when due, places the pre-queue before this tick admits.
        // Not ahead of the admission time: the draw's cutoff is the sale's opening, and a
        // browser who joins just before it must be in the draw (so the tick waits for it).
        if self.sale {
            let cap = admit_lead_cap(self.settings.tick).as_millis() as u64;
            super::timing::sleep_until_ms(&*self.clock, self.now, cap).await;
            let lease_ttl_ms = self.settings.lease_ttl.as_millis() as u64;
            match super::draw::draw_if_due(
                &self.store,
                &self.gateways,
                q,
                &held.lease,
                lease_ttl_ms,
                self.now,
            )
            .await?
            {
                AfterDraw::Tick => {}
                AfterDraw::LeaseLost => return Ok(Outcome::NotHeld),
                AfterDraw::Wait => {
                    return Ok(Outcome::Ticked {
                        held,
                        admitted: 0,
                        delivered: 0,
                        dropped: 0,
                    })
                }
            }
        }
        let tick_ms = self.settings.tick.as_millis() as u64;
        let lease = held.lease.clone();
        let inputs = self.rate_inputs(q).await?;
        // The bucket's rate: the adaptive rate (0 without a fresh report), or the configured
        // one (`None`: the script reads `admit_per_second` itself); either made up for the
        // measured no-show share when the queue asks for it (`make_up_no_shows`).
        let bucket_rate = inputs.bucket_rate(self.clock.now_ms());
        // No admissions (an adaptive queue's backend is silent): no ETA either.
        let stopped = bucket_rate.is_some_and(|r| r <= 0.0);
        let args = TickArgs {
            now_ms: self.now,
            // Ahead of the admission time, what ends by the clock is judged by it.
            clock_ms: Some(self.clock.now_ms()),
            first_elapsed_ms: tick_ms,
            max_elapsed_ms: tick_ms.saturating_mul(3).max(1000),
            exact: self.settings.exact_positions,
            max_position_error: 0.01,
            store_rate: if stopped { Some(0.0) } else { held.rate.get() },
            lease: &lease,
            lease_ttl_ms: self.settings.lease_ttl.as_millis() as u64,
            gateways: &self.gateways,
            bucket_rate,
            tick_ms,
        };
        let courier = Courier {
            store: &self.store,
            key: &self.key,
            gateways: &self.gateways,
            q,
            lease: &lease,
            now: self.now,
            list: OutboxList::Ticks,
            clock: &*self.clock,
            store_delay: token_store_delay(self.settings.tick),
            burst: self.burst,
            ahead_cap: admit_lead_cap(self.settings.tick),
        };
        let mut out = match self.store.tick_up_to(q, &args, FIRST_CALL).await? {
            Tick::Ticked(out) => out,
            Tick::Closed { outbox_len } => {
                // Admissions made before the close are still delivered. Keep the lease: a
                // reopened queue continues here.
                return Ok(match courier.deliver_outbox(outbox_len).await? {
                    Delivery::Done(delivered) | Delivery::Closed(delivered) => Outcome::Ticked {
                        held,
                        admitted: 0,
                        delivered,
                        dropped: 0,
                    },
                    Delivery::LeaseLost => Outcome::NotHeld,
                });
            }
            Tick::LeaseLost => {
                tracing::info!(queue = %q, fence = held.lease.fence, "lease lost; another replica drives this queue");
                return Ok(Outcome::NotHeld);
            }
        };
        let mut tokens = TickTokens::from_premint(held.premint.take(), self.now);
        let delivery = courier.deliver_tick(&mut tokens, &args, &mut out).await?;
        crate::metrics::queue_ticked(q, &out);
        crate::metrics::queue_rate(q, inputs.effective(&out, self.now));
        crate::metrics::queue_no_shows(q, out.no_shows, inputs.policy.no_show_ratio);
        crate::metrics::queue_inventory(q, &out);
        tracing::Span::current().record("admitted", out.admitted);
        let delivered = match delivery {
            Delivery::Done(n) => n,
            Delivery::Closed(n) => {
                // Closed between two calls: no snapshot of a line that no longer exists.
                return Ok(Outcome::Ticked {
                    held,
                    admitted: out.admitted,
                    delivered: n,
                    dropped: out.dropped,
                });
            }
            Delivery::LeaseLost => return Ok(Outcome::NotHeld),
        };
        drop(tokens);
        held.rate.observe(self.now, &out);
        self.publish_state(q, &mut held, &out, bucket_rate).await?;
        if out.sold_out {
            super::sold_out::close(&self.store, &self.gateways, q, self.now).await?;
        }
        self.premint_next(q, &mut held, &out);
        Ok(Outcome::Ticked {
            held,
            admitted: out.admitted,
            delivered,
            dropped: out.dropped,
        })
    }

    /// Starts minting, in the background, the tokens of the places expected to be admitted at
    /// the next tick: the head of the line, with a margin.
    fn premint_next(&self, q: &QueueId, held: &mut Held, out: &TickOutcome) {
        if out.paused {
            return;
        }
        let tick_ms = self.settings.tick.as_millis() as u64;
        // On the loop's grid, not a tick after a late start (`admission_time`): that is when
        // the next tick admits.
        let at_ms = self.next_at;
        // Halfway to the next tick, so the head read then includes who joined meanwhile.
        held.premint = Some(spawn_premint(
            &self.store,
            &self.key,
            &self.gateways,
            &self.clock,
            PremintPlan {
                q,
                expected: expected_per_tick(out.carry, out.admit_per_second, self.settings.tick),
                at_ms,
                exp_ms: at_ms + out.session_ttl_ms,
                token_exp_ms: at_ms + out.token_ttl_ms,
                read_at_ms: Some(at_ms - tick_ms / 2),
            },
        ));
    }

    /// What decides this tick's rate (read outside the per-queue scripts, so no script
    /// touches a backend's key): the queue's adaptive setting with its backend's last load
    /// report, and its `max_active` cap.
    async fn rate_inputs(&self, q: &QueueId) -> Result<RateInputs, StoreError> {
        let policy = self.store.queue_rate_policy(q).await?;
        let report = match &policy.adaptive {
            Some(a) => self.store.backend_load(&a.backend).await?,
            None => None,
        };
        Ok(RateInputs { policy, report })
    }

    /// Sends the line's new state to the gateways holding its browsers (rate 0, so no ETA,
    /// while an adaptive queue admits nobody).
    async fn publish_state(
        &self,
        q: &QueueId,
        held: &mut Held,
        out: &TickOutcome,
        bucket_rate: Option<f64>,
    ) -> Result<(), StoreError> {
        let live = live_at(&self.gateways, self.now);
        // >>> door
        // The door lets through at the rate the queue admits at now (none while paused, nor
        // once the reported inventory is taken: what is left is held by the active sessions),
        // shared by the live gateways.
        let sold = out.inventory.is_some_and(|i| !i.admits());
        let door_rate = if out.paused || sold {
            0.0
        } else {
            bucket_rate.unwrap_or(out.admit_per_second).max(0.0)
        };
        let door = held
            .door
            .pass(
                &self.store,
                &self.key,
                q,
                self.now,
                super::door::DoorShare {
                    rate: door_rate,
                    gateways: live.len() as u64,
                    session_s: out.token_ttl_ms / 1000,
                },
            )
            .await;
        // <<< door
        let mut state = QueueState {
            queue: q.clone(),
            at_ms: self.now,
            waiting: out.waiting,
            rate: match bucket_rate {
                Some(r) if r <= 0.0 => 0.0,
                _ => held
                    .rate
                    .get()
                    .filter(|r| *r > 0.0)
                    .unwrap_or(bucket_rate.unwrap_or(out.admit_per_second)),
            },
            runs: out.runs.clone(),
            samples: out.samples.clone(),
            last_place: out.last_place,
            inventory: out.inventory,
            lanes: Vec::new(),
            door,
        };
        super::lanes::split_state(&mut state, out);
        let batches: Vec<_> = out
            .gateways
            .iter()
            .filter_map(|gw| live.get(gw))
            .map(|id| ((*id).clone(), vec![StreamMessage::State(state.clone())]))
            .collect();
        self.store.send(&batches).await
    }
}

/// What a tick's rate follows besides `admit_per_second` (see [`QueueTick::rate_inputs`]).
struct RateInputs {
    policy: RatePolicy,
    report: Option<LoadReport>,
}

impl RateInputs {
    /// The rate the tick script's bucket refills at (`None`: `admit_per_second`, read by the
    /// script itself).
    fn bucket_rate(&self, now_ms: u64) -> Option<f64> {
        let p = &self.policy;
        match (self.make_up(), p.admit_per_second) {
            (Some(_), Some(aps)) => Some(self.source(aps, now_ms).rate()),
            _ => p
                .adaptive
                .as_ref()
                .map(|a| a.rate_at(self.report, now_ms).unwrap_or(0.0)),
        }
    }

    /// Where the rate comes from, no-shows made up.
    fn source(&self, admit_per_second: f64, now_ms: u64) -> RateSource {
        RateSource::of(
            admit_per_second,
            self.policy.adaptive.as_ref(),
            self.report,
            now_ms,
        )
        .made_up(self.make_up())
    }

    /// The no-show share to make up for: measured, and `make_up_no_shows` on.
    fn make_up(&self) -> Option<f64> {
        self.policy
            .no_show_ratio
            .filter(|_| self.policy.make_up_no_shows)
    }

    /// The rate the queue admits at after a tick, and why: what `GET /admin/queues/{q}` shows,
    /// exported as metrics.
    fn effective(&self, out: &TickOutcome, now_ms: u64) -> (f64, RateReason) {
        let full = self.policy.max_active.is_some_and(|m| out.active >= m);
        self.source(out.admit_per_second, now_ms)
            .effective(out.paused, full)
    }
}
