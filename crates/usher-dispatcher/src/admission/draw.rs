//! A scheduled sale's draw, run by the replica holding the queue's lease at the first tick at
//! or after `opens_at` (and, when the sale names a beacon round, once the operator recorded
//! that round's randomness).
//!
//! The order is computed here (Lua has no HMAC: `usher_core::draw`) from the seed and the
//! pre-queue read just before, and applied in steps of `DRAW_STEP` places, each a script that
//! checks the lease, so no call holds Redis for long. A crash or a hand-over between steps
//! leaves the draw pending: the next holder reads the places still in the pre-queue and goes
//! on after the last entrant recorded, so the record stays in drawn order; the last script
//! makes it done, so it runs exactly once. Pre-queue places the read missed go FIFO behind
//! the drawn ones. Then every live gateway is told, and ends its pre-queue streams so the
//! browsers resume into their places.

use usher_core::ids::QueueId;
use usher_core::messages::StreamMessage;
use usher_core::store::{DrawOutcome, DrawPhase, GatewayInfo, Lease, Store, StoreError};

use super::gateways::live_at;

/// Runs `q`'s draw if it is due at `now`. `false` when the lease turned out to be lost.
pub(super) async fn draw_if_due(
    store: &Store,
    gateways: &[GatewayInfo],
    q: &QueueId,
    lease: &Lease,
    now: u64,
) -> Result<bool, StoreError> {
    let Some(due) = store.due_draw(q, now).await? else {
        return Ok(true);
    };
    let (seed, beacon) = (due.seed, due.beacon);
    let order = seed.order_after(beacon.as_deref(), due.entrants, due.after.as_ref());
    match store.run_draw(q, lease, now, &order).await? {
        DrawOutcome::LeaseLost => return Ok(false),
        DrawOutcome::NotPending => return Ok(true),
        DrawOutcome::Done {
            drawn,
            after,
            first,
        } => {
            tracing::info!(queue = %q, drawn, after, first_place = first, commitment = %seed.commitment(), beacon = beacon.is_some(), "draw done");
        }
    }
    // Drawn: no more schedule reads before this queue's ticks, unless a new sale was
    // scheduled meanwhile.
    store.mark_sale(q, false).await?;
    if store
        .schedule_of(q)
        .await?
        .is_some_and(|s| s.phase == DrawPhase::Pending)
    {
        store.mark_sale(q, true).await?;
    }
    let msg = StreamMessage::Drawn { queue: q.clone() };
    let batches: Vec<_> = live_at(gateways, now)
        .into_values()
        .map(|id| (id.clone(), vec![msg.clone()]))
        .collect();
    store.send(&batches).await?;
    Ok(true)
}
