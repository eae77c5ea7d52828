//! The stream inbox: this gateway's Redis Stream, read and applied to the browsers held here.
//!
//! The dispatcher writes to the stream of each gateway holding browsers of a queue: line
//! snapshots, admissions (with their tokens, or staged ahead), closed queues, operators'
//! notices and places taken over elsewhere. A message lost on the way (a Redis failover) must never strand a browser,
//! so anything a snapshot no longer explains is read back from Redis ([`resync`]).

use std::sync::Arc;
use std::time::Duration;

use usher_core::ids::{PlaceId, QueueId};
use usher_core::messages::{CloseReason, StreamMessage};
use usher_core::store::{PlaceState, Store, StreamEntry};
use usher_core::time::now_ms;

use crate::admissions_first::admissions_first;
use crate::metrics;
use crate::shared::Gateway;
use crate::update::{Admitted, Update};

/// Entries read from the stream per call.
const READ_COUNT: usize = 500;
/// How long one `XREADGROUP` blocks.
pub(crate) const READ_BLOCK: Duration = Duration::from_secs(5);
/// Redis reads in flight at once for admissions fetched without a staged token.
const FETCH_CONCURRENCY: usize = 32;

/// Reads this gateway's stream with `reader` (a connection of its own: its reads block) and
/// applies each message, until the gateway stops.
pub(crate) async fn consume(gw: Arc<Gateway>, reader: Store) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let read = tokio::select! {
            () = gw.stopped().cancelled() => break,
            r = reader.read_stream(gw.id(), READ_COUNT, READ_BLOCK) => r,
        };
        match read {
            Ok(Some(entries)) => {
                backoff = Duration::from_millis(100);
                gw.door().reached();
                if entries.is_empty() {
                    continue;
                }
                let ids: Vec<String> = entries.iter().map(|e| e.id.clone()).collect();
                // Admissions first, then the newest line snapshot of each queue, then the
                // inventory reports newer than their queue's snapshot.
                let batch = admissions_first(entries);
                apply_all(&gw, batch.first);
                if batch.admits && !batch.snapshots.is_empty() {
                    // The connections just given their `admitted` event are queued to run;
                    // the snapshot would queue every other browser of the queue behind them.
                    // Yielding lets them write first (the runtime runs woken tasks in order).
                    tokio::task::yield_now().await;
                }
                apply_all(&gw, batch.snapshots);
                apply_all(&gw, batch.after);
                // Acknowledge in the background: the next read must not wait for Redis to answer
                // (it may be busy with a large admission). Unacknowledged entries are only
                // memory: nothing re-reads them.
                let acker = gw.clone();
                tokio::spawn(async move {
                    if let Err(e) = acker.store().ack(acker.id(), &ids).await {
                        metrics::redis_error();
                        tracing::warn!(error = %e, "could not acknowledge stream entries");
                    }
                });
            }
            Ok(None) => {
                tracing::warn!("stream or consumer group missing; recreating");
                let ttl = gw.config().stream_ttl();
                if let Err(e) = gw.store().ensure_stream(gw.id(), ttl).await {
                    metrics::redis_error();
                    tracing::warn!(error = %e, "could not recreate the stream");
                    tokio::time::sleep(backoff).await;
                }
            }
            Err(e) => {
                metrics::redis_error();
                tracing::warn!(error = %e, "reading the stream failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(5));
            }
        }
    }
}

/// Applies `entries` in their order.
fn apply_all(gw: &Arc<Gateway>, entries: Vec<StreamEntry>) {
    for e in entries {
        let trace = e.traceparent.map(Arc::<str>::from);
        match e.message {
            Some(m) => apply(gw, m, trace.as_ref()),
            None => tracing::warn!(entry = %e.id, "undecodable stream entry skipped"),
        }
    }
}

/// What a message from this gateway's stream does to the browsers held here. `trace`: the
/// trace context of the tick that wrote it, handed to the admissions it delivers.
fn apply(gw: &Arc<Gateway>, m: StreamMessage, trace: Option<&Arc<str>>) {
    let hub = gw.hub();
    match m {
        StreamMessage::State(s) => {
            gw.door().learn(&s);
            for place in hub.apply_state(&s) {
                tokio::spawn(resync(gw.clone(), s.queue.clone(), place));
            }
        }
        StreamMessage::Admitted { queue, items } => {
            hub.admit(&queue, &items, trace);
        }
        StreamMessage::Staged { queue, items } => {
            // When a tick's tokens arrive, against its admission time (debug, as above).
            if let Some(first) = items.first() {
                tracing::debug!(
                    queue = %queue,
                    places = items.len(),
                    since_admission_ms = now_ms() as i64 - first.admitted_at_ms as i64,
                    "tokens staged"
                );
            }
            hub.stage(&queue, items);
        }
        StreamMessage::AdmittedStaged {
            queue,
            admitted_at_ms,
            expires_at_ms,
            places,
        } => {
            // Where a burst's time goes (`RUST_LOG=usher_gateway=debug`).
            tracing::debug!(
                queue = %queue,
                places = places.len(),
                since_admission_ms = now_ms().saturating_sub(admitted_at_ms),
                "admissions read"
            );
            let missing = hub.admit_staged(&queue, admitted_at_ms, expires_at_ms, &places, trace);
            if !missing.is_empty() {
                tokio::spawn(fetch_admissions(gw.clone(), queue, missing));
            }
        }
        StreamMessage::Closed {
            queue,
            reason,
            message,
        } => {
            // A pre-queue closed before its draw is over too: its entrants count for their
            // address like ordinary places from now on, and are forgotten after the grace.
            gw.ip_limits().drawn(&queue);
            hub.close_queue_with(&queue, reason, message);
        }
        StreamMessage::Status {
            queue,
            state,
            message,
        } => {
            // The cached setting says whether a stream opening now hears `status` first:
            // read it again, so no browser joining after this push misses the new state.
            gw.challenges().forget(&queue);
            let n = hub.announce(&queue, Update::status_frame(&queue, state, message));
            tracing::info!(queue = %queue, ?state, browsers = n, "status passed on");
        }
        StreamMessage::Inventory { queue, inventory } => {
            let n = hub.apply_inventory(&queue, &inventory);
            tracing::debug!(queue = %queue, browsers = n, "inventory passed on");
        }
        StreamMessage::Notice { queue, message } => {
            let n = hub.notify(&queue, &message);
            tracing::debug!(queue = %queue, browsers = n, "notice passed on");
        }
        StreamMessage::Drawn { queue } => {
            gw.ip_limits().drawn(&queue);
            let n = hub.end_scheduled(&queue, || gw.jittered_retry_ms());
            tracing::info!(queue = %queue, browsers = n, "draw done; pre-queue streams resume");
        }
        StreamMessage::Ended {
            queue,
            place,
            reason,
        } => {
            // A browser that left hears why. Any other reason but a takeover just ends the
            // connection.
            let update = match reason {
                CloseReason::ResumedElsewhere => {
                    tokio::spawn(taken_over(gw.clone(), queue, place));
                    return;
                }
                CloseReason::Left => Update::closed(&queue, reason),
                _ => Update::superseded(),
            };
            hub.finish(&queue, place, update);
        }
    }
}

/// Another gateway resumed `place`: the connection here hears `closed` `resumed_elsewhere`
/// (it must not reconnect and take the place back), unless the news is stale. The message
/// was sent after the other gateway's resume; a browser may have come back here since (a
/// reload that landed on this gateway again), and that newer connection keeps the place. So
/// the connection seen now is ended only if Redis names another gateway as the holder; a
/// connection set up after this check is newer than the takeover and is never touched, and
/// one being set up during it is checked again once attached (`Hub::taken_over_connection`).
pub(crate) async fn taken_over(gw: Arc<Gateway>, queue: QueueId, place: PlaceId) {
    let Some(conn) = gw.hub().taken_over_connection(&queue, place) else {
        return;
    };
    match gw.store().holder(&queue, place).await {
        Ok(Some(holder)) if holder != gw.index() => {
            let update = Update::closed(&queue, CloseReason::ResumedElsewhere);
            gw.hub().finish_connection(&queue, place, conn, update);
        }
        // Held here again, or no longer waiting (its admission or end reaches the holder).
        Ok(_) => {}
        Err(e) => {
            metrics::redis_error();
            tracing::warn!(error = %e, queue = %queue, "could not check who holds a place taken over elsewhere");
        }
    }
}

/// Admissions this gateway was told of without their tokens (the staged tokens were over the
/// cap, expired, or their message was lost): read from Redis, waiting briefly while the
/// dispatcher stores them.
async fn fetch_admissions(gw: Arc<Gateway>, q: QueueId, places: Vec<PlaceId>) {
    use futures::StreamExt;
    tracing::debug!(queue = %q, n = places.len(), "admissions without a staged token; reading them from redis");
    futures::stream::iter(places)
        .for_each_concurrent(FETCH_CONCURRENCY, |place| {
            let (gw, q) = (&gw, &q);
            async move {
                // The dispatcher stores the records a moment after sending the admissions.
                for _ in 0..50 {
                    match gw.store().status(q, place, now_ms()).await {
                        Ok(PlaceState::AdmissionPending) | Err(_) => {
                            tokio::time::sleep(Duration::from_millis(100)).await
                        }
                        Ok(s) => {
                            if let Some(u) = settled(q, s) {
                                gw.hub().finish(q, place, u);
                            }
                            return;
                        }
                    }
                }
            }
        })
        .await;
}

/// The update for a place whose fate Redis tells: `None` while it is still waiting or its
/// admission is being stored.
fn settled(q: &QueueId, s: PlaceState) -> Option<Update> {
    match s {
        PlaceState::Admitted(rec) => Some(Update::Admitted(Admitted::of_record(q, &rec))),
        PlaceState::QueueClosed(reason) => Some(Update::closed(q, reason)),
        PlaceState::Gone => Some(Update::closed(q, CloseReason::PlaceLost)),
        PlaceState::SessionEnded => Some(Update::closed(q, CloseReason::SessionEnded)),
        PlaceState::Waiting { .. }
        | PlaceState::AdmissionPending
        | PlaceState::Scheduled { .. }
        | PlaceState::AdmittedNow { .. }
        // Only a join is answered "full".
        | PlaceState::PreQueueFull { .. }
        // Only a browser's request is checked for its key; the gateway's own are not.
        | PlaceState::WrongKey => None,
    }
}

/// A snapshot no longer lists a place this gateway holds: ask Redis what became of it, so a
/// lost `admitted` (or `closed`) message never leaves a browser waiting.
async fn resync(gw: Arc<Gateway>, q: QueueId, place: PlaceId) {
    let update = match gw.store().status(&q, place, now_ms()).await {
        // Gone because Redis lost the queue (configured again since): the heartbeat puts the
        // place back instead (see `crate::recovery`).
        Ok(PlaceState::Gone) if lost_with_queue(&gw, &q).await => None,
        Ok(s) => settled(&q, s),
        Err(e) => {
            metrics::redis_error();
            tracing::debug!(queue = %q, %place, error = %e, "resync failed; retried on the next snapshot");
            None
        }
    };
    match update {
        Some(u) => {
            tracing::debug!(queue = %q, %place, "resynchronised a place from redis");
            gw.hub().finish(&q, place, u);
        }
        None => gw.hub().resync_done(&q, place),
    }
}

/// Whether `q` was lost and configured again since this gateway last saw it.
async fn lost_with_queue(gw: &Gateway, q: &QueueId) -> bool {
    match gw.store().queue_epoch(q).await {
        Ok(epoch) => gw.recovery().lost_with_queue(q, epoch),
        Err(_) => true, // ask again at the next snapshot
    }
}
