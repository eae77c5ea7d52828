//! The open door (`usher_core::door`; a queue's `on_outage: "open"`): what this gateway does
//! when it cannot reach Redis.
//!
//! * Every `state` of such a queue carries its door pass: the door tokens the dispatcher
//!   signed for the current and the coming window, the queue's rate and the live gateways.
//!   [`Door::learn`] keeps the newest per queue (a `state` without one, `hold`, forgets it).
//! * Anything that gets an answer from Redis says so ([`Door::reached`]): the heartbeat, the
//!   stream reads, this module's own writes.
//! * Once Redis has not answered for the queue's `door_after_seconds` (at least three
//!   heartbeats, so a slow heartbeat alone never opens it), [`Door::step`] (every 20 ms, from
//!   `crate::door_tasks`) lets the waiting browsers held here through, lowest place id first,
//!   at the queue's rate divided by the live gateways it last knew (the first at once), each
//!   with an `admitted` event carrying the current window's door token and `"door": true`.
//!   Without a token for now (the outage outlasted the windows signed ahead) nobody is let
//!   through. Gateways never mint.
//! * When Redis answers again the door closes. `crate::door_tasks::record` takes the places
//!   let through out of the line (tried all along, so they leave it as soon as Redis is back,
//!   before the dispatcher could admit them again) and records the period
//!   (`Store::close_door`): the admin API and the dashboard show it. Everyone else keeps
//!   their place exactly.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use usher_core::door::{DoorPass, DoorPeriod};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{AdmittedEvent, QueueState};
use usher_core::time::{now_ms, rfc3339_ms};

use crate::hub::Hub;
use crate::metrics;
use crate::update::Admitted;

/// How often the door is looked at (`crate::door_tasks`): the spacing of the browsers let
/// through is this fine.
pub(crate) const DOOR_STEP: Duration = Duration::from_millis(20);
/// How often the places let through are written to Redis (tried while it is away too).
pub(crate) const RECORD_STEP: Duration = Duration::from_millis(100);
/// The door waits at least this many heartbeats without Redis, whatever the queue's setting.
pub(crate) const MIN_HEARTBEATS: u32 = 3;

/// The door's state: the passes learnt, when Redis last answered, the periods.
pub(crate) struct Door {
    inner: Mutex<Inner>,
}

struct Inner {
    /// When Redis last answered this gateway.
    reached: Instant,
    /// Each queue's newest pass, with the snapshot time it came with.
    passes: HashMap<QueueId, (u64, DoorPass)>,
    /// Each queue's period, open or closed and not yet recorded.
    periods: HashMap<QueueId, Period>,
}

/// One queue's door period on this gateway.
struct Period {
    opened_ms: u64,
    opened: Instant,
    /// `None` while open.
    closed_ms: Option<u64>,
    /// Of the rate's allowance since the door opened, how much is spent (let through, or
    /// lapsed while nobody was waiting: an idle moment banks nothing).
    spent: u64,
    /// Browsers let through in this period.
    through: u64,
    /// Places let through and not yet taken out of the line in Redis.
    unwritten: Vec<PlaceId>,
}

impl Door {
    pub(crate) fn new() -> Self {
        Self {
            inner: Mutex::new(Inner {
                reached: Instant::now(),
                passes: HashMap::new(),
                periods: HashMap::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Redis answered just now.
    pub(crate) fn reached(&self) {
        self.lock().reached = Instant::now();
    }

    /// Keeps `s`'s door pass, unless a newer snapshot's is kept already; a snapshot without
    /// one (the queue holds in an outage) forgets the queue's.
    pub(crate) fn learn(&self, s: &QueueState) {
        let mut inner = self.lock();
        match &s.door {
            Some(pass) => {
                let newer = inner
                    .passes
                    .get(&s.queue)
                    .is_none_or(|(at, _)| *at <= s.at_ms);
                if newer {
                    inner
                        .passes
                        .insert(s.queue.clone(), (s.at_ms, pass.clone()));
                }
            }
            None => {
                inner.passes.remove(&s.queue);
            }
        }
    }
}

impl Door {
    /// How many queues' doors are open now (`usher_door_open`).
    pub(crate) fn open_count(&self) -> usize {
        self.lock()
            .periods
            .values()
            .filter(|p| p.closed_ms.is_none())
            .count()
    }

    /// For `/readyz?verbose`: the queues whose door this gateway could open (it holds their
    /// door tokens) and those whose door is open now, each sorted, and the browsers per second
    /// each door would let through here (0 while the queue admits nobody: paused, or its
    /// reported inventory taken).
    pub(crate) fn report(&self) -> serde_json::Value {
        let inner = self.lock();
        let shares: serde_json::Map<String, serde_json::Value> = inner
            .passes
            .iter()
            .map(|(q, (_, p))| (q.as_str().to_owned(), serde_json::json!(p.share())))
            .collect();
        let mut ready: Vec<&str> = inner.passes.keys().map(QueueId::as_str).collect();
        let mut open: Vec<&str> = inner
            .periods
            .iter()
            .filter(|(_, p)| p.closed_ms.is_none())
            .map(|(q, _)| q.as_str())
            .collect();
        ready.sort_unstable();
        open.sort_unstable();
        serde_json::json!({ "ready": ready, "open": open, "share_per_second": shares })
    }
}

impl Door {
    /// One look at every door: open, let through, or close. `least`: the shortest silence that
    /// opens a door (three heartbeats).
    pub(crate) fn step(&self, hub: &Hub, least: Duration) {
        // Queues with browsers held here: a door opens only where someone could go through it.
        let held = hub.queues();
        let mut inner = self.lock();
        let silent = inner.reached.elapsed();
        let now = now_ms();
        let Inner {
            passes, periods, ..
        } = &mut *inner;
        for (q, (_, pass)) in passes.iter() {
            let threshold = Duration::from_millis(pass.after_ms).max(least);
            let open = periods.get(q).is_some_and(|p| p.closed_ms.is_none());
            if silent < threshold {
                if open {
                    if let Some(p) = periods.get_mut(q) {
                        p.closed_ms = Some(now);
                        tracing::warn!(queue = %q, admitted = p.through, open_for_ms = now.saturating_sub(p.opened_ms), "redis answers again: the open door closes");
                    }
                }
                continue;
            }
            if !open {
                if !held.contains(q) {
                    continue;
                }
                if periods.contains_key(q) {
                    // The last period is not recorded yet (Redis went away again at once): the
                    // door stays shut until it is, so periods never mix.
                    continue;
                }
                periods.insert(
                    q.clone(),
                    Period {
                        opened_ms: now,
                        opened: Instant::now(),
                        closed_ms: None,
                        spent: 0,
                        through: 0,
                        unwritten: Vec::new(),
                    },
                );
                metrics::door_opened();
                tracing::warn!(queue = %q, silent_ms = silent.as_millis() as u64, share_per_second = pass.share(), "redis unreachable past door_after_seconds: the door opens");
            }
            let Some(p) = periods.get_mut(q) else {
                continue;
            };
            let Some(token) = pass.token_at(now) else {
                continue;
            };
            let share = pass.share();
            if share <= 0.0 {
                continue;
            }
            // The first at once, then `share` per second.
            let allowed = 1 + (p.opened.elapsed().as_secs_f64() * share).floor() as u64;
            let due = allowed.saturating_sub(p.spent) as usize;
            if due == 0 {
                continue;
            }
            let event = Admitted::new(AdmittedEvent {
                door: true,
                ..AdmittedEvent::of_token(q.clone(), &token.token, now, token.until_ms)
            });
            let through = hub.let_through(q, due, &event);
            // Fewer waiting than due: the rest of the allowance lapses (the rate bounds the door
            // at every moment; nobody arriving later gets a burst of it).
            p.spent = if through.len() < due {
                allowed
            } else {
                p.spent + through.len() as u64
            };
            if through.is_empty() {
                continue;
            }
            p.through += through.len() as u64;
            metrics::door_admitted(through.len() as u64);
            tracing::info!(queue = %q, n = through.len(), first = %through[0], "let through the open door");
            p.unwritten.extend(through);
        }
    }
}

/// What one write to Redis carries for a queue (`Store::close_door`).
pub(crate) struct Write {
    pub queue: QueueId,
    pub places: Vec<PlaceId>,
    pub period: Option<DoorPeriod>,
}

impl Door {
    /// The writes due: each queue's unwritten places, and its period once closed; `index` is
    /// this gateway's registry index, which the period names.
    pub(crate) fn pending(&self, index: u16) -> Vec<Write> {
        let inner = self.lock();
        inner
            .periods
            .iter()
            .filter(|(_, p)| !p.unwritten.is_empty() || p.closed_ms.is_some())
            .map(|(q, p)| Write {
                queue: q.clone(),
                places: p.unwritten.clone(),
                period: p.closed_ms.map(|closed| DoorPeriod {
                    gateway: index,
                    opened_at: rfc3339_ms(p.opened_ms),
                    closed_at: rfc3339_ms(closed),
                    admitted: p.through,
                }),
            })
            .collect()
    }

    /// `w` is in Redis: its places leave the unwritten list, and a recorded period is done.
    pub(crate) fn written(&self, w: &Write) {
        let mut inner = self.lock();
        let done = match inner.periods.get_mut(&w.queue) {
            Some(p) => {
                p.unwritten.retain(|x| !w.places.contains(x));
                w.period.is_some()
            }
            None => false,
        };
        if done {
            inner.periods.remove(&w.queue);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use usher_core::door::DoorToken;

    fn state(at_ms: u64, door: Option<f64>) -> QueueState {
        QueueState {
            at_ms,
            door: door.map(|rate| DoorPass {
                after_ms: 1000,
                rate,
                gateways: 1,
                tokens: vec![DoorToken {
                    from_ms: 0,
                    until_ms: 1,
                    token: "t".into(),
                }],
            }),
            ..QueueState::empty(QueueId::new("q").expect("valid"))
        }
    }

    fn rate(door: &Door) -> Option<f64> {
        let q = QueueId::new("q").expect("valid");
        door.lock().passes.get(&q).map(|(_, p)| p.rate)
    }

    /// The newest snapshot's pass is kept; an older one arriving late changes nothing; a
    /// snapshot without one (the queue holds) forgets it.
    #[test]
    fn the_newest_pass_wins_and_hold_forgets_it() {
        let door = Door::new();
        door.learn(&state(10, Some(5.0)));
        door.learn(&state(20, Some(8.0)));
        door.learn(&state(15, Some(1.0)));
        assert_eq!(rate(&door), Some(8.0));
        door.learn(&state(30, None));
        assert_eq!(rate(&door), None);
    }
}
