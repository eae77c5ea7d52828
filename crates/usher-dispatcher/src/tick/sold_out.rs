//! A queue whose inventory is gone closes with `sold_out` once no session has been active for
//! its `sold_out_grace_seconds` (the tick script says when: `TickOutcome::sold_out`). The
//! line is kept until then, because carts abandoned meanwhile can return items, and a report
//! above 0 resumes admission (`usher_core::inventory`).

use usher_core::ids::QueueId;
use usher_core::messages::{CloseReason, StreamMessage};
use usher_core::store::{GatewayInfo, Store, StoreError};

use super::gateways::live_at;

/// Closes `q` with `sold_out` if it is still sold out past its grace at `now` (a report may
/// have come between the tick and this call: the store checks again), and tells every live
/// gateway, as an operator's close does.
pub(super) async fn close(
    store: &Store,
    gateways: &[GatewayInfo],
    q: &QueueId,
    now: u64,
) -> Result<(), StoreError> {
    if !store.close_sold_out(q, now).await? {
        return Ok(());
    }
    let msg = StreamMessage::Closed {
        queue: q.clone(),
        reason: CloseReason::SoldOut,
        message: None,
    };
    let batches: Vec<_> = live_at(gateways, now)
        .into_values()
        .map(|id| (id.clone(), vec![msg.clone()]))
        .collect();
    // Closed in Redis already: a gateway not told now learns it at its next heartbeat.
    if let Err(e) = store.send(&batches).await {
        tracing::warn!(queue = %q, error = %e, "queue sold out; gateways learn it at their next heartbeat");
    }
    tracing::info!(queue = %q, gateways = batches.len(), "inventory sold out: queue closed");
    Ok(())
}
