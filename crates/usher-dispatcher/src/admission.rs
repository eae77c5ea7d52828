//! The admission loop: one tick per `tick_ms`, every open queue per tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;
use usher_core::ids::{QueueId, ServerId};
use usher_core::messages::{Admission, QueueState, StreamMessage};
use usher_core::store::{Store, StoreError, TickArgs, TickOutcome, TokenRecord};
use usher_core::time::now_ms;
use usher_core::token::{Claims, SigningKey};

/// Queues ticked concurrently.
const QUEUE_CONCURRENCY: usize = 16;
/// Outbox entries read and delivered per round.
const OUTBOX_BATCH: usize = 2000;
/// Admissions per `admitted` stream entry.
const ADMITTED_PER_MESSAGE: usize = 250;
/// Weight of the newest sample in the measured admission rate.
const RATE_EWMA_WEIGHT: f64 = 0.3;

/// Per-queue memory of this dispatcher (lost on restart; only used for the measured rate).
#[derive(Debug, Default, Clone, Copy)]
struct Runtime {
    last_tick_ms: Option<u64>,
    measured_rate: Option<f64>,
}

/// Drives admission for every open queue.
pub struct Admitter {
    store: Store,
    key: Arc<SigningKey>,
    tick_ms: u64,
    exact: u64,
    runtime: HashMap<QueueId, Runtime>,
}

/// What one tick did, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct TickReport {
    pub queues: usize,
    pub admitted: u64,
    pub delivered: u64,
}

impl Admitter {
    pub fn new(store: Store, key: Arc<SigningKey>, tick_ms: u64, exact: u64) -> Self {
        Self {
            store,
            key,
            tick_ms,
            exact,
            runtime: HashMap::new(),
        }
    }

    /// Ticks until `cancel` fires. Redis errors are logged and the next tick tries again: while
    /// Redis is away nobody is admitted, and admission resumes by itself when it returns.
    pub async fn run(mut self, cancel: CancellationToken) {
        let mut interval = tokio::time::interval(std::time::Duration::from_millis(self.tick_ms));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        loop {
            tokio::select! {
                () = cancel.cancelled() => break,
                _ = interval.tick() => {}
            }
            let started = Instant::now();
            match self.tick().await {
                Ok(r) => {
                    if failing {
                        tracing::info!("redis is back; admission resumed");
                        failing = false;
                    }
                    tracing::debug!(
                        queues = r.queues,
                        admitted = r.admitted,
                        delivered = r.delivered,
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
        tracing::info!("admission loop stopped");
    }

    /// One tick over every queue.
    pub async fn tick(&mut self) -> Result<TickReport, StoreError> {
        let now = now_ms();
        let queues = self.store.queue_ids().await?;
        let live = Arc::new(self.store.live_gateways(now).await?);
        let jobs: Vec<_> = queues
            .into_iter()
            .map(|q| {
                let rt = self.runtime.get(&q).copied().unwrap_or_default();
                let job = QueueTick {
                    store: self.store.clone(),
                    key: self.key.clone(),
                    live: live.clone(),
                    tick_ms: self.tick_ms,
                    exact: self.exact,
                    now,
                    rt,
                };
                async move {
                    let r = job.run(&q).await;
                    (q, r)
                }
            })
            .collect();
        let results: Vec<_> = stream::iter(jobs)
            .buffer_unordered(QUEUE_CONCURRENCY)
            .collect()
            .await;
        let mut report = TickReport::default();
        let mut first_err = None;
        for (q, r) in results {
            match r {
                Ok(Some((rt, admitted, delivered))) => {
                    report.queues += 1;
                    report.admitted += admitted;
                    report.delivered += delivered;
                    self.runtime.insert(q, rt);
                }
                Ok(None) => {
                    self.runtime.remove(&q);
                }
                Err(e) => {
                    tracing::debug!(queue = %q, error = %e, "queue tick failed");
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if report.queues == 0 => Err(e),
            _ => Ok(report),
        }
    }
}

struct QueueTick {
    store: Store,
    key: Arc<SigningKey>,
    live: Arc<HashMap<String, ServerId>>,
    tick_ms: u64,
    exact: u64,
    now: u64,
    rt: Runtime,
}

impl QueueTick {
    /// Returns the queue's new runtime, admitted and delivered counts; `None` when closed.
    async fn run(mut self, q: &QueueId) -> Result<Option<(Runtime, u64, u64)>, StoreError> {
        let args = TickArgs {
            now_ms: self.now,
            first_elapsed_ms: self.tick_ms,
            max_elapsed_ms: self.tick_ms.saturating_mul(3).max(1000),
            exact: self.exact,
            max_position_error: 0.01,
            store_rate: self.rt.measured_rate,
        };
        let Some(out) = self.store.tick(q, &args).await? else {
            return Ok(None);
        };
        self.measure(&out);
        let delivered = if out.outbox_len > 0 {
            self.deliver(q).await?
        } else {
            0
        };
        self.publish_state(q, &out).await?;
        Ok(Some((self.rt, out.admitted, delivered)))
    }

    /// Admissions per second over ticks where the line was not exhausted.
    fn measure(&mut self, out: &TickOutcome) {
        if let Some(last) = self.rt.last_tick_ms {
            let secs = self.now.saturating_sub(last) as f64 / 1000.0;
            if secs > 0.0 && out.waiting > 0 {
                let sample = out.admitted as f64 / secs;
                self.rt.measured_rate = Some(match self.rt.measured_rate {
                    Some(r) => r + RATE_EWMA_WEIGHT * (sample - r),
                    None => sample,
                });
            }
        }
        self.rt.last_tick_ms = Some(self.now);
    }

    fn rate(&self, out: &TickOutcome) -> f64 {
        self.rt
            .measured_rate
            .filter(|r| *r > 0.0)
            .unwrap_or(out.admit_per_second)
    }

    /// Mints tokens for everything in the outbox and sends each admission to the gateway that
    /// held the browser. Entries leave the outbox only after their messages were written, so
    /// a crash in between re-sends them with the very same (deterministic) tokens.
    async fn deliver(&self, q: &QueueId) -> Result<u64, StoreError> {
        let mut delivered = 0;
        loop {
            let entries = self.store.outbox(q, OUTBOX_BATCH).await?;
            if entries.is_empty() {
                break;
            }
            let mut records = Vec::with_capacity(entries.len());
            let mut by_gateway: HashMap<&str, Vec<Admission>> = HashMap::new();
            for e in &entries {
                let token = self.key.mint(&Claims {
                    sub: e.place.to_string(),
                    aud: q.to_string(),
                    iat: e.admitted_at_ms / 1000,
                    exp: e.expires_at_ms / 1000,
                    jti: format!("{q}.{}", e.place),
                });
                records.push((
                    e.place,
                    TokenRecord {
                        admitted_at_ms: e.admitted_at_ms,
                        expires_at_ms: e.expires_at_ms,
                        token: token.clone(),
                    },
                ));
                by_gateway.entry(&e.gateway).or_default().push(Admission {
                    place: e.place,
                    token,
                    admitted_at_ms: e.admitted_at_ms,
                    expires_at_ms: e.expires_at_ms,
                });
            }
            self.store.store_tokens(q, &records).await?;
            let mut batches = Vec::new();
            for (gw, items) in by_gateway {
                let Some(id) = self.live.get(gw) else {
                    // The gateway is gone; its browsers reconnect elsewhere and find their
                    // token in Redis.
                    tracing::debug!(queue = %q, gateway = gw, n = items.len(), "admissions for a gateway that is gone");
                    continue;
                };
                let msgs = items
                    .chunks(ADMITTED_PER_MESSAGE)
                    .map(|c| StreamMessage::Admitted {
                        queue: q.clone(),
                        items: c.to_vec(),
                    })
                    .collect();
                batches.push((id.clone(), msgs));
            }
            self.store.send(&batches).await?;
            self.store.trim_outbox(q, entries.len()).await?;
            delivered += entries.len() as u64;
            if entries.len() < OUTBOX_BATCH {
                break;
            }
        }
        Ok(delivered)
    }

    async fn publish_state(&self, q: &QueueId, out: &TickOutcome) -> Result<(), StoreError> {
        let state = QueueState {
            queue: q.clone(),
            at_ms: self.now,
            waiting: out.waiting,
            rate: self.rate(out),
            runs: out.runs.clone(),
            samples: out.samples.clone(),
        };
        let batches: Vec<_> = out
            .gateways
            .iter()
            .filter_map(|gw| self.live.get(gw))
            .map(|id| (id.clone(), vec![StreamMessage::State(state.clone())]))
            .collect();
        self.store.send(&batches).await
    }
}
