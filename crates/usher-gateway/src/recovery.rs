//! After Redis lost data (restarted empty, flushed, a Cluster shard replaced): which queues'
//! places this gateway must put back, and when to give up on a queue.
//!
//! A gateway tells a loss from a removal by the queue's epoch (`Interest::Open { epoch }`),
//! which is set when a queue is configured and changes only when it is configured anew: a
//! queue that vanished (`Interest::Unknown`) or came back with another epoch was lost, and
//! the browsers held here keep their places. Once the queue is configured again (by the
//! dispatcher's `USHER_QUEUES_FILE`, or an operator) the heartbeat puts their places back
//! (`Store::restore_places`), in the order of their last known positions; a queue that stays
//! unknown past the restore window ends its browsers' streams with `place_lost`. After the
//! process had to register again (its registry index was taken), every queue is restored, so
//! its places name the new index.
//!
//! The state is per queue: a Cluster shard can lose some queues and keep the others.
//!
//! It also keeps the commitment of each pending draw whose pre-queue browsers are held here,
//! as a heartbeat last read it: after a loss, it tells whether the draw the queue came back
//! with is the one these browsers joined (`lua/restore_pre.lua`).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use usher_core::ids::QueueId;
use usher_core::messages::CloseReason;
use usher_core::store::Interest;

/// What the heartbeat does for a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    Nothing,
    /// Put the places held here back (the queue is configured again).
    Restore,
    /// End the streams of the queue's browsers for this reason.
    Close(CloseReason),
}

#[derive(Debug, Default)]
struct Watch {
    /// The queue's epoch when last seen open (`None`: not seen, or configured before epochs).
    epoch: Option<u64>,
    /// Since when the queue has been missing from Redis.
    lost_since: Option<Instant>,
    /// Restore at the next heartbeat, whatever the epoch says.
    restore: bool,
    /// When the places were last put back.
    restored_at: Option<Instant>,
}

/// A place found gone this soon after its queue was restored may have been read before the
/// restore: it is checked again rather than given up.
const RECENTLY_RESTORED: Duration = Duration::from_secs(10);

/// Which queues this gateway watches for a loss.
pub(crate) struct Recovery {
    window: Duration,
    queues: Mutex<HashMap<QueueId, Watch>>,
    /// The commitment of each pending draw seen, by queue.
    draws: Mutex<HashMap<QueueId, String>>,
}

impl Recovery {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            queues: Mutex::default(),
            draws: Mutex::default(),
        }
    }

    /// A heartbeat read `q`'s pending draw: `commitment` is the one its pre-queue joined.
    pub(crate) fn saw_draw(&self, q: &QueueId, commitment: String) {
        let mut draws = self.draws.lock().unwrap_or_else(|p| p.into_inner());
        draws.insert(q.clone(), commitment);
    }

    /// The commitment of `q`'s pending draw as last seen, if any.
    pub(crate) fn seen_draw(&self, q: &QueueId) -> Option<String> {
        let draws = self.draws.lock().unwrap_or_else(|p| p.into_inner());
        draws.get(q).cloned()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<QueueId, Watch>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What to do about `q`, which the heartbeat found as `interest` at `now`.
    pub(crate) fn observe(&self, q: &QueueId, interest: Interest, now: Instant) -> Action {
        let mut queues = self.lock();
        match interest {
            Interest::Closed(reason) => {
                queues.remove(q);
                Action::Close(reason)
            }
            Interest::Unknown => {
                let w = queues.entry(q.clone()).or_default();
                let since = *w.lost_since.get_or_insert_with(|| {
                    tracing::warn!(queue = %q, window_secs = self.window.as_secs(), "queue missing from redis (data lost?): its browsers keep their places until it is configured again");
                    now
                });
                if now.duration_since(since) > self.window {
                    queues.remove(q);
                    Action::Close(CloseReason::PlaceLost)
                } else {
                    Action::Nothing
                }
            }
            Interest::Open { epoch } => {
                let w = queues.entry(q.clone()).or_default();
                let changed = w.epoch.is_some() && w.epoch != epoch;
                if w.restore || w.lost_since.is_some() || changed {
                    Action::Restore
                } else {
                    w.epoch = epoch;
                    Action::Nothing
                }
            }
        }
    }

    /// The places of `q` are back; `epoch` is the queue's now.
    pub(crate) fn restored(&self, q: &QueueId, epoch: Option<u64>) {
        self.lock().insert(
            q.clone(),
            Watch {
                epoch,
                restored_at: Some(Instant::now()),
                ..Watch::default()
            },
        );
    }

    /// `q` is still not configured: keep waiting (within the window).
    pub(crate) fn still_missing(&self, q: &QueueId, now: Instant) {
        self.lock()
            .entry(q.clone())
            .or_default()
            .lost_since
            .get_or_insert(now);
    }

    /// Restore every queue watched at the next heartbeat (this process registered again).
    pub(crate) fn restore_all(&self) {
        for w in self.lock().values_mut() {
            w.restore = true;
        }
    }

    /// Whether a place of `q` that Redis does not know was lost with the queue rather than
    /// removed: the queue's epoch is not the one seen before (`current`), a loss is being
    /// handled, or the queue was restored a moment ago (the place may have been read before).
    /// If so, the queue is restored (again: it changes nothing for places already back) at
    /// the next heartbeat.
    pub(crate) fn lost_with_queue(&self, q: &QueueId, current: Option<u64>) -> bool {
        let mut queues = self.lock();
        let Some(w) = queues.get_mut(q) else {
            return false;
        };
        let recent = w
            .restored_at
            .is_some_and(|t| t.elapsed() < RECENTLY_RESTORED);
        let lost = w.restore
            || w.lost_since.is_some()
            || recent
            || (w.epoch.is_some() && w.epoch != current);
        if lost {
            w.restore = true;
        }
        lost
    }

    /// Forgets queues no longer held here.
    pub(crate) fn retain(&self, held: &[QueueId]) {
        self.lock().retain(|q, _| held.contains(q));
        let mut draws = self.draws.lock().unwrap_or_else(|p| p.into_inner());
        draws.retain(|q, _| held.contains(q));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q() -> QueueId {
        QueueId::new("q").expect("valid")
    }

    #[test]
    fn a_queue_that_comes_back_with_another_epoch_is_restored() {
        let r = Recovery::new(Duration::from_secs(60));
        let t = Instant::now();
        let open = |e| Interest::Open { epoch: Some(e) };
        assert_eq!(r.observe(&q(), open(1), t), Action::Nothing);
        assert_eq!(r.observe(&q(), open(1), t), Action::Nothing);
        assert!(!r.lost_with_queue(&q(), Some(1)));
        assert_eq!(r.observe(&q(), Interest::Unknown, t), Action::Nothing);
        assert_eq!(r.observe(&q(), open(2), t), Action::Restore);
        r.restored(&q(), Some(2));
        assert_eq!(r.observe(&q(), open(2), t), Action::Nothing);
        // Flushed and recreated between two heartbeats: the epoch tells.
        assert!(r.lost_with_queue(&q(), Some(3)));
        assert_eq!(r.observe(&q(), open(3), t), Action::Restore);
    }

    #[test]
    fn a_queue_missing_past_the_window_loses_its_places() {
        let r = Recovery::new(Duration::from_secs(60));
        let t = Instant::now();
        assert_eq!(r.observe(&q(), Interest::Unknown, t), Action::Nothing);
        let later = t + Duration::from_secs(61);
        assert_eq!(
            r.observe(&q(), Interest::Unknown, later),
            Action::Close(CloseReason::PlaceLost)
        );
        assert_eq!(
            r.observe(&q(), Interest::Closed(CloseReason::SoldOut), later),
            Action::Close(CloseReason::SoldOut)
        );
    }
}
