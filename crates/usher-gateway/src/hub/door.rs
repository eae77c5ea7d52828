//! The open door's side of the hub (`crate::door`): let the waiting browsers held here
//! through, lowest place id first.

use std::sync::Arc;

use usher_core::ids::{PlaceId, QueueId};

use super::Hub;
use crate::update::{Admitted, Update};

impl Hub {
    /// Sends `event` (an `admitted` with the window's door token) to at most `n` browsers of
    /// `queue` held here with their stream open and waiting in line (pre-queue streams and
    /// connections being set up are skipped), lowest place id first: the order the line
    /// would have admitted them in. Each connection ends as after an ordinary admission.
    /// Returns the places let through.
    pub fn let_through(&self, queue: &QueueId, n: usize, event: &Arc<Admitted>) -> Vec<PlaceId> {
        if n == 0 {
            return Vec::new();
        }
        let mut inner = self.lock();
        let chosen: Vec<PlaceId> = match inner.queues.get(queue) {
            // The slots are ordered by place id.
            Some(slots) => slots
                .iter()
                .filter(|(_, s)| s.tx.is_some() && !s.is_scheduled())
                .take(n)
                .map(|(p, _)| PlaceId(*p))
                .collect(),
            None => return Vec::new(),
        };
        for &p in &chosen {
            inner.deliver(queue, p, Update::Admitted(event.clone()));
        }
        chosen
    }
}
