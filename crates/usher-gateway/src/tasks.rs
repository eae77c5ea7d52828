//! The gateway's background tasks: the heartbeat (with the stream-lag sample), the flush of
//! disconnects, and the drain.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ticket::Ticket;
use tokio::time::MissedTickBehavior;
use usher_core::draw::{EntrantHash, VoidReason};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::DrawVoidEvent;
use usher_core::store::{
    DevSecret, DrawPhase, GatewayConnections, GatewayFacts, Interest, PreQueueFate, PreRestore,
    Restore, SeenDraw, StoreError,
};
use usher_core::time::now_ms;

use crate::frames::event_frame;
use crate::metrics;
use crate::recovery::Action;
use crate::shared::Gateway;

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
        for (q, mut places) in gw.away().take() {
            // A browser that came back here since it went away (a reload, a dropped mobile
            // connection) is not away.
            places.retain(|p| !gw.hub().holds(&q, *p));
            if places.is_empty() {
                continue;
            }
            match gw
                .store()
                .mark_away(&q, &places, gw.index(), now_ms())
                .await
            {
                Ok(n) => {
                    tracing::debug!(queue = %q, gone = places.len(), kept = n, "browsers went away");
                    // One that came back while the marks were written may have had its resume
                    // applied first: its mark is taken back (a failure here leaves it away
                    // until its browser reconnects, as before this check).
                    let back: Vec<PlaceId> = places
                        .into_iter()
                        .filter(|p| gw.hub().holds(&q, *p))
                        .collect();
                    if !back.is_empty() {
                        if let Err(e) = gw.store().mark_back(&q, &back, gw.index()).await {
                            metrics::redis_error();
                            tracing::debug!(queue = %q, error = %e, "could not take back away marks");
                        }
                    }
                }
                Err(e) => {
                    metrics::redis_error();
                    tracing::debug!(queue = %q, n = places.len(), error = %e, "could not mark places away; will retry");
                    gw.away().put_back(&q, places);
                }
            }
        }
        metrics::away_flushed();
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
        let beat = beat(&gw).await;
        // >>> door
        // Any answer from Redis, a refusal included, is Redis reached: the open door counts
        // only silence (`crate::door`).
        if beat
            .as_ref()
            .map_or_else(|e| !e.is_unreachable(), |()| true)
        {
            gw.door().reached();
        }
        // <<< door
        match beat {
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

/// What this gateway tells the dispatcher's readiness report (`GET /admin/readiness`): its
/// caps, its open-files limit, whether it uses the development ticket key, and how far its
/// clock is from Redis' (its time rules, grace periods among them, run on its own clock).
async fn report_facts(gw: &Gateway) -> Result<(), StoreError> {
    let (store, config) = (gw.store(), gw.config());
    let clock_offset_ms = store.clock_offset_ms().await?;
    let facts = GatewayFacts {
        max_streams: config.max_connections,
        max_sockets: config.max_sockets,
        open_files: usher_runtime::open_files_limit(),
        // Client sockets and their reserve, plus Redis connections, listeners and logs.
        open_files_needed: config.max_sockets + config.health_reserve_sockets + OWN_FILES,
        dev_ticket_key: gw.dev_ticket_key().is_some(),
        clock_offset_ms,
    };
    store.report_gateway_facts(gw.index(), &facts).await
}

/// Files a gateway holds besides its client sockets: Redis connections, its listener, logs.
const OWN_FILES: u64 = 64;

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
    // pre-queue streams end all the same, within a heartbeat. A pending draw's commitment is
    // kept for a data loss; a sale Redis lost is left to the restore, which keeps or voids it.
    for q in gw.hub().scheduled_queues() {
        match store.schedule_of(&q).await? {
            Some(s) if s.phase == DrawPhase::Pending => {
                if let Some(c) = s.commitment {
                    gw.recovery().saw_draw(&q, c);
                }
            }
            None => {}
            Some(_) => {
                gw.hub().end_scheduled(&q, || gw.jittered_retry_ms());
            }
        }
    }
    // Last and best effort: what this gateway reports for the readiness report must never
    // hold up the work above (a Redis user of the previous version's ACL, without `+time`,
    // is refused the clock read: the report then lacks this gateway, and says so).
    if let Err(e) = report_facts(gw).await {
        static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(error = %e, "cannot report this gateway's facts for the readiness report (does its redis user allow TIME?); logged once");
        }
    }
    Ok(())
}

/// Puts the places of `q`'s browsers held here back into Redis (see [`crate::recovery`]).
async fn restore(gw: &Gateway, q: &QueueId) -> Result<(), StoreError> {
    // With each place, the browser key its stream was proven with (a binding queue's): the
    // place goes back with its key, in the same script call.
    let (places, keys): (Vec<_>, Vec<_>) = gw.hub().places_in_line_order(q).into_iter().unzip();
    match gw
        .store()
        .restore_places_bound(q, gw.index(), &places, &keys, now_ms())
        .await?
    {
        Restore::Unknown => gw.recovery().still_missing(q, Instant::now()),
        Restore::Closed(reason) => {
            gw.recovery()
                .observe(q, Interest::Closed(reason), Instant::now());
            gw.hub().close_queue(q, reason);
        }
        Restore::Done { restored, epoch } => {
            restore_pre_queue(gw, q).await?;
            gw.recovery().restored(q, epoch);
            // The other gateways put their places back within a heartbeat or two of this one.
            gw.hub().allow_rise(q, Instant::now() + RISE_AFTER_RESTORE);
            tracing::warn!(queue = %q, held = places.len(), restored, "places put back after redis lost the queue");
        }
    }
    Ok(())
}

/// Puts the pre-queue places of `q`'s browsers held here back (`Store::restore_pre_queue`):
/// the draw they joined is kept when the queue came back with its seed; otherwise each of
/// them is told (`draw_void`) and resumes into the new draw's pre-queue or its place in line.
async fn restore_pre_queue(gw: &Gateway, q: &QueueId) -> Result<(), StoreError> {
    let (held, opens_at_ms) = gw.hub().scheduled_places(q);
    if held.is_empty() {
        return Ok(());
    }
    let (places, keys): (Vec<_>, Vec<_>) = held.into_iter().unzip();
    let entrants: Vec<_> = places
        .iter()
        .map(|&p| {
            let ticket = Ticket::issue(gw.ticket_key(), q, p);
            (p, EntrantHash::of_ticket(&ticket))
        })
        .collect();
    let seen = gw.recovery().seen_draw(q);
    let draw = SeenDraw {
        commitment: seen.as_deref(),
        opens_at_ms,
    };
    let store = gw.store();
    let fate = match store
        .restore_pre_queue_bound(q, gw.index(), &entrants, &keys, draw, now_ms())
        .await?
    {
        PreRestore::Unknown => return Ok(()),
        PreRestore::Closed(reason) => {
            gw.hub().close_queue(q, reason);
            return Ok(());
        }
        PreRestore::Done { fate, restored, .. } => {
            tracing::warn!(queue = %q, held = places.len(), restored, ?fate, "pre-queue places put back after redis lost the queue");
            fate
        }
    };
    // The places are back: a failure to read the new schedule only leaves the new commitment
    // untold (the draw record has it), never repeats the restore.
    let now = store.schedule_of(q).await.ok().flatten();
    let commitment = now
        .filter(|s| s.phase == DrawPhase::Pending)
        .and_then(|s| s.commitment);
    if let Some(c) = &commitment {
        gw.recovery().saw_draw(q, c.clone());
    }
    if fate.voided() {
        let ev = DrawVoidEvent {
            queue: q.clone(),
            reason: VoidReason::RedisDataLost,
            voided_commitment: seen,
            commitment,
        };
        let frame = event_frame("draw_void", None, &ev).into();
        let told = gw
            .hub()
            .void_scheduled(q, &frame, || gw.jittered_retry_ms());
        tracing::warn!(queue = %q, told, redrawn = ev.commitment.is_some(), "the draw published before redis lost the queue is void");
        // Void with no new draw: the places went into the line, ordinary places from now on.
        if fate == PreQueueFate::Void {
            gw.ip_limits().drawn(q);
        }
    } else if fate == PreQueueFate::Drawn {
        gw.ip_limits().drawn(q);
        gw.hub().end_scheduled(q, || gw.jittered_retry_ms());
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
