//! The hub's storage, behind its one lock: a slot per place held (reserved or attached), the
//! admissions waiting for a browser between two connections, and the tokens staged ahead of
//! their tick. Every change to the count of places held goes through `insert` and
//! `remove_if`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use usher_core::ids::{PlaceId, QueueId};
use usher_core::lanes::LaneName;

use super::held_key::HeldKey;
#[cfg(doc)]
use super::Hub;
use crate::latest;
use crate::update::{Admitted, Update};

pub(super) struct Slot {
    pub(super) id: u64,
    /// `None` while reserved (the stream does not exist yet).
    pub(super) tx: Option<latest::Sender<Update>>,
    /// A terminal update that arrived while reserved.
    pub(super) pending: Option<Update>,
    pub(super) position: u64,
    /// A re-check against Redis is under way (see [`Hub::apply_state`]).
    pub(super) resyncing: bool,
    /// Another gateway said it took the place over while this connection was being set up:
    /// checked once it is attached ([`Hub::taken_over_connection`]).
    pub(super) check_takeover: bool,
    /// The browser key the place was proven with (a binding queue's; `None` elsewhere): put
    /// back with the place after a Redis data loss.
    pub(super) key: Option<HeldKey>,
    /// The place's lane when it is not the queue's default lane (usher_core::lanes): its
    /// positions are read off that lane's snapshot. Set from its first `waiting` event.
    pub(super) lane: Option<LaneName>,
    /// Places the whole queue admits per place of this place's lane, as of the last snapshot
    /// (1 without lanes: [`usher_core::messages::QueueState::lane_scale`]): an inventory report
    /// pushed between snapshots counts the places every lane admits ahead of this one.
    pub(super) lane_scale: f64,
}

impl Slot {
    /// A pre-queue stream: its current update is `scheduled`.
    pub(super) fn is_scheduled(&self) -> bool {
        self.tx
            .as_ref()
            .is_some_and(|tx| matches!(*tx.borrow(), Update::Scheduled(_)))
    }
}

/// Admissions that arrived for places not held here (a browser between two connections).
/// Kept briefly, bounded.
pub(super) struct Orphan {
    pub(super) event: Arc<Admitted>,
    pub(super) at: Instant,
}

pub(super) const ORPHAN_TTL: Duration = Duration::from_secs(30);
const ORPHAN_CAP: usize = 100_000;

/// A token sent ahead of the tick that is expected to admit its place; shown to nobody until
/// the admission names the place. Kept briefly, bounded.
pub(super) struct Staged {
    pub(super) admitted: Arc<Admitted>,
    pub(super) admitted_at_ms: u64,
    pub(super) expires_at_ms: u64,
    pub(super) at: Instant,
}

const STAGED_TTL: Duration = Duration::from_secs(30);
pub(super) const STAGED_CAP: usize = 100_000;

#[derive(Default)]
pub(super) struct Inner {
    pub(super) queues: HashMap<QueueId, BTreeMap<u64, Slot>>,
    /// Queues whose positions may go up until then (see [`Hub::allow_rise`]).
    pub(super) rising: HashMap<QueueId, Instant>,
    pub(super) orphans: HashMap<(QueueId, PlaceId), Orphan>,
    pub(super) staged: HashMap<(QueueId, PlaceId), Staged>,
    /// Slots held (reserved or attached); kept by `insert` and `remove_if` alone.
    pub(super) held: u64,
}

impl Inner {
    /// Puts `slot` in place of any slot for `place`; returns the one it replaced.
    pub(super) fn insert(&mut self, queue: &QueueId, place: PlaceId, slot: Slot) -> Option<Slot> {
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
    pub(super) fn remove_if(
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

    pub(super) fn remove(&mut self, queue: &QueueId, place: PlaceId) -> Option<Slot> {
        self.remove_if(queue, place, |_| true)
    }

    pub(super) fn holds(&self, queue: &QueueId, place: PlaceId) -> bool {
        self.queues
            .get(queue)
            .is_some_and(|c| c.contains_key(&place.0))
    }

    pub(super) fn expire_staged(&mut self, now: Instant) {
        self.staged
            .retain(|_, v| now.duration_since(v.at) < STAGED_TTL);
    }

    /// Delivers an admission: to the browser if held here, else kept as an orphan for a
    /// browser between two connections. `true` when held.
    pub(super) fn admit_one(&mut self, queue: &QueueId, place: PlaceId, ev: Arc<Admitted>) -> bool {
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
    pub(super) fn deliver(&mut self, queue: &QueueId, place: PlaceId, u: Update) -> bool {
        let Some(slot) = self.queues.get_mut(queue).and_then(|c| c.get_mut(&place.0)) else {
            return false;
        };
        match &slot.tx {
            Some(tx) => {
                tx.send(u);
                self.remove(queue, place);
            }
            None => slot.pending = Some(u),
        }
        true
    }
}
