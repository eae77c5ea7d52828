//! Places whose browser went away, waiting to be written to Redis.
//!
//! A disconnect does not release a place: it starts the queue's grace period, so a browser
//! that reconnects in time keeps its place. Writing each disconnect on its own would cost a
//! mass disconnect (a proxy restart) one Redis call per browser; collected here, they go in
//! batches ([`crate::tasks`] flushes them), one call per queue per flush.

use std::collections::HashMap;
use std::sync::Mutex;

use usher_core::ids::{PlaceId, QueueId};

/// Disconnects not recorded in Redis yet.
#[derive(Default)]
pub(crate) struct Away {
    pending: Mutex<Vec<(QueueId, PlaceId)>>,
}

impl Away {
    /// A browser went away from `place`.
    pub(crate) fn mark(&self, q: QueueId, place: PlaceId) {
        if let Ok(mut p) = self.pending.lock() {
            p.push((q, place));
        }
    }

    /// Everything marked since the last call, by queue.
    pub(crate) fn take(&self) -> HashMap<QueueId, Vec<PlaceId>> {
        let pending = self
            .pending
            .lock()
            .map(|mut p| std::mem::take(&mut *p))
            .unwrap_or_default();
        let mut by_queue: HashMap<QueueId, Vec<PlaceId>> = HashMap::new();
        for (q, p) in pending {
            by_queue.entry(q).or_default().push(p);
        }
        by_queue
    }

    /// Puts back places Redis could not record, for the next flush.
    pub(crate) fn put_back(&self, q: &QueueId, places: Vec<PlaceId>) {
        if let Ok(mut p) = self.pending.lock() {
            p.extend(places.into_iter().map(|pl| (q.clone(), pl)));
        }
    }
}
