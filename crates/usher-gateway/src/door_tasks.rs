//! The open door's two background tasks (`crate::door` has the rules): one looks at the doors
//! every [`DOOR_STEP`], the other writes what they let through to Redis every
//! [`RECORD_STEP`], until the gateway stops.

use std::sync::Arc;

use crate::door::{DOOR_STEP, MIN_HEARTBEATS, RECORD_STEP};
use crate::metrics;
use crate::shared::Gateway;

/// Lets browsers through the open doors, and closes them once Redis answers.
pub(crate) async fn release(gw: Arc<Gateway>) {
    let mut every = tokio::time::interval(DOOR_STEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let least = gw.config().heartbeat() * MIN_HEARTBEATS;
    loop {
        tokio::select! {
            () = gw.stopped().cancelled() => break,
            _ = every.tick() => {}
        }
        gw.door().step(gw.hub(), least);
    }
}

/// Writes the places let through (and each closed period) to Redis: tried while Redis is away
/// too, so they leave the line the moment it answers. A write that Redis answers, even with an
/// error, is Redis reached.
pub(crate) async fn record(gw: Arc<Gateway>) {
    let mut every = tokio::time::interval(RECORD_STEP);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = gw.stopped().cancelled() => break,
            _ = every.tick() => {}
        }
        for w in gw.door().pending(gw.index()) {
            match gw
                .store()
                .close_door(&w.queue, &w.places, w.period.as_ref())
                .await
            {
                Ok(removed) => {
                    gw.door().reached();
                    gw.door().written(&w);
                    if let Some(p) = &w.period {
                        tracing::info!(queue = %w.queue, opened_at = %p.opened_at, closed_at = %p.closed_at, admitted = p.admitted, removed, "door period recorded");
                    }
                }
                Err(e) => {
                    if !e.is_unreachable() {
                        gw.door().reached();
                    }
                    metrics::redis_error();
                    tracing::debug!(queue = %w.queue, error = %e, "could not record the door's places yet");
                }
            }
        }
    }
}
