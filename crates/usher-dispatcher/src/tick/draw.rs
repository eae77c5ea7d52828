//! A scheduled sale's draw, run by the replica holding the queue's lease at the first tick at
//! or after `opens_at` (and, when the sale names a beacon round, once the operator recorded
//! that round's randomness).
//!
//! The draw is begun first (its time and beacon round are fixed from then on), then the order
//! is computed here (Lua has no HMAC: `usher_core::draw`) from the seed and the pre-queue,
//! and applied in steps of `DRAW_STEP` places, each a script that checks and renews the
//! lease, so no call holds Redis for long. A crash or a hand-over between steps leaves the
//! draw pending: the next holder reads the places still in the pre-queue and goes on after
//! the last entrant recorded, so the record stays in drawn order; the last script makes it
//! done, so it runs exactly once. While a draw is under way the queue's tick admits nobody.
//! Pre-queue places the read missed go FIFO behind the drawn ones. The entrants whose
//! browsers had gone away when the draw began (a gateway recorded it) are drawn after every
//! present one. Then every live gateway
//! is told, and ends its pre-queue streams so the browsers resume into their places.

use usher_core::ids::QueueId;
use usher_core::messages::StreamMessage;
use usher_core::store::{DrawOutcome, DrawPhase, DrawPrep, GatewayInfo, Lease, Store, StoreError};

use super::gateways::live_at;

/// What the tick that ran [`draw_if_due`] may do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterDraw {
    /// No draw is under way (none pending, not due, or done now): tick as usual.
    Tick,
    /// A draw is under way and could not go on this time (its record or schedule changed
    /// under it): no admission this tick, nor any expiry of away places, which the draw's
    /// drawn places are until their browsers hear of it. The next tick prepares it again.
    Wait,
    /// Another replica holds the queue's lease.
    LeaseLost,
}

/// Runs `q`'s draw if it is due at `now`, or goes on with one begun before.
pub(super) async fn draw_if_due(
    store: &Store,
    gateways: &[GatewayInfo],
    q: &QueueId,
    lease: &Lease,
    lease_ttl_ms: u64,
    now: u64,
) -> Result<AfterDraw, StoreError> {
    let due = match store.prepare_draw(q, lease, lease_ttl_ms, now).await? {
        DrawPrep::NotDue => return Ok(AfterDraw::Tick),
        // Drawn (a tick whose bookkeeping after the draw failed, or whose reply was lost),
        // voided or unscheduled.
        DrawPrep::NotPending => {
            forget_sale(store, q).await?;
            return Ok(AfterDraw::Tick);
        }
        DrawPrep::LeaseLost => return Ok(AfterDraw::LeaseLost),
        DrawPrep::Stale => return Ok(AfterDraw::Wait),
        DrawPrep::Ready(due) => due,
    };
    let (seed, beacon, recorded) = (due.seed.clone(), due.beacon.clone(), due.recorded);
    let (present, absent) = (due.entrants.len(), due.absent.len());
    // Present entrants first, then the absent ones (`usher_core::draw::Presence`).
    let order = due.order();
    let outcome = store
        .run_draw(
            q,
            lease,
            lease_ttl_ms,
            now,
            recorded,
            &order.entrants,
            order.absent,
        )
        .await?;
    match outcome {
        DrawOutcome::LeaseLost => return Ok(AfterDraw::LeaseLost),
        // Closed meanwhile: the tick finds the queue closed.
        DrawOutcome::NotPending => return Ok(AfterDraw::Tick),
        DrawOutcome::Stale => {
            tracing::warn!(queue = %q, "draw record changed under this replica; preparing it again next tick");
            return Ok(AfterDraw::Wait);
        }
        DrawOutcome::Done {
            drawn,
            after,
            first,
        } => {
            tracing::info!(queue = %q, drawn, after, first_place = first, present, absent, resumed = recorded > 0, commitment = %seed.commitment(), beacon = beacon.is_some(), "draw done");
        }
    }
    forget_sale(store, q).await?;
    let msg = StreamMessage::Drawn { queue: q.clone() };
    let batches: Vec<_> = live_at(gateways, now)
        .into_values()
        .map(|id| (id.clone(), vec![msg.clone()]))
        .collect();
    store.send(&batches).await?;
    Ok(AfterDraw::Tick)
}

/// No more schedule reads before `q`'s ticks (`usher:draws`), unless a new sale was scheduled
/// meanwhile: its schedule is read again after the removal, so a sale scheduled in between is
/// listed again.
async fn forget_sale(store: &Store, q: &QueueId) -> Result<(), StoreError> {
    store.mark_sale(q, false).await?;
    if store
        .schedule_of(q)
        .await?
        .is_some_and(|s| s.phase == DrawPhase::Pending)
    {
        store.mark_sale(q, true).await?;
    }
    Ok(())
}
