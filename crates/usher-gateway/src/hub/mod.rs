//! The browsers this gateway holds, by queue and place, and what each should see next.
//!
//! Each connection owns a `watch` channel: a new update replaces an unsent one, so a slow
//! browser costs one pending update at most, never a growing buffer.
//!
//! A place is *reserved* before the Redis call that resumes it (or right after the call that
//! takes it) and *attached* once its stream exists. The reservation takes ownership from any
//! older connection for the same place at once, so that connection's disconnect can no longer
//! mark the place away. One lock guards connections and orphaned admissions together, so an
//! admission can never slip between "not attached yet" and "attached".

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{eta_seconds, Admission, CloseReason, QueueState, WaitingEvent};
use usher_core::position::Standing;

use crate::update::{Admitted, Update};

/// The connection registry: every place held here, and the admissions waiting for one.
#[derive(Default)]
pub struct Hub {
    inner: Mutex<Inner>,
    next_id: AtomicU64,
}

/// A place reserved for a connection being set up; pass it to [`Hub::attach`], or to
/// [`Hub::unreserve`] when the setup fails.
#[derive(Debug)]
pub struct Reservation {
    pub queue: QueueId,
    pub place: PlaceId,
    id: u64,
}

/// Identifies one attached connection; pass it back to [`Hub::detach`].
#[derive(Debug, Clone)]
pub struct Attached {
    pub queue: QueueId,
    pub place: PlaceId,
    id: u64,
}

/// One connection (or reservation) for a place, as [`Hub::connection_of`] saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionId(u64);

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Places held or reserved.
    pub fn connections(&self) -> u64 {
        self.lock().held
    }

    /// Reserves `place` for a new connection. An older connection holding it here is ended
    /// with `closed` `resumed_elsewhere` (the newest connection owns a place; the old tab
    /// learns why, instead of reconnecting and taking the place back every `retry:` period)
    /// and can no longer release it.
    pub fn reserve(&self, queue: &QueueId, place: PlaceId) -> Reservation {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        let slot = Slot {
            id,
            tx: None,
            pending: None,
            position: u64::MAX,
            resyncing: false,
        };
        if let Some(tx) = inner.insert(queue, place, slot).and_then(|old| old.tx) {
            let _ = tx.send(Update::closed(queue, CloseReason::ResumedElsewhere));
        }
        Reservation {
            queue: queue.clone(),
            place,
            id,
        }
    }

    /// Whether a connection here holds (or is resuming) `place`.
    pub fn holds(&self, queue: &QueueId, place: PlaceId) -> bool {
        self.lock().holds(queue, place)
    }

    /// Gives up a reservation that never became a connection. Returns `true` when it still
    /// owned the place (so the place should be marked away).
    pub fn unreserve(&self, r: &Reservation) -> bool {
        let mut inner = self.lock();
        inner
            .remove_if(&r.queue, r.place, |s| s.id == r.id && s.tx.is_none())
            .is_some()
    }

    /// Turns a reservation into a connection. The receiver starts with `first` (`waiting`,
    /// `scheduled` for a pre-queue place, or [`Update::Admitting`] for a place admitted by its
    /// join), or with a terminal update that arrived meanwhile (an admission included). `None`
    /// when a newer connection took the place over in between.
    pub fn attach(
        &self,
        r: Reservation,
        first: Update,
    ) -> Option<(Attached, watch::Receiver<Update>)> {
        let mut inner = self.lock();
        let orphan = inner.orphans.remove(&(r.queue.clone(), r.place));
        let slot = inner
            .queues
            .get_mut(&r.queue)
            .and_then(|c| c.get_mut(&r.place.0))
            .filter(|s| s.id == r.id)?;
        let a = Attached {
            queue: r.queue.clone(),
            place: r.place,
            id: r.id,
        };
        let terminal = slot
            .pending
            .take()
            .or_else(|| orphan.map(|o| Update::Admitted(o.event)));
        if let Some(t) = terminal {
            inner.remove(&r.queue, r.place);
            let (_tx, rx) = watch::channel(t);
            return Some((a, rx));
        }
        slot.position = match &first {
            Update::Waiting(w) => w.position,
            _ => u64::MAX,
        };
        let (tx, rx) = watch::channel(first);
        slot.tx = Some(tx);
        Some((a, rx))
    }

    /// Forgets a connection. Returns `true` when it still held its place (it ended on its own
    /// rather than through a terminal update or a newer connection).
    pub fn detach(&self, a: &Attached) -> bool {
        let mut inner = self.lock();
        inner
            .remove_if(&a.queue, a.place, |s| s.id == a.id)
            .is_some()
    }

    /// Sends a terminal update to the connection holding `place`. Returns whether one did.
    pub fn finish(&self, queue: &QueueId, place: PlaceId, u: Update) -> bool {
        self.lock().deliver(queue, place, u)
    }

    /// The connection (or reservation) holding `place` here now, to end it later with
    /// [`Hub::finish_connection`] and not a newer one that takes the place over meanwhile.
    pub fn connection_of(&self, queue: &QueueId, place: PlaceId) -> Option<ConnectionId> {
        let inner = self.lock();
        let slot = inner.queues.get(queue)?.get(&place.0)?;
        Some(ConnectionId(slot.id))
    }

    /// Like [`Hub::finish`], for connection `c` only. Returns whether it was still here.
    pub fn finish_connection(
        &self,
        queue: &QueueId,
        place: PlaceId,
        c: ConnectionId,
        u: Update,
    ) -> bool {
        let mut inner = self.lock();
        let current = inner
            .queues
            .get(queue)
            .and_then(|conns| conns.get(&place.0))
            .is_some_and(|s| s.id == c.0);
        current && inner.deliver(queue, place, u)
    }

    /// Applies a queue snapshot: every browser of the queue whose position went down gets a
    /// `waiting` update; positions never go up while a browser stays connected. Returns the
    /// places the snapshot no longer lists (admitted, removed, or the queue emptied): the
    /// caller re-checks them against Redis, so a lost message can never strand a browser.
    pub fn apply_state(&self, s: &QueueState) -> Vec<PlaceId> {
        let mut gone = Vec::new();
        let mut inner = self.lock();
        let rising = inner
            .rising
            .get(&s.queue)
            .is_some_and(|until| *until > Instant::now());
        let Some(conns) = inner.queues.get_mut(&s.queue) else {
            return gone;
        };
        for (&place, slot) in conns.iter_mut() {
            // A pre-queue place is not in the line yet: it hears of the draw, not of positions.
            if slot.is_scheduled() {
                continue;
            }
            let Some(tx) = &slot.tx else { continue };
            let position = match s.standing(PlaceId(place).seq()) {
                Standing::At(p) if rising => p,
                Standing::At(p) => p.min(slot.position),
                Standing::Gone => {
                    if !slot.resyncing {
                        slot.resyncing = true;
                        gone.push(PlaceId(place));
                    }
                    continue;
                }
                Standing::Unknown => continue,
            };
            let ev = WaitingEvent {
                queue: s.queue.clone(),
                position,
                waiting: s.waiting.max(position),
                eta_seconds: eta_seconds(position, s.rate),
                as_of_ms: s.at_ms,
            };
            // Browsers hear again when their position (or ETA) changes; the line's length
            // rides along with that, so a burst of joins behind them costs no writes.
            tx.send_if_modified(|cur| match cur {
                Update::Waiting(w) => {
                    let moved = (w.position, w.eta_seconds) != (ev.position, ev.eta_seconds);
                    *w = ev;
                    moved
                }
                // A pending notice stays and carries the new position along.
                Update::Notice { waiting, .. } => {
                    let moved =
                        (waiting.position, waiting.eta_seconds) != (ev.position, ev.eta_seconds);
                    *waiting = ev;
                    moved
                }
                _ => false,
            });
            slot.position = position;
        }
        gone
    }

    /// A re-check found the place still waiting (or being admitted): check again when the next
    /// snapshot says it is gone.
    pub fn resync_done(&self, queue: &QueueId, place: PlaceId) {
        let mut inner = self.lock();
        if let Some(slot) = inner
            .queues
            .get_mut(queue)
            .and_then(|c| c.get_mut(&place.0))
        {
            slot.resyncing = false;
        }
    }

    /// Delivers admissions (made by the tick `trace` names, when traces are on). Returns how
    /// many went to browsers held here; the others are kept briefly in case their browser
    /// attaches here soon.
    pub fn admit(&self, queue: &QueueId, items: &[Admission], trace: Option<&Arc<str>>) -> usize {
        let rendered: Vec<_> = items
            .iter()
            .map(|a| Admitted::of(queue, a).traced(trace))
            .collect();
        let mut inner = self.lock();
        let mut n = 0;
        for (a, ev) in items.iter().zip(rendered) {
            inner.staged.remove(&(queue.clone(), a.place));
            n += usize::from(inner.admit_one(queue, a.place, ev));
        }
        n
    }

    /// Keeps tokens sent ahead of the tick expected to admit their places (bounded: beyond
    /// the cap they are not kept, and their admissions are looked up in Redis instead). Their
    /// events are rendered here, outside the lock and before the tick.
    pub fn stage(&self, queue: &QueueId, items: Vec<Admission>) {
        let at = Instant::now();
        let rendered: Vec<_> = items
            .into_iter()
            .map(|a| {
                let staged = Staged {
                    admitted: Admitted::of(queue, &a),
                    admitted_at_ms: a.admitted_at_ms,
                    expires_at_ms: a.expires_at_ms,
                    at,
                };
                (a.place, staged)
            })
            .collect();
        let mut inner = self.lock();
        if inner.staged.len() + rendered.len() > STAGED_CAP {
            // Make room from expired tokens before refusing fresh ones.
            inner.expire_staged(at);
        }
        for (place, staged) in rendered {
            if inner.staged.len() >= STAGED_CAP {
                break;
            }
            inner.staged.insert((queue.clone(), place), staged);
        }
    }

    /// Admits `places` with the tokens staged for them (admitted at `at_ms`, expiring at
    /// `exp_ms`, by the tick `trace` names). Returns the places held here whose token is not staged (over the cap,
    /// expired, or the `staged` message was lost from the stream): the caller fetches those
    /// admissions from Redis.
    pub fn admit_staged(
        &self,
        queue: &QueueId,
        at_ms: u64,
        exp_ms: u64,
        places: &[PlaceId],
        trace: Option<&Arc<str>>,
    ) -> Vec<PlaceId> {
        let mut inner = self.lock();
        let mut missing = Vec::new();
        for &place in places {
            match inner.staged.remove(&(queue.clone(), place)) {
                Some(s) if s.admitted_at_ms == at_ms && s.expires_at_ms == exp_ms => {
                    inner.admit_one(queue, place, s.admitted.traced(trace));
                }
                _ if inner.holds(queue, place) => missing.push(place),
                _ => {}
            }
        }
        missing
    }

    /// Drops expired orphans and staged tokens (called periodically).
    pub fn sweep_orphans(&self) {
        let now = Instant::now();
        let mut inner = self.lock();
        inner
            .orphans
            .retain(|_, v| now.duration_since(v.at) < ORPHAN_TTL);
        inner.expire_staged(now);
    }

    /// Ends every connection of a closed queue with `closed`.
    pub fn close_queue(&self, queue: &QueueId, reason: CloseReason) -> usize {
        let mut inner = self.lock();
        let places: Vec<u64> = inner
            .queues
            .get(queue)
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default();
        let update = Update::closed(queue, reason);
        for &p in &places {
            inner.deliver(queue, PlaceId(p), update.clone());
        }
        places.len()
    }

    /// Sends an operator's notice to every connection of `queue`. Each connection holds one
    /// unsent notice at most (a newer one replaces it); a pending admission or `closed` is
    /// never displaced, and a reserved connection (not streaming yet) gets none. Returns how
    /// many connections it went to.
    pub fn notify(&self, queue: &QueueId, message: &str) -> usize {
        let frame = Update::notice_frame(queue, message);
        let inner = self.lock();
        let Some(conns) = inner.queues.get(queue) else {
            return 0;
        };
        let mut sent = 0;
        for tx in conns.values().filter_map(|s| s.tx.as_ref()) {
            let took = tx.send_if_modified(|cur| match cur {
                Update::Waiting(w) => {
                    let waiting = w.clone();
                    *cur = Update::Notice {
                        notice: frame.clone(),
                        waiting,
                    };
                    true
                }
                Update::Notice { notice, .. } => {
                    *notice = frame.clone();
                    true
                }
                _ => false,
            });
            sent += usize::from(took);
        }
        sent
    }

    /// The connection `a` wrote `notice`: unless a newer update replaced it meanwhile, its
    /// pending update goes back to the plain `waiting` event, without waking the connection,
    /// so a later position update does not repeat the notice.
    pub fn notice_shown(&self, a: &Attached, notice: &Arc<str>) {
        let inner = self.lock();
        let Some(tx) = inner
            .queues
            .get(&a.queue)
            .and_then(|c| c.get(&a.place.0))
            .filter(|s| s.id == a.id)
            .and_then(|s| s.tx.as_ref())
        else {
            return;
        };
        tx.send_if_modified(|cur| {
            if let Update::Notice { notice: n, waiting } = cur {
                if Arc::ptr_eq(n, notice) {
                    let waiting = waiting.clone();
                    *cur = Update::Waiting(waiting);
                }
            }
            false
        });
    }

    /// Ends up to `max` connections without an event (draining), each with its own `retry:`
    /// from `retry_ms`. Returns how many were ended.
    pub fn end_some(&self, max: usize, mut retry_ms: impl FnMut() -> u64) -> usize {
        let mut inner = self.lock();
        let mut picked = Vec::new();
        'outer: for (q, conns) in inner.queues.iter() {
            for (&place, slot) in conns.iter() {
                if picked.len() >= max {
                    break 'outer;
                }
                if slot.tx.is_some() {
                    picked.push((q.clone(), place));
                }
            }
        }
        for (q, place) in &picked {
            let retry_ms = Some(retry_ms());
            inner.deliver(q, PlaceId(*place), Update::Ended { retry_ms });
        }
        picked.len()
    }

    /// A scheduled sale's draw ran: ends every pre-queue stream of `queue` without an event,
    /// each with its own `retry:` from `retry_ms`, so the browsers resume into their drawn
    /// places. Returns how many were ended.
    pub fn end_scheduled(&self, queue: &QueueId, mut retry_ms: impl FnMut() -> u64) -> usize {
        self.end_scheduled_with(queue, || Update::Ended {
            retry_ms: Some(retry_ms()),
        })
    }

    /// Ends every pre-queue stream of `queue` with the terminal update `make` gives each.
    fn end_scheduled_with(&self, queue: &QueueId, mut make: impl FnMut() -> Update) -> usize {
        let mut inner = self.lock();
        let picked: Vec<u64> = inner
            .queues
            .get(queue)
            .map(|conns| {
                conns
                    .iter()
                    .filter(|(_, s)| s.is_scheduled())
                    .map(|(&p, _)| p)
                    .collect()
            })
            .unwrap_or_default();
        for &p in &picked {
            inner.deliver(queue, PlaceId(p), make());
        }
        picked.len()
    }

    /// Queues with pre-queue streams held here.
    pub fn scheduled_queues(&self) -> Vec<QueueId> {
        self.lock()
            .queues
            .iter()
            .filter(|(_, conns)| conns.values().any(Slot::is_scheduled))
            .map(|(q, _)| q.clone())
            .collect()
    }

    /// Queues this gateway holds browsers of.
    pub fn queues(&self) -> Vec<QueueId> {
        self.lock().queues.keys().cloned().collect()
    }

    /// Lets positions in `queue` go up until `until`: after a Redis data loss, places come
    /// back gateway by gateway, and a snapshot taken before all were back showed positions
    /// too low.
    pub fn allow_rise(&self, queue: &QueueId, until: Instant) {
        let mut inner = self.lock();
        inner.rising.retain(|_, t| *t > Instant::now());
        inner.rising.insert(queue.clone(), until);
    }

    /// The places of `queue` held here, in the order of their last known positions (the
    /// place id breaks ties): the order they are put back in after a Redis data loss.
    /// Pre-queue places are not in line: [`Hub::scheduled_places`] has them.
    pub fn places_in_line_order(&self, queue: &QueueId) -> Vec<PlaceId> {
        let inner = self.lock();
        let mut places: Vec<(u64, u64)> = inner
            .queues
            .get(queue)
            .map(|slots| {
                slots
                    .iter()
                    .filter(|(_, s)| !s.is_scheduled())
                    .map(|(p, s)| (s.position, *p))
                    .collect()
            })
            .unwrap_or_default();
        places.sort_unstable();
        places.into_iter().map(|(_, p)| PlaceId(p)).collect()
    }
}

struct Slot {
    id: u64,
    /// `None` while reserved (the stream does not exist yet).
    tx: Option<watch::Sender<Update>>,
    /// A terminal update that arrived while reserved.
    pending: Option<Update>,
    position: u64,
    /// A re-check against Redis is under way (see [`Hub::apply_state`]).
    resyncing: bool,
}

impl Slot {
    /// A pre-queue stream: its current update is `scheduled`.
    fn is_scheduled(&self) -> bool {
        self.tx
            .as_ref()
            .is_some_and(|tx| matches!(*tx.borrow(), Update::Scheduled(_)))
    }
}

/// Admissions that arrived for places not held here (a browser between two connections).
/// Kept briefly, bounded.
struct Orphan {
    event: Arc<Admitted>,
    at: Instant,
}

const ORPHAN_TTL: Duration = Duration::from_secs(30);
const ORPHAN_CAP: usize = 100_000;

/// A token sent ahead of the tick that is expected to admit its place; shown to nobody until
/// the admission names the place. Kept briefly, bounded.
struct Staged {
    admitted: Arc<Admitted>,
    admitted_at_ms: u64,
    expires_at_ms: u64,
    at: Instant,
}

const STAGED_TTL: Duration = Duration::from_secs(30);
const STAGED_CAP: usize = 100_000;

#[derive(Default)]
struct Inner {
    queues: HashMap<QueueId, BTreeMap<u64, Slot>>,
    /// Queues whose positions may go up until then (see [`Hub::allow_rise`]).
    rising: HashMap<QueueId, Instant>,
    orphans: HashMap<(QueueId, PlaceId), Orphan>,
    staged: HashMap<(QueueId, PlaceId), Staged>,
    /// Slots held (reserved or attached); kept by `insert` and `remove_if` alone.
    held: u64,
}

impl Inner {
    /// Puts `slot` in place of any slot for `place`; returns the one it replaced.
    fn insert(&mut self, queue: &QueueId, place: PlaceId, slot: Slot) -> Option<Slot> {
        let old = self
            .queues
            .entry(queue.clone())
            .or_default()
            .insert(place.0, slot);
        if old.is_none() {
            self.held += 1;
        }
        old
    }

    /// Removes the slot for `place` if `take(slot)` says so.
    fn remove_if(
        &mut self,
        queue: &QueueId,
        place: PlaceId,
        take: impl FnOnce(&Slot) -> bool,
    ) -> Option<Slot> {
        let conns = self.queues.get_mut(queue)?;
        if !take(conns.get(&place.0)?) {
            return None;
        }
        let slot = conns.remove(&place.0)?;
        if conns.is_empty() {
            self.queues.remove(queue);
        }
        self.held -= 1;
        Some(slot)
    }

    fn remove(&mut self, queue: &QueueId, place: PlaceId) -> Option<Slot> {
        self.remove_if(queue, place, |_| true)
    }

    fn holds(&self, queue: &QueueId, place: PlaceId) -> bool {
        self.queues
            .get(queue)
            .is_some_and(|c| c.contains_key(&place.0))
    }

    fn expire_staged(&mut self, now: Instant) {
        self.staged
            .retain(|_, v| now.duration_since(v.at) < STAGED_TTL);
    }

    /// Delivers an admission: to the browser if held here, else kept as an orphan for a
    /// browser between two connections. `true` when held.
    fn admit_one(&mut self, queue: &QueueId, place: PlaceId, ev: Arc<Admitted>) -> bool {
        if self.deliver(queue, place, Update::Admitted(ev.clone())) {
            return true;
        }
        if self.orphans.len() < ORPHAN_CAP {
            self.orphans.insert(
                (queue.clone(), place),
                Orphan {
                    event: ev,
                    at: Instant::now(),
                },
            );
        }
        false
    }

    /// Delivers terminal update `u` to the slot for `place`: through its channel (and the slot
    /// is done), or kept as pending while it is only reserved. `false` when no slot holds it.
    fn deliver(&mut self, queue: &QueueId, place: PlaceId, u: Update) -> bool {
        let Some(slot) = self.queues.get_mut(queue).and_then(|c| c.get_mut(&place.0)) else {
            return false;
        };
        match &slot.tx {
            Some(tx) => {
                let _ = tx.send(u);
                self.remove(queue, place);
            }
            None => slot.pending = Some(u),
        }
        true
    }
}

mod draw_void;
#[cfg(test)]
mod tests;
