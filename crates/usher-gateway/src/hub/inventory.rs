//! A queue's inventory, told to its waiting browsers at once after a booking service's
//! report (`StreamMessage::Inventory`), without waiting for the next snapshot of the line.

use usher_core::ids::QueueId;
use usher_core::inventory::InventoryState;
use usher_core::messages::scaled;

use super::Hub;
use crate::update::Update;

impl Hub {
    /// Gives every waiting browser of `queue` its outlook under `inv` at its last known
    /// position (a lane's place: the places every lane admits before it, as of the last
    /// snapshot); those whose outlook changed hear a `waiting` event now (a pending notice
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
                let told = Some(inv.outlook(scaled(w.position, slot.lane_scale)));
                let changed = w.inventory != told;
                w.inventory = told;
                changed
            });
            woken += usize::from(woke);
        }
        woken
    }
}

#[cfg(test)]
mod tests {
    use usher_core::ids::PlaceId;
    use usher_core::inventory::{Chance, InventoryState};
    use usher_core::messages::WaitingEvent;

    use super::*;

    fn connect(hub: &Hub, q: &QueueId, seq: u64) -> crate::latest::Receiver<Update> {
        let waiting = WaitingEvent {
            queue: q.clone(),
            position: seq,
            waiting: 3,
            eta_seconds: None,
            as_of_ms: 0,
            inventory: None,
            lane: None,
        };
        let r = hub.reserve(q, PlaceId(seq), None);
        hub.attach(r, Update::Waiting(waiting)).expect("attached").1
    }

    fn chance(rx: &crate::latest::Receiver<Update>) -> Option<Chance> {
        match &*rx.borrow() {
            Update::Waiting(w) => w.inventory.map(|i| i.chance),
            _ => None,
        }
    }

    #[test]
    fn each_place_hears_its_chance_and_only_a_change_wakes_it() {
        let hub = Hub::new();
        let q = QueueId::new("q").expect("valid");
        let mut rxs: Vec<_> = (1..=3).map(|p| connect(&hub, &q, p)).collect();
        for rx in &mut rxs {
            rx.mark_unchanged();
        }
        let two_left = InventoryState {
            remaining: 2,
            held: 0,
            basket_size: 1,
            stale: false,
        };
        assert_eq!(hub.apply_inventory(&q, &two_left), 3);
        let chances: Vec<_> = rxs.iter().map(chance).collect();
        use Chance::*;
        assert_eq!(chances, [Some(Likely), Some(Likely), Some(Unlikely)]);
        for rx in &mut rxs {
            rx.mark_unchanged();
        }
        assert_eq!(
            hub.apply_inventory(&q, &two_left),
            0,
            "nothing new: nobody woken"
        );
        assert!(rxs.iter().all(|rx| !rx.has_changed().unwrap_or(true)));
        let other = QueueId::new("other").expect("valid");
        assert_eq!(hub.apply_inventory(&other, &two_left), 0);
    }
}
