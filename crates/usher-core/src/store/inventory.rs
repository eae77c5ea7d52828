//! A queue's inventory as the booking service reports it (`src/inventory.rs` has the rule):
//! the report, what the admin API shows of it, and the tick's `sold_out` close. The counter
//! of sessions consumed since the report is kept by `lua/end_session.lua`, the gate by
//! `lua/prelude.lua` (`inventory_slots`, used by the tick and passthrough joins).

use redis::Value;
use serde::{Deserialize, Serialize};

use super::decode::{array, u};
use super::scripts::SCRIPTS;
use super::{protocol, Result, Store};
use crate::ids::QueueId;
use crate::inventory::InventoryState;
use crate::keys::QueueKeys;
use crate::messages::CloseReason;

/// The last report and what happened since, as `GET /admin/queues/{q}` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryReport {
    /// `remaining` as reported.
    pub reported: u64,
    /// When it was reported (ms since the epoch).
    pub at_ms: u64,
    /// Sessions consumed since the report (each counts as a sold basket).
    pub consumed: u64,
}

impl Store {
    /// Stores the booking service's report that `remaining` items of `q` are left, at `now_ms`
    /// (the count of sessions consumed since the last report starts again). `None` for an
    /// unknown queue; else the inventory as the line is told of it now.
    pub async fn report_inventory(
        &self,
        q: &QueueId,
        remaining: u64,
        now_ms: u64,
    ) -> Result<Option<InventoryState>> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .inventory
            .key(&k.meta)
            .key(&k.active)
            .arg(remaining)
            .arg(now_ms)
            .invoke_async(&mut self.c())
            .await?;
        if matches!(v, Value::Nil) {
            return Ok(None);
        }
        let a = array(v)?;
        let [remaining, held, basket_size] = a.as_slice() else {
            return Err(protocol(format!("inventory reply {a:?}")));
        };
        Ok(Some(InventoryState {
            remaining: u(remaining)?,
            held: u(held)?,
            basket_size: u(basket_size)?,
            stale: false,
        }))
    }

    /// Forgets `q`'s inventory report: it admits as if it never had one. `false` for an
    /// unknown queue.
    pub async fn forget_inventory(&self, q: &QueueId) -> Result<bool> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .inventory
            .key(&k.meta)
            .key(&k.active)
            .arg("")
            .arg(0)
            .invoke_async(&mut self.c())
            .await?;
        Ok(!matches!(v, Value::Nil))
    }

    /// `q`'s last inventory report; `None` when it has none (it admits as before).
    pub async fn inventory_report(&self, q: &QueueId) -> Result<Option<InventoryReport>> {
        let (reported, at_ms, consumed): (Option<u64>, Option<u64>, Option<u64>) =
            redis::cmd("HMGET")
                .arg(&QueueKeys::of(q).meta)
                .arg("inventory_remaining")
                .arg("inventory_at_ms")
                .arg("inventory_consumed")
                .query_async(&mut self.c())
                .await?;
        Ok(reported.map(|reported| InventoryReport {
            reported,
            at_ms: at_ms.unwrap_or(0),
            consumed: consumed.unwrap_or(0),
        }))
    }

    /// Closes `q` with `sold_out` if it is still sold out past its grace at `now_ms` (the
    /// tick found it so; a report above 0 since then keeps it open). Whether it closed.
    pub async fn close_sold_out(&self, q: &QueueId, now_ms: u64) -> Result<bool> {
        self.close_queue_at(q, CloseReason::SoldOut, Some(now_ms))
            .await
    }
}
