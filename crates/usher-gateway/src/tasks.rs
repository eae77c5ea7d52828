//! The gateway's background tasks: the heartbeat, the flush of disconnects, and the drain.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use usher_core::store::{DrawPhase, StoreError};
use usher_core::time::now_ms;

use crate::gateway::Gateway;
use crate::metrics;

/// How often disconnects are written to Redis.
const AWAY_FLUSH: Duration = Duration::from_millis(50);
/// Draining ends connections in steps this far apart.
const DRAIN_STEP: Duration = Duration::from_millis(100);

/// Writes the places of browsers that went away to Redis, batched per queue; keeps them for
/// the next round while Redis is unreachable. A last round runs when the gateway stops.
pub(crate) async fn flush_away(gw: Arc<Gateway>) {
    let mut every = tokio::time::interval(AWAY_FLUSH);
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        let stopping = tokio::select! {
            () = gw.stopped().cancelled() => true,
            _ = every.tick() => false,
        };
        for (q, places) in gw.away().take() {
            match gw
                .store()
                .mark_away(&q, &places, gw.index(), now_ms())
                .await
            {
                Ok(n) => {
                    tracing::debug!(queue = %q, gone = places.len(), kept = n, "browsers went away")
                }
                Err(e) => {
                    metrics::redis_error();
                    tracing::debug!(queue = %q, n = places.len(), error = %e, "could not mark places away; will retry");
                    gw.away().put_back(&q, places);
                }
            }
        }
        if stopping {
            break;
        }
    }
}

/// Keeps the registry entry, the stream and this gateway's queue interests alive; ends the
/// streams of queues that were closed; drops expired orphaned admissions and staged tokens.
pub(crate) async fn heartbeat(gw: Arc<Gateway>) {
    let mut every = tokio::time::interval(gw.config().heartbeat());
    every.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            () = gw.stopped().cancelled() => break,
            _ = every.tick() => {}
        }
        match beat(&gw).await {
            Ok(()) if failing => {
                tracing::info!("redis is back; heartbeat resumed");
                failing = false;
            }
            Ok(()) => {}
            Err(e) => {
                metrics::redis_error();
                if !failing {
                    tracing::warn!(error = %e, "heartbeat failed; browsers stay connected while redis is away");
                }
                failing = true;
            }
        }
        gw.hub().sweep_orphans();
    }
}

/// One heartbeat's Redis work.
async fn beat(gw: &Gateway) -> Result<(), StoreError> {
    let (store, config) = (gw.store(), gw.config());
    let now = now_ms();
    store
        .heartbeat_gateway(gw.index(), gw.id(), now, config.registry_ttl())
        .await?;
    store.ensure_stream(gw.id(), config.stream_ttl()).await?;
    let queues = gw.hub().queues();
    let closed = store.refresh_interest(&queues, gw.index(), now).await?;
    for (q, closed) in queues.iter().zip(closed) {
        if let Some(reason) = closed {
            gw.hub().close_queue(q, reason);
        }
    }
    // A draw whose message this gateway missed (sent while it was away, or lost): its
    // pre-queue streams end all the same, within a heartbeat.
    for q in gw.hub().scheduled_queues() {
        if store
            .schedule_of(&q)
            .await?
            .is_none_or(|s| s.phase == DrawPhase::Done)
        {
            gw.hub().end_scheduled(&q, || gw.jittered_retry_ms());
        }
    }
    Ok(())
}

/// Ends open streams spread over the drain window, each with a jittered `retry:`.
pub(crate) async fn drain(gw: Arc<Gateway>) {
    let window = Duration::from_secs(gw.config().drain_secs);
    let steps = (window.as_millis() / DRAIN_STEP.as_millis()).max(1) as u64;
    let total = gw.connections();
    let per_step = total.div_ceil(steps).max(1) as usize;
    let mut every = tokio::time::interval(DRAIN_STEP);
    loop {
        every.tick().await;
        let ended = gw.hub().end_some(per_step, || gw.jittered_retry_ms());
        if ended == 0 && gw.connections() == 0 {
            break;
        }
    }
    tracing::info!(ended = total, "all streams ended");
}
