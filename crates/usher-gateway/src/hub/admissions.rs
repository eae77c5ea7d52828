//! Admissions reaching the hub: delivered to the browsers held here, kept briefly for a
//! browser between two connections, or staged ahead of the tick that admits their places.

use std::sync::Arc;
use std::time::Instant;

use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::Admission;

use super::slots::{Staged, ORPHAN_TTL, STAGED_CAP};
use super::Hub;
use crate::update::Admitted;

impl Hub {
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
}
