//! The admission loop: one tick per `tick_ms`; every queue this replica holds the lease of.
//!
//! Replicas share queues by rendezvous hashing over the live replicas: each queue has one
//! preferred replica, which acquires its lease (a Redis key with a TTL and a fencing token). The
//! holder renews the lease inside every tick script, so a stale holder's tick is rejected by
//! Redis itself. When a replica dies, its registry entry and leases expire and the queues'
//! new preferred replicas take them over. When a replica joins, holders hand over the queues
//! that now prefer it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;
use usher_core::ids::{PlaceId, QueueId, ServerId};
use usher_core::messages::{Admission, QueueState, StreamMessage};
use usher_core::store::{
    GatewayInfo, Lease, OutboxEntry, Store, StoreError, Tick, TickArgs, TickOutcome, TokenRecord,
    MAX_ADMIT_PER_TICK,
};
use usher_core::time::now_ms;
use usher_core::token::{Claims, SigningKey};

/// Queues ticked concurrently.
const QUEUE_CONCURRENCY: usize = 16;
/// Outbox entries (of up to 1,000 admissions each) read and delivered per round.
const OUTBOX_BATCH: usize = 10;
/// Admissions per `admitted` or `staged` stream entry (each carries a token).
const ADMITTED_PER_MESSAGE: usize = 250;
/// Places per `admitted_staged` stream entry (place ids only).
const STAGED_PLACES_PER_MESSAGE: usize = 5_000;
/// A tick starting at most this late still uses its scheduled time as the admission time.
const ON_TIME_MS: u64 = 50;
/// The measured admission rate looks this far back.
const RATE_WINDOW_MS: u64 = 10_000;
/// ... and is used once it covers this long.
const RATE_MIN_WINDOW_MS: u64 = 3_000;

/// How long before a tick's admission time its reads (registries, queue list) start, so that
/// at the admission time itself only the tick script stands between a browser and its
/// admission: a tenth of the tick, at most 20 ms.
fn read_lead(tick: Duration) -> Duration {
    (tick / 10).min(Duration::from_millis(20))
}

/// How long after a tick's admission time its token records are written and the line's new
/// state is published: three tenths of the tick, at most 300 ms. Until then the machines
/// deliver the admissions alone: at 5,000 per tick the burst takes 80–120 ms on two shared
/// cores, and the state that follows moves every other browser (up to one write each), so
/// sent sooner it slows the burst's tail. Positions refresh once a tick either way.
fn token_store_delay(tick: Duration) -> Duration {
    (tick * 3 / 10).min(Duration::from_millis(300))
}

/// Per-queue memory of this replica.
#[derive(Debug)]
struct Held {
    lease: Lease,
    last_tick_ms: Option<u64>,
    measured_rate: Option<f64>,
    /// Tokens minted ahead for the next tick's expected admissions.
    premint: Option<Premint>,
    /// Recent ticks that found people waiting: (ms since the previous tick, admitted).
    window: std::collections::VecDeque<(u64, u64)>,
}

/// Entry tokens minted between ticks for the places expected at the head of the line at the
/// next tick, so admission does not wait for Ed25519 signing. A token depends only on the
/// place, the admission time and the expiry, so a pre-minted token is exactly the one minting
/// at admission would give; places not pre-minted (the line changed) are minted then.
///
/// The tokens are also *staged*: sent ahead to the gateways holding those places, so that at
/// the tick the admission message names places only, instead of carrying ~350 bytes of token
/// each on the busiest path. A gateway never shows a staged token before the admission.
///
/// Tokens come in batches of [`PREMINT_BATCH`] places, head of the line first, so a tick that
/// comes before all are ready (a queue unpaused just before it) waits only for the batch its
/// first script call admits, not for all of them.
#[derive(Debug)]
struct Premint {
    at_ms: u64,
    exp_ms: u64,
    batches: Batches,
    task: Minting,
}

/// Pre-minted tokens as they are minted: (place, token) in line order.
type Batches = tokio::sync::mpsc::Receiver<Vec<(u64, Pre)>>;

/// Places minted (and staged) per pre-mint batch.
const PREMINT_BATCH: usize = 1_000;

/// The background task minting (and staging) tokens; aborted when dropped, so a replaced or
/// forgotten pre-mint (an operator's second change, a queue handed over) stops instead of
/// minting and staging on every core for nothing. (A mint already running on the blocking
/// pool finishes its batch; its result is dropped.)
#[derive(Debug)]
struct Minting(tokio::task::JoinHandle<()>);

impl Drop for Minting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A token minted ahead, and the gateway it was staged on, if any.
#[derive(Debug)]
struct Pre {
    token: String,
    staged_on: Option<u16>,
}

/// Mints tokens for `places` admitted at `at_ms` (expiring at `exp_ms`), on every core.
fn mint_many(
    key: &SigningKey,
    q: &QueueId,
    places: &[u64],
    at_ms: u64,
    exp_ms: u64,
) -> Vec<(u64, String)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = places.len().div_ceil(threads).max(64);
    std::thread::scope(|scope| {
        let handles: Vec<_> = places
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|&p| (p, key.mint(&claims(q, p, at_ms, exp_ms))))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    })
}

/// The gateways of `gateways` alive at `now`, by index.
fn live_at(gateways: &[GatewayInfo], now: u64) -> HashMap<u16, &ServerId> {
    gateways
        .iter()
        .filter(|g| g.is_alive(now))
        .map(|g| (g.index, &g.server_id))
        .collect()
}

/// Admissions in stream messages of [`ADMITTED_PER_MESSAGE`] each (`wrap` makes one).
fn in_messages(
    items: &[Admission],
    wrap: impl Fn(Vec<Admission>) -> StreamMessage,
) -> Vec<StreamMessage> {
    items
        .chunks(ADMITTED_PER_MESSAGE)
        .map(|c| wrap(c.to_vec()))
        .collect()
}

/// The admissions one tick is expected to make: what the tick script's budget will be.
fn expected_per_tick(carry: f64, admit_per_second: f64, tick: Duration) -> u64 {
    (carry + admit_per_second * tick.as_secs_f64()).floor() as u64
}

/// Sends pre-minted tokens to the live gateways (of the last tick's registry) holding those
/// places; returns the gateways that have them. A failure only means the tokens travel with
/// the admission instead.
async fn stage(
    store: &Store,
    gateways: &[GatewayInfo],
    q: &QueueId,
    minted: &[(u64, String)],
    gateway_of: &HashMap<u64, u16>,
    at_ms: u64,
    exp_ms: u64,
) -> std::collections::HashSet<u16> {
    let live = live_at(gateways, now_ms());
    let mut by_gateway: HashMap<u16, Vec<Admission>> = HashMap::new();
    for (place, token) in minted {
        let Some(gw) = gateway_of.get(place).filter(|g| live.contains_key(g)) else {
            continue;
        };
        by_gateway.entry(*gw).or_default().push(Admission {
            place: usher_core::ids::PlaceId(*place),
            token: token.clone(),
            admitted_at_ms: at_ms,
            expires_at_ms: exp_ms,
        });
    }
    let batches: Vec<_> = by_gateway
        .iter()
        .filter_map(|(gw, items)| {
            let msgs = in_messages(items, |items| StreamMessage::Staged {
                queue: q.clone(),
                items,
            });
            Some(((*live.get(gw)?).clone(), msgs))
        })
        .collect();
    match store.send(&batches).await {
        Ok(()) => by_gateway.into_keys().collect(),
        Err(e) => {
            tracing::debug!(queue = %q, error = %e, "could not stage tokens; they go with the admissions");
            Default::default()
        }
    }
}

/// What to mint ahead for one queue.
struct PremintPlan<'a> {
    q: &'a QueueId,
    /// Admissions expected at `at_ms` (a margin is added).
    expected: u64,
    at_ms: u64,
    exp_ms: u64,
    /// When to read the head of the line (wall clock); `None`: now.
    read_at_ms: Option<u64>,
}

/// At `read_at_ms` (wall clock; `None`: now, for an operator's change), reads the first
/// `expected` (plus a margin) places of the line, mints their tokens for admission at `at_ms`
/// on the blocking pool, and stages them on the gateways.
fn spawn_premint(
    store: &Store,
    key: &Arc<SigningKey>,
    gateways: &Arc<Vec<GatewayInfo>>,
    plan: PremintPlan<'_>,
) -> Premint {
    let PremintPlan {
        q,
        expected,
        at_ms,
        exp_ms,
        read_at_ms,
    } = plan;
    let want = (expected + expected / 8 + 8).min(MAX_ADMIT_PER_TICK) as usize;
    let (store, key, gateways, q) = (store.clone(), key.clone(), gateways.clone(), q.clone());
    let (tx, batches) = tokio::sync::mpsc::channel(MAX_ADMIT_PER_TICK as usize / PREMINT_BATCH + 1);
    let task = tokio::spawn(async move {
        if let Some(t) = read_at_ms {
            // Never longer than from the read time to the admission time: a wall clock stepped
            // back must not hold the tick that waits for these tokens.
            let wait = t.saturating_sub(now_ms()).min(at_ms.saturating_sub(t));
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
        let head = match store.head(&q, want).await {
            Ok(p) => p,
            Err(_) => return,
        };
        for part in head.chunks(PREMINT_BATCH) {
            let places: Vec<u64> = part.iter().map(|h| h.0).collect();
            let (key2, q2) = (key.clone(), q.clone());
            let minted =
                tokio::task::spawn_blocking(move || mint_many(&key2, &q2, &places, at_ms, exp_ms))
                    .await
                    .unwrap_or_default();
            let gateway_of: HashMap<u64, u16> = part.iter().copied().collect();
            let staged = stage(&store, &gateways, &q, &minted, &gateway_of, at_ms, exp_ms).await;
            let batch = minted
                .into_iter()
                .map(|(place, token)| {
                    let staged_on = gateway_of
                        .get(&place)
                        .copied()
                        .filter(|g| staged.contains(g));
                    (place, Pre { token, staged_on })
                })
                .collect();
            if tx.send(batch).await.is_err() {
                return;
            }
        }
    });
    Premint {
        at_ms,
        exp_ms,
        batches,
        task: Minting(task),
    }
}

/// Queues whose admission just became possible or faster (sent by the admin API).
pub type Hints = tokio::sync::mpsc::UnboundedReceiver<QueueId>;

/// The claims of the entry token of `place`, admitted at `at_ms`.
fn claims(q: &QueueId, place: u64, at_ms: u64, exp_ms: u64) -> Claims {
    Claims {
        sub: place.to_string(),
        aud: q.to_string(),
        iat: at_ms / 1000,
        exp: exp_ms / 1000,
        jti: format!("{q}.{place}"),
    }
}

/// Settings of the admission loop.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This replica's id in the dispatcher registry and in leases.
    pub replica: String,
    pub tick: Duration,
    pub lease_ttl: Duration,
    pub exact_positions: u64,
}

/// Drives admission for the queues this replica holds.
pub struct Admitter {
    store: Store,
    key: Arc<SigningKey>,
    settings: Settings,
    held: HashMap<QueueId, Held>,
    /// The gateway registry as the last tick read it.
    gateways: Arc<Vec<GatewayInfo>>,
}

/// What one tick did, for logs and tests.
#[derive(Debug, Default, Clone, Copy)]
pub struct TickReport {
    pub queues: usize,
    pub admitted: u64,
    pub delivered: u64,
    pub dropped: u64,
}

/// FNV-1a: a hash every replica computes the same way.
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The replica that should drive `queue` (rendezvous hashing: highest score wins).
pub fn preferred<'a>(queue: &QueueId, replicas: &'a [String]) -> Option<&'a str> {
    replicas
        .iter()
        .max_by_key(|r| fnv1a(&[queue.as_str().as_bytes(), r.as_bytes()]))
        .map(String::as_str)
}

enum Outcome {
    Ticked {
        held: Held,
        admitted: u64,
        delivered: u64,
        dropped: u64,
    },
    /// Not ours (any more): forget it.
    NotHeld,
}

impl Admitter {
    pub fn new(store: Store, key: Arc<SigningKey>, settings: Settings) -> Self {
        Self {
            store,
            key,
            settings,
            held: HashMap::new(),
            gateways: Default::default(),
        }
    }

    /// Ticks until `cancel` fires, then releases every lease. Redis errors are logged and the
    /// next tick tries again: while Redis is away nobody is admitted, and admission resumes by
    /// itself when it returns.
    pub async fn run(mut self, cancel: CancellationToken, mut hints: Hints) {
        let mut interval = tokio::time::interval(self.settings.tick);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut failing = false;
        let base = (tokio::time::Instant::now(), now_ms());
        let tick_ms = self.settings.tick.as_millis() as u64;
        // The interval fires `lead` before each admission time.
        let lead = read_lead(self.settings.tick).as_millis() as u64;
        let mut last_planned = None;
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
            // Admission time = the tick's scheduled time plus the read lead (when on time), so
            // tokens minted ahead for it match exactly.
            let planned = base.1 + scheduled.duration_since(base.0).as_millis() as u64 + lead;
            last_planned = Some(planned);
            let actual = now_ms();
            let now = if actual.saturating_sub(planned) <= ON_TIME_MS {
                planned
            } else {
                actual
            };
            let started = Instant::now();
            match self.tick_at(now).await {
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
        self.release_all().await;
        tracing::info!("admission loop stopped");
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
            PremintPlan {
                q,
                expected: expected_per_tick(0.0, cfg.admit_per_second, self.settings.tick),
                at_ms,
                exp_ms: at_ms + cfg.session_ttl_seconds * 1000,
                read_at_ms: None,
            },
        ));
    }

    /// Releases every lease and leaves the registry, so other replicas take over at once.
    pub async fn release_all(&mut self) {
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

    /// The queues this replica drives now.
    pub fn held(&self) -> Vec<QueueId> {
        self.held.keys().cloned().collect()
    }

    /// One tick over every queue this replica holds or should hold, now.
    pub async fn tick(&mut self) -> Result<TickReport, StoreError> {
        self.tick_at(now_ms()).await
    }

    /// One tick with admission time `now`. When `now` is still ahead, the registries are read
    /// first and the queues are ticked at `now`.
    pub async fn tick_at(&mut self, now: u64) -> Result<TickReport, StoreError> {
        let me = self.settings.replica.clone();
        // Three independent round trips (separate keys), pipelined on the one connection.
        let (replicas, queues, gateways) = tokio::try_join!(
            self.store
                .heartbeat_dispatcher(&me, now, self.settings.lease_ttl),
            self.store.queue_ids(),
            self.store.gateways(now),
        )?;
        // (Capped: a wall clock stepped back must not stall every tick.)
        let early = now
            .saturating_sub(now_ms())
            .min(read_lead(self.settings.tick).as_millis() as u64);
        if early > 0 {
            tokio::time::sleep(Duration::from_millis(early)).await;
        }
        let gateways = Arc::new(gateways);
        self.gateways = gateways.clone();
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
                    // The lease (if any) is forgotten here; it is re-acquired with the same
                    // owner next tick if it has not expired, or by whoever comes first.
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

/// How a tick's delivery ended.
enum Delivery {
    /// This many admissions were sent and recorded.
    Done(u64),
    /// As `Done`, but the queue was closed between two calls of the tick.
    Closed(u64),
    /// The lease was lost: stop driving the queue.
    LeaseLost,
}

/// Pre-minted tokens for this tick: those received so far, and the rest still coming.
#[derive(Debug, Default)]
struct Ready {
    at_ms: u64,
    exp_ms: u64,
    tokens: HashMap<u64, Pre>,
    /// Batches not received yet (`None`: all received, or nothing was pre-minted).
    pending: Option<(Batches, Minting)>,
    /// The highest place received so far: batches come in line order, so a place below it
    /// that has no token will not get one from this pre-mint.
    received_to: u64,
}

impl Ready {
    /// Whether this pre-mint was for `e`'s admission (its tokens are exactly `e`'s).
    fn minted_for(&self, e: &OutboxEntry) -> bool {
        e.admitted_at_ms == self.at_ms && e.expires_at_ms == self.exp_ms
    }

    /// Receives batches until every place of `wanted` admitted at this pre-mint's time has its
    /// token or cannot get one from it.
    async fn cover(&mut self, wanted: &[OutboxEntry]) {
        loop {
            let waiting_for = wanted.iter().any(|e| {
                self.minted_for(e)
                    && e.place.0 > self.received_to
                    && !self.tokens.contains_key(&e.place.0)
            });
            let Some((rx, _)) = self.pending.as_mut().filter(|_| waiting_for) else {
                return;
            };
            match rx.recv().await {
                Some(batch) => {
                    let top = batch.iter().map(|(p, _)| *p).max().unwrap_or(0);
                    self.received_to = self.received_to.max(top);
                    self.tokens.extend(batch);
                }
                None => self.pending = None,
            }
        }
    }
}

struct QueueTick {
    store: Store,
    key: Arc<SigningKey>,
    gateways: Arc<Vec<GatewayInfo>>,
    settings: Settings,
    now: u64,
}

impl QueueTick {
    async fn run(self, q: &QueueId, held: Option<Held>) -> Result<Outcome, StoreError> {
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
                tracing::info!(queue = %q, fence = lease.fence, "driving queue");
                Held {
                    lease,
                    last_tick_ms: None,
                    measured_rate: None,
                    premint: None,
                    window: Default::default(),
                }
            }
        };
        let tick_ms = self.settings.tick.as_millis() as u64;
        let lease = held.lease.clone();
        let args = TickArgs {
            now_ms: self.now,
            first_elapsed_ms: tick_ms,
            max_elapsed_ms: tick_ms.saturating_mul(3).max(1000),
            exact: self.settings.exact_positions,
            max_position_error: 0.01,
            store_rate: held.measured_rate,
            lease: &lease,
            lease_ttl_ms: self.settings.lease_ttl.as_millis() as u64,
            gateways: &self.gateways,
        };
        let mut out = match self.store.tick(q, &args).await? {
            Tick::Ticked(out) => out,
            Tick::Closed { outbox_len } => {
                // Admissions made before the close are still delivered. Keep the lease: a
                // reopened queue continues here.
                let delivered = if outbox_len > 0 {
                    match self
                        .deliver(q, &held.lease, &mut Ready::default(), outbox_len, None)
                        .await?
                    {
                        Some(n) => n,
                        None => return Ok(Outcome::NotHeld),
                    }
                } else {
                    0
                };
                return Ok(Outcome::Ticked {
                    held,
                    admitted: 0,
                    delivered,
                    dropped: 0,
                });
            }
            Tick::LeaseLost => {
                tracing::info!(queue = %q, fence = held.lease.fence, "lease lost; another replica drives this queue");
                return Ok(Outcome::NotHeld);
            }
        };
        let mut ready = self.take_premint(&mut held);
        let delivered = if out.outbox_len > 0 || out.more {
            match self
                .admit_and_deliver(q, &args, &mut ready, &mut out)
                .await?
            {
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
            }
        } else {
            0
        };
        drop(ready);
        measure(&mut held, self.now, &out);
        self.publish_state(q, &held, &out).await?;
        self.premint_next(q, &mut held, &out);
        Ok(Outcome::Ticked {
            held,
            admitted: out.admitted,
            delivered,
            dropped: out.dropped,
        })
    }

    /// The tokens pre-minted for this tick, if they were minted for this very admission time
    /// (those still being minted arrive as they are needed: [`Ready::cover`]).
    fn take_premint(&self, held: &mut Held) -> Ready {
        match held.premint.take() {
            Some(p) if p.at_ms == self.now => Ready {
                at_ms: p.at_ms,
                exp_ms: p.exp_ms,
                tokens: HashMap::new(),
                pending: Some((p.batches, p.task)),
                received_to: 0,
            },
            Some(p) => {
                tracing::debug!(
                    minted_for = p.at_ms,
                    now = self.now,
                    "tokens minted ahead were for another admission time"
                );
                Ready::default()
            }
            None => Ready::default(),
        }
    }

    /// Starts minting, in the background, the tokens of the places expected to be admitted at
    /// the next tick: the head of the line, with a margin.
    fn premint_next(&self, q: &QueueId, held: &mut Held, out: &TickOutcome) {
        if out.paused {
            return;
        }
        let tick_ms = self.settings.tick.as_millis() as u64;
        let at_ms = self.now + tick_ms;
        // Halfway to the next tick, so the head read then includes who joined meanwhile.
        held.premint = Some(spawn_premint(
            &self.store,
            &self.key,
            &self.gateways,
            PremintPlan {
                q,
                expected: expected_per_tick(out.carry, out.admit_per_second, self.settings.tick),
                at_ms,
                exp_ms: at_ms + out.session_ttl_ms,
                read_at_ms: Some(at_ms - tick_ms / 2),
            },
        ));
    }

    fn live(&self) -> HashMap<u16, &ServerId> {
        live_at(&self.gateways, self.now)
    }

    /// The tokens of `entries`: pre-minted ones where they match, the rest minted now (on
    /// every core).
    async fn mint(
        &self,
        q: &QueueId,
        entries: &[OutboxEntry],
        ready: &mut Ready,
    ) -> HashMap<u64, Pre> {
        ready.cover(entries).await;
        let mut out = HashMap::with_capacity(entries.len());
        let mut missing: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
        for e in entries {
            let pre = ready
                .minted_for(e)
                .then(|| ready.tokens.remove(&e.place.0))
                .flatten();
            match pre {
                Some(t) => {
                    out.insert(e.place.0, t);
                }
                None => missing
                    .entry((e.admitted_at_ms, e.expires_at_ms))
                    .or_default()
                    .push(e.place.0),
            }
        }
        tracing::debug!(
            queue = %q,
            ahead = out.len(),
            staged = out.values().filter(|p| p.staged_on.is_some()).count(),
            now = missing.values().map(Vec::len).sum::<usize>(),
            "tokens: minted ahead / minted now"
        );
        for ((at, exp), places) in missing {
            let (key, q) = (self.key.clone(), q.clone());
            let minted = tokio::task::spawn_blocking(move || mint_many(&key, &q, &places, at, exp))
                .await
                .unwrap_or_default();
            out.extend(minted.into_iter().map(|(place, token)| {
                (
                    place,
                    Pre {
                        token,
                        staged_on: None,
                    },
                )
            }));
        }
        out
    }

    /// Mints tokens for everything in the outbox and sends each admission to the gateway that
    /// held the browser. Entries leave the outbox only after their messages were written, so a
    /// crash in between re-sends them with the very same (deterministic) tokens; gateways
    /// ignore admissions for places they no longer hold. `None` when the lease was lost.
    async fn deliver(
        &self,
        q: &QueueId,
        lease: &Lease,
        ready: &mut Ready,
        mut outbox_len: u64,
        mut fresh: Option<(u64, Vec<OutboxEntry>)>,
    ) -> Result<Option<u64>, StoreError> {
        let mut delivered = 0;
        loop {
            // This tick's admissions come with the tick's reply; anything older (left by a
            // crash or a failed delivery) is read back from the outbox first.
            let (n_entries, entries) = match fresh.take() {
                Some((n, f)) if outbox_len == n => (n, f),
                _ => self.store.outbox(q, OUTBOX_BATCH).await?,
            };
            if n_entries == 0 {
                break;
            }
            let records = self.send(q, &entries, ready).await?;
            if !self.record(q, lease, &records, n_entries).await? {
                return Ok(None);
            }
            delivered += entries.len() as u64;
            outbox_len = outbox_len.saturating_sub(n_entries);
            if outbox_len == 0 {
                break;
            }
        }
        Ok(Some(delivered))
    }

    /// Delivers a tick's admissions, starting from its first call's outcome `out`: sends them
    /// at once, and while the tick's budget has more, admits the next
    /// [`usher_core::store::ADMIT_PER_CALL`] places (the same admission time) and sends those,
    /// so the first browsers hear of their admission while Redis admits the next ones. Then
    /// stores the token records and empties the outbox. Entries older than the tick (left by a
    /// crash or a failed delivery) go first, read back from the outbox. On return `out` is the
    /// last call's outcome with the whole tick's admitted and dropped counts. After a lost lease
    /// what was sent stays in the outbox, for the next holder to deliver again.
    async fn admit_and_deliver(
        &self,
        q: &QueueId,
        args: &TickArgs<'_>,
        ready: &mut Ready,
        out: &mut TickOutcome,
    ) -> Result<Delivery, StoreError> {
        let (mut admitted, mut dropped, mut delivered) = (0, 0, 0);
        let mut records = Vec::new();
        // Outbox entries sent and not yet trimmed.
        let mut entries = 0;
        let mut closed = false;
        loop {
            admitted += out.admitted;
            dropped += out.dropped;
            let fresh = std::mem::take(&mut out.fresh);
            if entries == 0 && out.outbox_len > out.fresh_entries {
                let n = out.outbox_len;
                match self
                    .deliver(q, args.lease, ready, n, Some((out.fresh_entries, fresh)))
                    .await?
                {
                    Some(n) => delivered += n,
                    None => return Ok(Delivery::LeaseLost),
                }
            } else if !fresh.is_empty() {
                entries += out.fresh_entries;
                records.extend(self.send(q, &fresh, ready).await?);
            }
            if !out.more {
                break;
            }
            match self.store.tick(q, args).await? {
                Tick::Ticked(next) => *out = next,
                Tick::Closed { .. } => {
                    // What was admitted is still recorded below.
                    closed = true;
                    break;
                }
                Tick::LeaseLost => return Ok(Delivery::LeaseLost),
            }
        }
        out.admitted = admitted;
        out.dropped = dropped;
        // Everything is sent: pre-minted batches this tick did not need are not minted (on
        // every core) while gateways deliver.
        ready.pending = None;
        if entries > 0 && !self.record(q, args.lease, &records, entries).await? {
            return Ok(Delivery::LeaseLost);
        }
        delivered += records.len() as u64;
        Ok(if closed {
            Delivery::Closed(delivered)
        } else {
            Delivery::Done(delivered)
        })
    }

    /// Sends `entries` to the gateways holding their browsers (a place whose token is staged
    /// there by name only); returns the token records to store.
    async fn send(
        &self,
        q: &QueueId,
        entries: &[OutboxEntry],
        ready: &mut Ready,
    ) -> Result<Vec<(PlaceId, TokenRecord)>, StoreError> {
        let live = self.live();
        let mut minted = self.mint(q, entries, ready).await;
        let mut records = Vec::with_capacity(entries.len());
        let mut by_gateway: HashMap<u16, Vec<Admission>> = HashMap::new();
        // Places whose tokens the gateway already has: by gateway and (admitted, expires).
        let mut staged: HashMap<u16, HashMap<(u64, u64), Vec<PlaceId>>> = HashMap::new();
        for e in entries {
            let Some(pre) = minted.remove(&e.place.0) else {
                continue;
            };
            if pre.staged_on == Some(e.gateway) {
                staged
                    .entry(e.gateway)
                    .or_default()
                    .entry((e.admitted_at_ms, e.expires_at_ms))
                    .or_default()
                    .push(e.place);
            } else {
                by_gateway.entry(e.gateway).or_default().push(Admission {
                    place: e.place,
                    token: pre.token.clone(),
                    admitted_at_ms: e.admitted_at_ms,
                    expires_at_ms: e.expires_at_ms,
                });
            }
            records.push((
                e.place,
                TokenRecord {
                    admitted_at_ms: e.admitted_at_ms,
                    expires_at_ms: e.expires_at_ms,
                    token: pre.token,
                },
            ));
        }
        let mut messages: HashMap<u16, Vec<StreamMessage>> = HashMap::new();
        for (gw, groups) in staged {
            let msgs = messages.entry(gw).or_default();
            for ((at, exp), places) in groups {
                msgs.extend(places.chunks(STAGED_PLACES_PER_MESSAGE).map(|c| {
                    StreamMessage::AdmittedStaged {
                        queue: q.clone(),
                        admitted_at_ms: at,
                        expires_at_ms: exp,
                        places: c.to_vec(),
                    }
                }));
            }
        }
        for (gw, items) in by_gateway {
            messages
                .entry(gw)
                .or_default()
                .extend(in_messages(&items, |items| StreamMessage::Admitted {
                    queue: q.clone(),
                    items,
                }));
        }
        let mut batches = Vec::new();
        for (gw, msgs) in messages {
            let Some(id) = live.get(&gw) else {
                // The gateway is gone; its browsers reconnect elsewhere and find their
                // token in Redis.
                tracing::debug!(queue = %q, gateway = gw, "admissions for a gateway that is gone");
                continue;
            };
            batches.push(((*id).clone(), msgs));
        }
        self.store.send(&batches).await?;
        Ok(records)
    }

    /// After the browsers were sent their admissions: stores the token records (for resumes)
    /// and removes the first `entries` outbox entries. `false` when the lease was lost.
    async fn record(
        &self,
        q: &QueueId,
        lease: &Lease,
        records: &[(PlaceId, TokenRecord)],
        entries: u64,
    ) -> Result<bool, StoreError> {
        // Tokens are stored only for sessions that still exist; a place that left meanwhile
        // has no open stream, so its message reaches nobody, and its ticket no longer resumes.
        // The records serve resumes only: written a moment later, so Redis does not spend the
        // next ~30 ms storing 1.7 MB while gateways deliver the admissions (a resume
        // meanwhile waits for them). The moment is fixed from the tick's admission time, not
        // from this call: the queues of a tick handled after others (and the later rounds of
        // a backlog) do not wait again, so the wait holds no queue slot beyond it. Never longer
        // than the delay itself: a wall clock stepped back must not hold the tick.
        let delay = token_store_delay(self.settings.tick).as_millis() as u64;
        let wait = (self.now + delay).saturating_sub(now_ms()).min(delay);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if self.store.store_tokens(q, lease, records).await?.is_none() {
            return Ok(false);
        }
        self.store.trim_outbox(q, lease, entries).await
    }

    async fn publish_state(
        &self,
        q: &QueueId,
        held: &Held,
        out: &TickOutcome,
    ) -> Result<(), StoreError> {
        let live = self.live();
        let state = QueueState {
            queue: q.clone(),
            at_ms: self.now,
            waiting: out.waiting,
            rate: held
                .measured_rate
                .filter(|r| *r > 0.0)
                .unwrap_or(out.admit_per_second),
            runs: out.runs.clone(),
            samples: out.samples.clone(),
        };
        let batches: Vec<_> = out
            .gateways
            .iter()
            .filter_map(|gw| live.get(gw))
            .map(|id| ((*id).clone(), vec![StreamMessage::State(state.clone())]))
            .collect();
        self.store.send(&batches).await
    }
}

/// Admissions per second over ticks where the line was not exhausted.
/// The rate is admissions ÷ time over a sliding window of ticks that found people waiting (so a
/// slow rate admitting one place every few ticks still measures right), and stays unknown until
/// the window covers a few seconds.
fn measure(held: &mut Held, now: u64, out: &TickOutcome) {
    if let Some(last) = held.last_tick_ms {
        let ms = now.saturating_sub(last);
        if ms > 0 && out.waiting > 0 {
            held.window.push_back((ms, out.admitted));
            while held.window.iter().map(|w| w.0).sum::<u64>() > RATE_WINDOW_MS {
                held.window.pop_front();
            }
        }
    }
    held.last_tick_ms = Some(now);
    let (ms, admitted) = held
        .window
        .iter()
        .fold((0u64, 0u64), |(m, a), w| (m + w.0, a + w.1));
    held.measured_rate = (ms >= RATE_MIN_WINDOW_MS).then(|| admitted as f64 * 1000.0 / ms as f64);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(place: u64, at: u64) -> OutboxEntry {
        OutboxEntry {
            place: PlaceId(place),
            gateway: 1,
            admitted_at_ms: at,
            expires_at_ms: at + 1000,
        }
    }

    fn batch(places: std::ops::RangeInclusive<u64>) -> Vec<(u64, Pre)> {
        places
            .map(|p| {
                (
                    p,
                    Pre {
                        token: format!("t{p}"),
                        staged_on: None,
                    },
                )
            })
            .collect()
    }

    /// A tick uses pre-minted tokens batch by batch: a call whose places are in the first
    /// batch does not wait for the rest; one that needs a later batch waits for it; a place
    /// the pre-mint skipped (below what was received) is not waited for.
    #[tokio::test]
    async fn a_tick_waits_only_for_the_pre_minted_batches_it_needs() {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let mut ready = Ready {
            at_ms: 5000,
            exp_ms: 6000,
            tokens: HashMap::new(),
            pending: Some((rx, Minting(tokio::spawn(async {})))),
            received_to: 0,
        };
        tx.send(batch(1..=10)).await.expect("open");
        let first: Vec<_> = (1..=10).map(|p| entry(p, 5000)).collect();
        // The second batch is never sent here: covering the first must not wait for it.
        let waited = tokio::time::timeout(Duration::from_secs(5), ready.cover(&first)).await;
        assert!(waited.is_ok(), "waited for a batch it did not need");
        assert_eq!(ready.tokens.len(), 10);
        assert_eq!(ready.received_to, 10);

        // Place 3 skipped by the pre-mint (taken out), place 15 in the next batch.
        ready.tokens.remove(&3);
        let later = vec![entry(3, 5000), entry(15, 5000)];
        let send = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.send(batch(11..=20)).await.expect("open");
        };
        let ((), ()) = tokio::join!(ready.cover(&later), send);
        assert!(ready.tokens.contains_key(&15));
        assert!(!ready.tokens.contains_key(&3));

        // Entries of another admission time never wait; a closed channel ends the wait.
        let other = vec![entry(99, 7000)];
        ready.cover(&other).await;
        drop(tx);
        ready.cover(&[entry(99, 5000)]).await;
        assert!(ready.pending.is_none());
    }

    #[test]
    fn rendezvous_spreads_queues_and_moves_few_when_a_replica_joins() {
        let two: Vec<String> = vec!["a".into(), "b".into()];
        let three: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        let queues: Vec<QueueId> = (0..300)
            .map(|i| QueueId::new(format!("q{i}")).expect("valid"))
            .collect();
        let on_a = queues
            .iter()
            .filter(|q| preferred(q, &two) == Some("a"))
            .count();
        assert!((100..200).contains(&on_a), "{on_a} of 300 on a");
        let moved = queues
            .iter()
            .filter(|q| preferred(q, &two) != preferred(q, &three))
            .count();
        for q in &queues {
            let now = preferred(q, &three);
            if preferred(q, &two) != now {
                assert_eq!(now, Some("c"), "only moves to the new replica");
            }
        }
        assert!((50..150).contains(&moved), "{moved} moved");
        assert_eq!(preferred(&queues[0], &[]), None);
    }
}
