//! A queue's inventory, told to its waiting browsers at once after a booking service's
//! report (`StreamMessage::Inventory`), without waiting for the next snapshot of the line.

use usher_core::ids::QueueId;
use usher_core::inventory::InventoryState;

use super::Hub;
use crate::update::Update;

impl Hub {
    /// Gives every waiting browser of `queue` its outlook under `inv` at its last known
    /// position; those whose outlook changed hear a `waiting` event now (a pending notice
    /// carries it along). Returns how many were woken.
    pub fn apply_inventory(&self, queue: &QueueId, inv: &InventoryState) -> usize {
        let inner = self.lock();
        let Some(conns) = inner.queues.get(queue) else {
            return 0;
        };
        let mut woken = 0;
        for slot in conns.values() {
            let Some(tx) = &slot.tx else { continue };
            let woke = tx.send_if_modified(|cur| {
                let w = match cur {
                    Update::Waiting(w) | Update::Notice { waiting: w, .. } => w,
                    _ => return false,
                };
                let told = Some(inv.outlook(w.position));
                let changed = w.inventory != told;
                w.inventory = told;
                changed
            });
            woken += usize::from(woke);
        }
        woken
    }
}
