//! The gateway's background tasks: the heartbeat (with the stream-lag sample), the flush of
//! disconnects, and the drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;
use usher_core::ids::QueueId;
use usher_core::store::{DevSecret, DrawPhase, GatewayConnections, Interest, Restore, StoreError};
use usher_core::time::now_ms;

use crate::gateway::Gateway;
use crate::metrics;
use crate::recovery::Action;

/// How often disconnects are written to Redis.
const AWAY_FLUSH: Duration = Duration::from_millis(50);
/// How long after putting a queue's places back positions may go up (see
/// [`crate::hub::Hub::allow_rise`]): the other gateways restore theirs meanwhile.
const RISE_AFTER_RESTORE: Duration = Duration::from_secs(10);
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
        sample_stream(&gw).await;
    }
}

/// Samples how far behind the reading of this gateway's own stream is, for `/metrics`.
async fn sample_stream(gw: &Gateway) {
    match gw.store().stream_lag(gw.id()).await {
        Ok(lag) => metrics::stream_sampled(&lag),
        Err(e) => {
            metrics::redis_error();
            tracing::debug!(error = %e, "could not sample the stream's lag");
        }
    }
}

/// One heartbeat's Redis work.
async fn beat(gw: &Gateway) -> Result<(), StoreError> {
    let (store, config) = (gw.store(), gw.config());
    let now = now_ms();
    if !store
        .heartbeat_gateway(gw.index(), gw.id(), now, config.registry_ttl())
        .await?
    {
        // Another process took this index while Redis had lost the registry: take a new one
        // and put every place held here back under it.
        let old = gw.index();
        let new = store
            .register_gateway(gw.id(), now, config.registry_ttl())
            .await?;
        gw.set_index(new);
        gw.recovery().restore_all();
        tracing::warn!(old, new, "another gateway process owns this registry index (redis lost the registry); registered again");
    }
    for (which, secret) in [
        (DevSecret::TicketKey, gw.dev_ticket_key()),
        (DevSecret::ChallengeSecret, gw.challenges().shared_secret()),
    ] {
        let Some(secret) = secret else { continue };
        // Written back (if missing) so that gateways started after a loss agree with this one.
        if store.shared_dev_secret(which, secret.to_owned()).await? != secret {
            tracing::warn!(?which, "a secret shared through redis is not this gateway's (redis lost it and another gateway stored a new one): tickets or puzzles of one are refused by the other until they restart");
        }
    }
    store.ensure_stream(gw.id(), config.stream_ttl()).await?;
    let counts = GatewayConnections {
        streams: gw.connections(),
        sockets: gw.open_sockets(),
    };
    store.report_gateway_connections(gw.index(), counts).await?;
    let queues = gw.hub().queues();
    gw.recovery().retain(&queues);
    let interests = store.refresh_interest(&queues, gw.index(), now).await?;
    for (q, interest) in queues.iter().zip(interests) {
        match gw.recovery().observe(q, interest, Instant::now()) {
            Action::Nothing => {}
            Action::Close(reason) => {
                gw.hub().close_queue(q, reason);
            }
            Action::Restore => restore(gw, q).await?,
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

/// Puts the places of `q`'s browsers held here back into Redis (see [`crate::recovery`]).
async fn restore(gw: &Gateway, q: &QueueId) -> Result<(), StoreError> {
    let places = gw.hub().places_in_line_order(q);
    match gw
        .store()
        .restore_places(q, gw.index(), &places, now_ms())
        .await?
    {
        Restore::Unknown => gw.recovery().still_missing(q, Instant::now()),
        Restore::Closed(reason) => {
            gw.recovery()
                .observe(q, Interest::Closed(reason), Instant::now());
            gw.hub().close_queue(q, reason);
        }
        Restore::Done { restored, epoch } => {
            gw.recovery().restored(q, epoch);
            // The other gateways put their places back within a heartbeat or two of this one.
            gw.hub().allow_rise(q, Instant::now() + RISE_AFTER_RESTORE);
            tracing::warn!(queue = %q, held = places.len(), restored, "places put back after redis lost the queue");
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
