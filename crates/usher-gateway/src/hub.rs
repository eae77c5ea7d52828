//! The browsers this gateway holds, by queue and place, and what each should see next.
//!
//! Each connection owns a `watch` channel: a new update replaces an unsent one, so a slow
//! browser costs one pending update at most, never a growing buffer.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{
    eta_seconds, Admission, AdmittedEvent, ClosedEvent, QueueState, WaitingEvent,
};
use usher_core::position::Standing;

/// What a connection should send next.
#[derive(Debug, Clone, PartialEq)]
pub enum Update {
    Waiting(WaitingEvent),
    /// Terminal.
    Admitted(AdmittedEvent),
    /// Terminal.
    Closed(ClosedEvent),
    /// Terminal, without an event: a newer connection took the place over, or the gateway is
    /// shutting down. The browser reconnects (with its ticket) and resumes.
    Ended,
}

impl Update {
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Update::Waiting(_))
    }
}

struct Conn {
    id: u64,
    tx: watch::Sender<Update>,
    position: u64,
}

#[derive(Default)]
struct QueueConns {
    by_place: BTreeMap<u64, Conn>,
}

/// Admissions that arrived for places not (yet) attached here: a browser that is between its
/// join and its attach, or between two connections. Kept briefly, bounded.
struct Orphan {
    event: AdmittedEvent,
    at: Instant,
}

const ORPHAN_TTL: Duration = Duration::from_secs(30);
const ORPHAN_CAP: usize = 100_000;

/// Identifies one attached connection; pass it back to [`Hub::detach`].
#[derive(Debug, Clone)]
pub struct Attached {
    pub queue: QueueId,
    pub place: PlaceId,
    id: u64,
}

#[derive(Default)]
pub struct Hub {
    queues: Mutex<HashMap<QueueId, QueueConns>>,
    orphans: Mutex<HashMap<(QueueId, PlaceId), Orphan>>,
    next_id: AtomicU64,
    connections: AtomicU64,
}

impl Hub {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<QueueId, QueueConns>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn orphans(&self) -> std::sync::MutexGuard<'_, HashMap<(QueueId, PlaceId), Orphan>> {
        self.orphans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of browsers held.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Holds a browser for `place`. A connection already holding the place here is ended (the
    /// newest connection owns a place). When an admission for the place already arrived, the
    /// receiver starts with it.
    pub fn attach(
        &self,
        queue: &QueueId,
        place: PlaceId,
        first: WaitingEvent,
    ) -> (Attached, watch::Receiver<Update>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let orphan = self.orphans().remove(&(queue.clone(), place));
        if let Some(o) = orphan {
            let (_tx, rx) = watch::channel(Update::Admitted(o.event));
            let a = Attached {
                queue: queue.clone(),
                place,
                id,
            };
            return (a, rx);
        }
        let position = first.position;
        let (tx, rx) = watch::channel(Update::Waiting(first));
        let mut qs = self.lock();
        let conns = qs.entry(queue.clone()).or_default();
        if let Some(old) = conns.by_place.insert(place.0, Conn { id, tx, position }) {
            let _ = old.tx.send(Update::Ended);
        } else {
            self.connections.fetch_add(1, Ordering::Relaxed);
        }
        (
            Attached {
                queue: queue.clone(),
                place,
                id,
            },
            rx,
        )
    }

    /// Forgets a connection. Returns `true` when it still held its place (it ended on its own
    /// rather than through a terminal update or a newer connection).
    pub fn detach(&self, a: &Attached) -> bool {
        let mut qs = self.lock();
        let Some(conns) = qs.get_mut(&a.queue) else {
            return false;
        };
        let owned = conns.by_place.get(&a.place.0).is_some_and(|c| c.id == a.id);
        if owned {
            conns.by_place.remove(&a.place.0);
            self.connections.fetch_sub(1, Ordering::Relaxed);
            if conns.by_place.is_empty() {
                qs.remove(&a.queue);
            }
        }
        owned
    }

    fn take(&self, queue: &QueueId, place: PlaceId) -> Option<Conn> {
        let mut qs = self.lock();
        let conns = qs.get_mut(queue)?;
        let c = conns.by_place.remove(&place.0)?;
        self.connections.fetch_sub(1, Ordering::Relaxed);
        if conns.by_place.is_empty() {
            qs.remove(queue);
        }
        Some(c)
    }

    /// Applies a queue snapshot: every browser of the queue whose position went down gets a
    /// `waiting` update. Positions never go up while a browser stays connected.
    pub fn apply_state(&self, s: &QueueState) -> usize {
        let mut sent = 0;
        let mut qs = self.lock();
        let Some(conns) = qs.get_mut(&s.queue) else {
            return 0;
        };
        for (&place, c) in conns.by_place.iter_mut() {
            let position = match s.standing(place) {
                Standing::At(p) => p.min(c.position),
                Standing::Gone | Standing::Unknown => c.position,
            };
            let waiting = s.waiting.max(position);
            let ev = WaitingEvent {
                queue: s.queue.clone(),
                position,
                waiting,
                eta_seconds: eta_seconds(position, s.rate),
            };
            let changed = c.tx.send_if_modified(|cur| match cur {
                Update::Waiting(w) if *w != ev => {
                    *w = ev.clone();
                    true
                }
                _ => false,
            });
            c.position = position;
            sent += usize::from(changed);
        }
        sent
    }

    /// Delivers admissions. Returns how many went to browsers held here.
    pub fn admit(&self, queue: &QueueId, items: &[Admission]) -> usize {
        let mut n = 0;
        for a in items {
            let ev = AdmittedEvent::new(queue.clone(), a);
            match self.take(queue, a.place) {
                Some(c) => {
                    let _ = c.tx.send(Update::Admitted(ev));
                    n += 1;
                }
                None => self.keep_orphan(queue, a.place, ev),
            }
        }
        n
    }

    fn keep_orphan(&self, queue: &QueueId, place: PlaceId, event: AdmittedEvent) {
        let mut o = self.orphans();
        if o.len() >= ORPHAN_CAP {
            let now = Instant::now();
            o.retain(|_, v| now.duration_since(v.at) < ORPHAN_TTL);
            if o.len() >= ORPHAN_CAP {
                return;
            }
        }
        o.insert(
            (queue.clone(), place),
            Orphan {
                event,
                at: Instant::now(),
            },
        );
    }

    /// Drops expired orphans (called periodically).
    pub fn sweep_orphans(&self) {
        let now = Instant::now();
        self.orphans()
            .retain(|_, v| now.duration_since(v.at) < ORPHAN_TTL);
    }

    /// Ends one connection with `update` (e.g. `closed` after leaving, or `Ended` when another
    /// gateway took the place over). Returns whether it was held here.
    pub fn end(&self, queue: &QueueId, place: PlaceId, update: Update) -> bool {
        match self.take(queue, place) {
            Some(c) => {
                let _ = c.tx.send(update);
                true
            }
            None => false,
        }
    }

    /// Ends every connection of a closed queue with `closed`.
    pub fn close_queue(&self, queue: &QueueId, reason: &str) -> usize {
        let conns = self.lock().remove(queue);
        let Some(conns) = conns else { return 0 };
        let n = conns.by_place.len();
        self.connections.fetch_sub(n as u64, Ordering::Relaxed);
        for c in conns.by_place.into_values() {
            let _ = c.tx.send(Update::Closed(ClosedEvent {
                queue: queue.clone(),
                reason: reason.to_owned(),
            }));
        }
        n
    }

    /// Ends every connection without an event (shutdown): browsers reconnect elsewhere.
    pub fn end_all(&self) -> usize {
        let all: Vec<QueueConns> = self.lock().drain().map(|(_, v)| v).collect();
        let mut n = 0;
        for conns in all {
            for c in conns.by_place.into_values() {
                let _ = c.tx.send(Update::Ended);
                n += 1;
            }
        }
        self.connections.fetch_sub(n as u64, Ordering::Relaxed);
        n
    }

    /// Queues this gateway holds browsers of.
    pub fn queues(&self) -> Vec<QueueId> {
        self.lock().keys().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> QueueId {
        QueueId::new("q").expect("valid")
    }

    fn waiting(position: u64) -> WaitingEvent {
        WaitingEvent {
            queue: q(),
            position,
            waiting: position,
            eta_seconds: 0,
        }
    }

    #[test]
    fn newest_connection_owns_the_place() {
        let hub = Hub::new();
        let (a1, rx1) = hub.attach(&q(), PlaceId(5), waiting(5));
        let (a2, _rx2) = hub.attach(&q(), PlaceId(5), waiting(5));
        assert_eq!(*rx1.borrow(), Update::Ended);
        assert!(
            !hub.detach(&a1),
            "the old connection no longer owns the place"
        );
        assert_eq!(hub.connections(), 1);
        assert!(hub.detach(&a2));
        assert_eq!(hub.connections(), 0);
    }

    #[test]
    fn positions_never_increase() {
        let hub = Hub::new();
        let (_a, rx) = hub.attach(&q(), PlaceId(10), waiting(3));
        let mut s = QueueState {
            queue: q(),
            waiting: 9,
            rate: 1.0,
            runs: vec![(1, 9), (10, 1)],
            ..Default::default()
        };
        hub.apply_state(&s);
        assert!(matches!(&*rx.borrow(), Update::Waiting(w) if w.position == 3));
        s.runs = vec![(10, 1)];
        hub.apply_state(&s);
        assert!(
            matches!(&*rx.borrow(), Update::Waiting(w) if w.position == 1 && w.eta_seconds == 1)
        );
    }

    #[test]
    fn admissions_for_unattached_places_wait_briefly() {
        let hub = Hub::new();
        let adm = Admission {
            place: PlaceId(4),
            token: "t".into(),
            admitted_at_ms: 1,
            expires_at_ms: 2,
        };
        assert_eq!(hub.admit(&q(), &[adm]), 0);
        let (_a, rx) = hub.attach(&q(), PlaceId(4), waiting(1));
        assert!(matches!(&*rx.borrow(), Update::Admitted(e) if e.token == "t"));
    }
}
