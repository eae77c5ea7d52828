//! The browsers this gateway holds, by queue and place, and what each should see next.
//!
//! Each connection owns a channel ([`crate::latest`]): a new update replaces an unsent one, so a slow
//! browser costs one pending update at most, never a growing buffer.
//!
//! A place is *reserved* before the Redis call that resumes it (or right after the call that
//! takes it) and *attached* once its stream exists. The reservation takes ownership from any
//! older connection for the same place at once, so that connection's disconnect can no longer
//! mark the place away. One lock guards connections and orphaned admissions together, so an
//! admission can never slip between "not attached yet" and "attached".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::latest;
use usher_core::binding::Thumbprint;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::CloseReason;

use crate::update::Update;

use held_key::HeldKey;
use slots::{Inner, Slot};

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
    /// and can no longer release it. `key` is the browser key the place was proven with (a
    /// binding queue's), kept while the place is held ([`Hub::held_key`]).
    pub fn reserve(
        &self,
        queue: &QueueId,
        place: PlaceId,
        key: Option<&Thumbprint>,
    ) -> Reservation {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut inner = self.lock();
        let slot = Slot {
            id,
            tx: None,
            pending: None,
            position: u64::MAX,
            resyncing: false,
            check_takeover: false,
            key: key.and_then(HeldKey::of),
            lane: None,
            lane_scale: 1.0,
        };
        if let Some(tx) = inner.insert(queue, place, slot).and_then(|old| old.tx) {
            tx.send(Update::closed(queue, CloseReason::ResumedElsewhere));
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

    /// The browser key `place` was proven with, while a connection here holds it (a binding
    /// queue's): what the gateway checks a proof against when Redis lost the key.
    pub fn held_key(&self, queue: &QueueId, place: PlaceId) -> Option<Thumbprint> {
        let inner = self.lock();
        inner
            .queues
            .get(queue)?
            .get(&place.0)?
            .key
            .as_ref()?
            .thumbprint()
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
    ) -> Option<(Attached, latest::Receiver<Update>)> {
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
            let (_tx, rx) = latest::channel(t);
            return Some((a, rx));
        }
        slot.position = match &first {
            Update::Waiting(w) | Update::Notice { waiting: w, .. } => w.position,
            _ => u64::MAX,
        };
        if let Update::Waiting(w) | Update::Notice { waiting: w, .. } = &first {
            slot.lane = w.lane.clone();
        }
        let (tx, rx) = latest::channel(first);
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

    /// The connection holding `place` here now, which another gateway says it took the place
    /// over from: to end it later with [`Hub::finish_connection`] once Redis confirms, and not
    /// a newer one that takes the place over meanwhile.
    ///
    /// A connection still being set up is not named: its resume may not have reached Redis
    /// yet, so Redis cannot tell whether it came before the other gateway's or after it (a
    /// browser back here within moments would have its new stream ended). It is marked
    /// instead, and asked about again once attached ([`Hub::take_takeover_check`]), when its
    /// resume has run and Redis's holder says which came last.
    pub fn taken_over_connection(&self, queue: &QueueId, place: PlaceId) -> Option<ConnectionId> {
        let mut inner = self.lock();
        let slot = inner.queues.get_mut(queue)?.get_mut(&place.0)?;
        if slot.tx.is_none() {
            slot.check_takeover = true;
            return None;
        }
        Some(ConnectionId(slot.id))
    }

    /// Whether a takeover came for connection `a` while it was being set up
    /// ([`Hub::taken_over_connection`]): then it must be checked now. Clears the mark.
    pub fn take_takeover_check(&self, a: &Attached) -> bool {
        let mut inner = self.lock();
        inner
            .queues
            .get_mut(&a.queue)
            .and_then(|c| c.get_mut(&a.place.0))
            .filter(|s| s.id == a.id)
            .is_some_and(|s| std::mem::take(&mut s.check_takeover))
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

    /// Queues this gateway holds browsers of.
    pub fn queues(&self) -> Vec<QueueId> {
        self.lock().queues.keys().cloned().collect()
    }
}

mod admissions;
mod door;
mod draw_void;
mod held_key;
mod inventory;
mod line;
mod slots;
#[cfg(test)]
mod tests;
