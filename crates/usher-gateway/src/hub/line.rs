//! What the browsers of a queue see as its line moves: position snapshots, operators'
//! notices, a closed queue, a drain, and the end of a scheduled sale's pre-queue.

use std::sync::Arc;
use std::time::Instant;

use crate::position::{Standing, Standings};
use usher_core::binding::Thumbprint;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::inventory::InventoryOutlook;
use usher_core::lanes::LaneName;
use usher_core::messages::{eta_seconds, CloseReason, QueueState, WaitingEvent};

use super::slots::Slot;
use super::{Attached, Hub};
use crate::update::Update;

/// What a snapshot tells one browser: the numbers of its next `waiting` event.
struct News {
    position: u64,
    waiting: u64,
    eta_seconds: Option<u64>,
    as_of_ms: u64,
    inventory: Option<InventoryOutlook>,
}

impl News {
    /// Writes the news into the browser's pending `waiting` event, in place: the event already
    /// names the queue (and the lane, which a place keeps), so a snapshot allocates nothing
    /// per browser. Returns whether the browser should hear it (its position, ETA or
    /// inventory outlook changed).
    fn apply(self, w: &mut WaitingEvent, lane: &Option<LaneName>) -> bool {
        let moved = (w.position, w.eta_seconds) != (self.position, self.eta_seconds)
            || w.inventory != self.inventory;
        w.position = self.position;
        w.waiting = self.waiting;
        w.eta_seconds = self.eta_seconds;
        w.as_of_ms = self.as_of_ms;
        w.inventory = self.inventory;
        if w.lane != *lane {
            w.lane.clone_from(lane);
        }
        moved
    }
}

impl Hub {
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
        // Lanes: each lane's own snapshot, for the places held in it (the default lane's
        // places read the top-level one, `s` itself).
        let views: Vec<(&LaneName, QueueState)> = s
            .lanes
            .iter()
            .filter_map(|l| s.lane_view(&l.name).map(|v| (&l.name, v)))
            .collect();
        let whole = s;
        for (&place, slot) in conns.iter_mut() {
            let s = slot
                .lane
                .as_ref()
                .and_then(|lane| views.iter().find(|(name, _)| *name == lane))
                .map_or(s, |(_, v)| v);
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
            let news = News {
                position,
                waiting: s.waiting.max(position),
                eta_seconds: eta_seconds(position, s.rate),
                as_of_ms: s.at_ms,
                inventory: s
                    .inventory
                    .map(|i| i.outlook(whole.admitted_before(position, s.rate))),
            };
            // Browsers hear again when their position (or ETA, or inventory outlook) changes;
            // the line's length rides along with that, so a burst of joins behind them costs
            // no writes. A pending notice stays and carries the new position along.
            tx.send_if_modified(|cur| match cur {
                Update::Waiting(w) | Update::Notice { waiting: w, .. } => news.apply(w, &slot.lane),
                _ => false,
            });
            slot.position = position;
            slot.lane_scale = whole.lane_scale(s.rate);
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

    /// Ends every connection of a closed queue with `closed`.
    pub fn close_queue(&self, queue: &QueueId, reason: CloseReason) -> usize {
        self.close_queue_with(queue, reason, None)
    }

    /// Ends every connection of a closed queue with `closed`, carrying the operator's text
    /// when there is one (an ended sale).
    pub fn close_queue_with(
        &self,
        queue: &QueueId,
        reason: CloseReason,
        message: Option<String>,
    ) -> usize {
        let mut inner = self.lock();
        let places: Vec<u64> = inner
            .queues
            .get(queue)
            .map(|c| c.keys().copied().collect())
            .unwrap_or_default();
        let update = Update::closed_with(queue, reason, message);
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
        self.announce(queue, Update::notice_frame(queue, message))
    }

    /// Sends a rendered frame without an `id:` line (a notice, a `status`) to every
    /// connection of `queue`, as [`Hub::notify`] does.
    pub fn announce(&self, queue: &QueueId, frame: Arc<str>) -> usize {
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
    pub(super) fn end_scheduled_with(
        &self,
        queue: &QueueId,
        mut make: impl FnMut() -> Update,
    ) -> usize {
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

    /// Lets positions in `queue` go up until `until`: after a Redis data loss, places come
    /// back gateway by gateway, and a snapshot taken before all were back showed positions
    /// too low.
    pub fn allow_rise(&self, queue: &QueueId, until: Instant) {
        let mut inner = self.lock();
        inner.rising.retain(|_, t| *t > Instant::now());
        inner.rising.insert(queue.clone(), until);
    }

    /// The places of `queue` held here, in the order of their last known positions (the
    /// place id breaks ties), each with the browser key it was proven with (a binding
    /// queue's): the order they are put back in after a Redis data loss, with their keys.
    /// Pre-queue places are not in line: [`Hub::scheduled_places`] has them.
    pub fn places_in_line_order(&self, queue: &QueueId) -> Vec<(PlaceId, Option<Thumbprint>)> {
        let inner = self.lock();
        let mut places: Vec<(u64, u64, Option<Thumbprint>)> = inner
            .queues
            .get(queue)
            .map(|slots| {
                slots
                    .iter()
                    .filter(|(_, s)| !s.is_scheduled())
                    .map(|(p, s)| (s.position, *p, s.key.as_ref().and_then(|k| k.thumbprint())))
                    .collect()
            })
            .unwrap_or_default();
        places.sort_unstable_by_key(|&(position, p, _)| (position, p));
        places
            .into_iter()
            .map(|(_, p, key)| (PlaceId(p), key))
            .collect()
    }
}
