//! The virtual day: the scenario's joins, leaves, reconnects and bookings made through
//! usher-core's `Store` at virtual times, and the dispatcher's own admission code
//! (`usher_dispatcher::tick::Admitter`) ticking the queue on a [`VirtualClock`]. The
//! admissions are read from the simulated gateway's stream, as a gateway reads them.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;
use usher_core::ids::{PlaceId, ServerId};
use usher_core::lanes::LaneName;
use usher_core::messages::StreamMessage;
use usher_core::policy::{BackendName, LoadReport};
use usher_core::store::{LeaveOutcome, PlaceState, RedisArgs, SessionEnd, Store, JOIN_BATCH_MAX};
use usher_core::time::VirtualClock;
use usher_dispatcher::queues_file::configure_missing_at;
use usher_dispatcher::tick::{Admitter, Settings};
use usher_mint::token::SigningKey;

use crate::behaviour::Fate;
use crate::scenario::Scenario;

/// Why a rehearsal could not run.
#[derive(Debug, thiserror::Error)]
pub enum RehearsalError {
    #[error("redis: {0}")]
    Store(#[from] usher_core::store::StoreError),
    #[error("--redis holds queues already ({0}): rehearse on a scratch redis-server")]
    NotScratch(String),
    #[error("the signing key of the rehearsal: {0}")]
    Key(String),
    #[error("{0}")]
    Setup(String),
}

/// One browser's place, times in ms since the rehearsal's start (second 0).
#[derive(Debug, Clone)]
pub struct Place {
    pub joined_ms: u64,
    /// The wait the join's position and rate promised (position ÷ rate).
    pub eta_ms: Option<u64>,
    pub admitted_ms: Option<u64>,
    /// Left the line (or was dropped) without admission.
    pub left_ms: Option<u64>,
    pub away: bool,
    pub fate: Fate,
}

impl Place {
    pub fn waiting(&self) -> bool {
        self.admitted_ms.is_none() && self.left_ms.is_none()
    }
}

/// One sample of the line, at the end of a virtual second.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Second {
    pub second: u64,
    pub joined: u64,
    pub admitted: u64,
    pub left: u64,
    /// In line (away places included), as Redis counts it.
    pub waiting: u64,
    /// Active sessions: what the booking service sees.
    pub active: u64,
}

/// Redis' memory and commands at a moment of the run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RedisSample {
    pub second: u64,
    pub used_memory: u64,
    /// Commands since the rehearsal began.
    pub commands: u64,
}

/// The moment the inventory ran out.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SoldOut {
    pub second: u64,
    /// Places still waiting then: they will not get an item.
    pub waiting: u64,
    /// Of those, how many arrived in each minute (minute → people).
    pub waiting_by_arrival_minute: BTreeMap<u64, u64>,
}

/// Everything a run recorded; `crate::results` turns it into figures.
#[derive(Debug, Default)]
pub struct Run {
    pub places: HashMap<u64, Place>,
    pub seconds: Vec<Second>,
    pub redis: Vec<RedisSample>,
    pub sold_out: Option<SoldOut>,
    pub booked: u64,
    pub no_shows: u64,
    pub refused: u64,
    /// Admissions of places the rehearsal did not join itself (a scheduled sale's drawn
    /// places): counted, but without a wait.
    pub admitted_unmatched: u64,
    /// Second at which the queue closed, if it did (`sold_out`).
    pub closed_at_s: Option<u64>,
    pub simulated_ms: u64,
    pub wall_ms: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Leave,
    Drop,
    Back,
    Arrive,
    Book,
}

/// The rehearsal's gateway: every simulated browser is held by it.
const GATEWAY: &str = "rehearsal-gateway";
/// Stream entries read at once.
const READ_COUNT: usize = 10_000;
/// How often (virtual seconds) Redis' memory and commands are sampled.
const REDIS_SAMPLE_S: u64 = 10;
/// An admitted browser reaches the booking service this long after its admission.
const ARRIVAL_MS: u64 = 1_000;

struct Sim<'a> {
    sc: &'a Scenario,
    store: Store,
    gw_id: ServerId,
    gw: u16,
    run: Run,
    events: BinaryHeap<Reverse<(u64, u64, Event)>>,
    rng: StdRng,
    /// Counters since the last [`Second`].
    joined: u64,
    admitted: u64,
    left: u64,
    active: u64,
    commands_at_start: u64,
    /// A scheduled sale's pre-queue tickets, until the draw puts them in line, and when it
    /// opens (ms since the start).
    pre_queue: Vec<u64>,
    opens_at: Option<u64>,
    /// Drawn places found admitted through their tickets: their admissions on the stream
    /// name the drawn place, unknown here, and are not counted twice.
    resolved_admitted: u64,
}

/// Runs `sc` on the Redis at `url`.
pub async fn rehearse(sc: &Scenario, url: &str) -> Result<Run, RehearsalError> {
    let started = Instant::now();
    let store = Store::connect(url).await?;
    let queues = store.queue_ids().await?;
    if !queues.is_empty() {
        let names: Vec<_> = queues.iter().map(|q| q.as_str().to_owned()).collect();
        return Err(RehearsalError::NotScratch(names.join(", ")));
    }
    let clock = VirtualClock::starting_at(sc.start_ms);
    configure_missing_at(&store, &sc.settings, sc.start_ms).await?;
    let gw_id = ServerId::new(GATEWAY).map_err(|e| RehearsalError::Setup(e.to_string()))?;
    // Alive on the virtual clock for the whole run; its stream lives a day of real time.
    let horizon = Duration::from_secs(sc.max_seconds + 86_400);
    let gw = store.register_gateway(&gw_id, sc.start_ms, horizon).await?;
    store
        .ensure_stream(&gw_id, Duration::from_secs(86_400))
        .await?;
    let pem = SigningKey::generate_pem().map_err(|e| RehearsalError::Key(e.to_string()))?;
    let key = SigningKey::from_pkcs8_pem(&pem).map_err(|e| RehearsalError::Key(e.to_string()))?;
    let settings = Settings {
        replica: "rehearsal".into(),
        tick: Duration::from_millis(sc.tick_ms),
        // Real time on Redis' clock (the lease's PEXPIRE): it must outlive the run.
        lease_ttl: Duration::from_secs(3_600),
        exact_positions: 100,
        redis: RedisArgs::standalone(url.to_owned()),
    };
    let mut admitter =
        Admitter::new(store.clone(), Arc::new(key), settings).with_clock(clock.clone());
    let commands_at_start = store.redis_usage().await?.commands;
    let mut sim = Sim {
        sc,
        store,
        gw_id,
        gw,
        run: Run::default(),
        events: BinaryHeap::new(),
        rng: StdRng::seed_from_u64(sc.seed),
        joined: 0,
        admitted: 0,
        left: 0,
        active: 0,
        commands_at_start,
        pre_queue: Vec::new(),
        opens_at: None,
        resolved_admitted: 0,
    };
    let backend = adaptive_backend(&sim).await?;
    let arrivals = arrival_times(&sc.joins);
    let mut next_arrival = 0usize;
    let mut t = 0u64;
    let mut last_sample_s = None;
    loop {
        let now = sc.start_ms + t;
        clock.set_ms(now);
        // Every arrival due by this tick joins first, at its own time.
        while let Some(&(at, n)) = arrivals.get(next_arrival).filter(|(at, _)| *at <= t) {
            sim.join(n, at).await?;
            next_arrival += 1;
        }
        sim.events_due(t).await?;
        let second = t / 1000;
        if last_sample_s != Some(second) {
            sim.report(t, backend.as_ref()).await?;
        }
        admitter.tick_at(now).await?;
        if sim.opens_at.is_some_and(|o| t >= o) && !sim.pre_queue.is_empty() {
            sim.after_the_draw(t).await?;
        }
        let closed = sim.read_admissions().await?;
        if last_sample_s != Some(second) {
            last_sample_s = Some(second);
            sim.sample(t).await?;
        }
        let joins_done = next_arrival >= arrivals.len();
        let line_empty = sim.run.places.values().all(|p| !p.waiting());
        let nothing_pending = sim
            .events
            .iter()
            .all(|Reverse((_, _, e))| *e != Event::Book);
        if closed {
            sim.run.closed_at_s = Some(second);
        }
        t += sc.tick_ms;
        if closed
            || (joins_done && line_empty && nothing_pending && sim.active == 0)
            || t > sc.max_seconds * 1000
        {
            break;
        }
    }
    sim.sample_redis(t).await?;
    sim.run.admitted_unmatched = sim
        .run
        .admitted_unmatched
        .saturating_sub(sim.resolved_admitted);
    sim.run.simulated_ms = t;
    sim.run.wall_ms = started.elapsed().as_millis() as u64;
    Ok(sim.run)
}

/// The adaptive queue's backend, if any: the rehearsal reports its load.
async fn adaptive_backend(sim: &Sim<'_>) -> Result<Option<BackendName>, RehearsalError> {
    Ok(sim
        .store
        .queue_config(&sim.sc.queue)
        .await?
        .and_then(|c| c.adaptive)
        .map(|a| a.backend))
}

impl Sim<'_> {
    /// `n` browsers join at `t`, each lane's in batches.
    async fn join(&mut self, n: u64, t: u64) -> Result<(), RehearsalError> {
        let now = self.sc.start_ms + t;
        let fates: Vec<Fate> = (0..n)
            .map(|_| self.sc.behaviours.draw(&mut self.rng))
            .collect();
        let mut by_lane: BTreeMap<Option<LaneName>, Vec<Fate>> = BTreeMap::new();
        for f in fates {
            by_lane.entry(f.lane.clone()).or_default().push(f);
        }
        for (lane, fates) in by_lane {
            for chunk in fates.chunks(JOIN_BATCH_MAX) {
                let batch = self
                    .store
                    .join_in_lane(
                        &self.sc.queue,
                        self.gw,
                        now,
                        &vec![None; chunk.len()],
                        &[],
                        lane.as_ref(),
                    )
                    .await?;
                for (i, fate) in chunk.iter().enumerate() {
                    match batch.outcome(i) {
                        Ok(state) => self.joined_one(state, fate.clone(), t),
                        Err(_) => self.run.refused += 1,
                    }
                }
            }
        }
        Ok(())
    }

    fn joined_one(&mut self, state: PlaceState, fate: Fate, t: u64) {
        let (place, eta_ms, admitted) = match state {
            PlaceState::Waiting {
                place,
                position,
                rate,
                ..
            } => {
                let eta = (rate > 0.0).then(|| (position as f64 / rate * 1000.0) as u64);
                (place, eta, false)
            }
            PlaceState::Scheduled {
                place, opens_at_ms, ..
            } => {
                self.pre_queue.push(place.0);
                self.opens_at = Some(opens_at_ms.saturating_sub(self.sc.start_ms));
                (place, None, false)
            }
            PlaceState::AdmittedNow { place } => (place, Some(0), true),
            _ => {
                self.run.refused += 1;
                return;
            }
        };
        self.joined += 1;
        if let Some(ms) = fate.leaves_after_ms {
            self.at(t + ms, Event::Leave, place);
        }
        if let Some(ms) = fate.drops_after_ms {
            self.at(t + ms, Event::Drop, place);
        }
        self.run.places.insert(
            place.0,
            Place {
                joined_ms: t,
                eta_ms,
                admitted_ms: None,
                left_ms: None,
                away: false,
                fate,
            },
        );
        if admitted {
            self.admitted_one(place, t);
        }
    }

    /// After a scheduled sale's draw: each pre-queue ticket's drawn place (the join's place
    /// from now on), found by resuming with the ticket, as its browser does after `drawn`.
    async fn after_the_draw(&mut self, t: u64) -> Result<(), RehearsalError> {
        let now = self.sc.start_ms + t;
        for ticket in std::mem::take(&mut self.pre_queue) {
            // The gateway hears `drawn` and its entrants' browsers resume with their tickets.
            let state = self
                .store
                .resume(&self.sc.queue, PlaceId(ticket), self.gw, now)
                .await?;
            match state {
                PlaceState::Scheduled { .. } => self.pre_queue.push(ticket),
                PlaceState::Waiting {
                    place,
                    position,
                    rate,
                    ..
                } => {
                    if let Some(mut p) = self.run.places.remove(&ticket) {
                        // The first ETA this browser sees, counted from its join like
                        // its wait: the time to the opening, then position ÷ rate.
                        p.eta_ms = (rate > 0.0).then(|| {
                            t.saturating_sub(p.joined_ms) + (position as f64 / rate * 1000.0) as u64
                        });
                        self.run.places.insert(place.0, p);
                    }
                }
                PlaceState::Admitted(_) | PlaceState::AdmissionPending => {
                    self.resolved_admitted += 1;
                    self.admitted_one(PlaceId(ticket), t);
                    // Counted once a second from the stream, which names the drawn place.
                    self.admitted -= 1;
                }
                _ => {
                    if self.run.places.get(&ticket).is_some_and(Place::waiting) {
                        self.gone(ticket, t);
                    }
                }
            }
        }
        Ok(())
    }

    fn at(&mut self, t: u64, e: Event, place: PlaceId) {
        self.events.push(Reverse((t, place.0, e)));
    }

    /// Leaves, drops, returns, arrivals and bookings due by `t`, in time order.
    async fn events_due(&mut self, t: u64) -> Result<(), RehearsalError> {
        let now = self.sc.start_ms + t;
        let q = self.sc.queue.clone();
        while let Some(Reverse((at, id, e))) = self.events.peek().copied() {
            if at > t {
                break;
            }
            self.events.pop();
            let place = PlaceId(id);
            let Some(p) = self.run.places.get(&id) else {
                continue;
            };
            let waiting = p.waiting();
            match e {
                Event::Leave if waiting => {
                    if let LeaveOutcome::Left { .. } | LeaveOutcome::NotFound =
                        self.store.leave_at(&q, place, now).await?
                    {
                        self.gone(id, t);
                    }
                }
                Event::Drop if waiting => {
                    self.store.mark_away(&q, &[place], self.gw, now).await?;
                    if let Some(p) = self.run.places.get_mut(&id) {
                        p.away = true;
                    }
                    let back = t + self.sc.behaviours.away_seconds * 1000;
                    self.at(back, Event::Back, place);
                }
                Event::Back if waiting => {
                    if let Some(p) = self.run.places.get_mut(&id) {
                        p.away = false;
                    }
                    // The browser reconnects with its ticket (`Last-Event-ID`): a resume.
                    match self.store.resume(&q, place, self.gw, now).await? {
                        PlaceState::Waiting { .. } | PlaceState::Scheduled { .. } => {}
                        // Admitted meanwhile (a tick raced the away mark): its admission
                        // arrives on the stream.
                        PlaceState::Admitted(_) | PlaceState::AdmissionPending => {}
                        // Away past the queue's grace: the tick dropped the place.
                        _ => self.gone(id, t),
                    }
                }
                Event::Arrive => {
                    self.store.session(&q, place, now).await?;
                }
                Event::Book => {
                    if let SessionEnd::EndedNow { .. } =
                        self.store.consume_session(&q, place, now).await?
                    {
                        self.run.booked += 1;
                        if self.sc.inventory == Some(self.run.booked) {
                            self.sold_out(t);
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn gone(&mut self, id: u64, t: u64) {
        if let Some(p) = self.run.places.get_mut(&id) {
            p.left_ms = Some(t);
            self.left += 1;
        }
    }

    fn sold_out(&mut self, t: u64) {
        let mut by_minute = BTreeMap::new();
        let mut waiting = 0;
        for p in self.run.places.values().filter(|p| p.waiting()) {
            waiting += 1;
            *by_minute.entry(p.joined_ms / 60_000).or_insert(0) += 1;
        }
        self.run.sold_out = Some(SoldOut {
            second: t / 1000,
            waiting,
            waiting_by_arrival_minute: by_minute,
        });
    }

    fn admitted_one(&mut self, place: PlaceId, t: u64) {
        self.admitted += 1;
        let Some(p) = self.run.places.get_mut(&place.0) else {
            self.run.admitted_unmatched += 1;
            return;
        };
        if p.admitted_ms.is_some() {
            return;
        }
        p.admitted_ms = Some(t);
        if p.fate.no_show {
            self.run.no_shows += 1;
            return;
        }
        let booking = p.fate.booking_ms;
        self.at(t + ARRIVAL_MS, Event::Arrive, place);
        self.at(t + ARRIVAL_MS + booking, Event::Book, place);
    }

    /// What the gateway, the booking service and the backend report, once a virtual second.
    async fn report(
        &mut self,
        t: u64,
        backend: Option<&BackendName>,
    ) -> Result<(), RehearsalError> {
        let now = self.sc.start_ms + t;
        // The gateway still holds the queue's browsers (what a gateway's heartbeat says).
        self.store
            .refresh_interest(std::slice::from_ref(&self.sc.queue), self.gw, now)
            .await?;
        if let Some(items) = self.sc.inventory {
            let left = items.saturating_sub(self.run.booked);
            self.store
                .report_inventory(&self.sc.queue, left, now)
                .await?;
        }
        if let (Some(b), Some(capacity)) = (backend, self.sc.backend_capacity) {
            let load = self.active as f64 / capacity.max(1) as f64;
            self.store
                .report_load(b, LoadReport { load, at_ms: now })
                .await?;
        }
        Ok(())
    }

    /// Reads the gateway's stream: admissions (stamped with their virtual time) and a close.
    /// Returns whether the queue closed.
    async fn read_admissions(&mut self) -> Result<bool, RehearsalError> {
        let mut closed = false;
        loop {
            let Some(entries) = self.store.read_stream_now(&self.gw_id, READ_COUNT).await? else {
                return Err(RehearsalError::Setup(
                    "the rehearsal's gateway stream vanished".into(),
                ));
            };
            let n = entries.len();
            let ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
            for e in entries {
                match e.message {
                    Some(StreamMessage::Admitted { items, .. }) => {
                        for a in items {
                            let at = a.admitted_at_ms.saturating_sub(self.sc.start_ms);
                            self.admitted_one(a.place, at);
                        }
                    }
                    Some(StreamMessage::AdmittedStaged {
                        admitted_at_ms,
                        places,
                        ..
                    }) => {
                        let at = admitted_at_ms.saturating_sub(self.sc.start_ms);
                        for p in places {
                            self.admitted_one(p, at);
                        }
                    }
                    Some(StreamMessage::Closed { .. }) => closed = true,
                    _ => {}
                }
            }
            self.store.ack(&self.gw_id, &ids).await?;
            if n < READ_COUNT {
                return Ok(closed);
            }
        }
    }

    /// The second's row: Redis' own count of the line and of active sessions.
    async fn sample(&mut self, t: u64) -> Result<(), RehearsalError> {
        let now = self.sc.start_ms + t;
        let stats = self.store.queue_stats(&self.sc.queue, now).await?;
        self.active = stats.active;
        self.run.seconds.push(Second {
            second: t / 1000,
            joined: std::mem::take(&mut self.joined),
            admitted: std::mem::take(&mut self.admitted),
            left: std::mem::take(&mut self.left),
            waiting: stats.waiting + stats.entrants,
            active: stats.active,
        });
        if (t / 1000).is_multiple_of(REDIS_SAMPLE_S) {
            self.sample_redis(t).await?;
        }
        Ok(())
    }

    async fn sample_redis(&mut self, t: u64) -> Result<(), RehearsalError> {
        let u = self.store.redis_usage().await?;
        self.run.redis.push(RedisSample {
            second: t / 1000,
            used_memory: u.used_memory,
            commands: u.commands.saturating_sub(self.commands_at_start),
        });
        Ok(())
    }
}

/// Milliseconds an arrival's joins are grouped by: a second's joins are spread evenly
/// across it (as `usher-loadgen --arrivals` spreads them), in groups this far apart at most,
/// so a rehearsal of a large crowd makes a hundred join calls a virtual second, not one per
/// person.
const ARRIVAL_GROUP_MS: u64 = 10;

/// When each second's joins (`joins[s]`) arrive: the `j`-th of `n` at `s + j/n` seconds, in
/// [`ARRIVAL_GROUP_MS`] groups, as (virtual ms from the start, people), in time order.
fn arrival_times(joins: &[u64]) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for (s, &n) in joins.iter().enumerate() {
        for j in 0..n {
            let at = s as u64 * 1000 + j * 1000 / n;
            let group = at - at % ARRIVAL_GROUP_MS;
            match out.last_mut() {
                Some((last, count)) if *last == group => *count += 1,
                _ => out.push((group, 1)),
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seconds_joins_are_spread_evenly_across_it_in_groups() {
        // 4 in second 0: at 0, 250, 500, 750 ms; 1 in second 1: at 1,000; none in second 2;
        // 200 in second 3: five a 25 ms... two a 10 ms group (every 5 ms).
        let at = arrival_times(&[4, 1, 0, 200]);
        assert_eq!(&at[..5], &[(0, 1), (250, 1), (500, 1), (750, 1), (1000, 1)]);
        assert_eq!(at[5..].len(), 100, "200 over a second in 10 ms groups");
        assert!(at[5..].iter().all(|&(_, n)| n == 2));
        assert_eq!(at[5].0, 3000);
        assert_eq!(at.last().map(|a| a.0), Some(3990));
        assert_eq!(at.iter().map(|a| a.1).sum::<u64>(), 205);
    }
}
