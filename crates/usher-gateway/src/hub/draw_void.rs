//! A scheduled sale's pre-queue after a Redis data loss: the places to put back, and telling
//! their browsers when the draw they joined was voided (`crate::tasks` restores them).

use std::sync::Arc;

use usher_core::binding::Thumbprint;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::time::parse_rfc3339_ms;

use super::Hub;
use crate::update::Update;

impl Hub {
    /// The pre-queue places of `queue` held here, in join order (place id), each with the
    /// browser key it was proven with (a binding queue's), and the `opens_at` (ms) their
    /// streams were told.
    pub fn scheduled_places(
        &self,
        queue: &QueueId,
    ) -> (Vec<(PlaceId, Option<Thumbprint>)>, Option<u64>) {
        let inner = self.lock();
        let mut opens_at_ms = None;
        let places = inner
            .queues
            .get(queue)
            .map(|slots| {
                slots
                    .iter()
                    .filter_map(|(&p, s)| {
                        let tx = s.tx.as_ref()?;
                        let Update::Scheduled(e) = &*tx.borrow() else {
                            return None;
                        };
                        opens_at_ms = opens_at_ms.or_else(|| parse_rfc3339_ms(&e.opens_at));
                        Some((PlaceId(p), s.key.as_ref().and_then(|k| k.thumbprint())))
                    })
                    .collect()
            })
            .unwrap_or_default();
        (places, opens_at_ms)
    }

    /// The draw the pre-queue of `queue` joined was voided: ends every pre-queue stream with
    /// the `draw_void` `frame`, then its own `retry:` from `retry_ms`, so each browser learns
    /// why and resumes into what holds now. Returns how many were told.
    pub fn void_scheduled(
        &self,
        queue: &QueueId,
        frame: &Arc<str>,
        mut retry_ms: impl FnMut() -> u64,
    ) -> usize {
        self.end_scheduled_with(queue, || Update::DrawVoid {
            frame: frame.clone(),
            retry_ms: retry_ms(),
        })
    }
}
