//! The order a batch read from this gateway's stream is applied in: admissions before
//! positions.
//!
//! The dispatcher writes a tick's admissions before the tick's line snapshot (`state`), but
//! one read may return several ticks (a gateway that fell behind, or a read that caught the
//! snapshot of one tick with the admissions of the next). A snapshot wakes every browser of
//! its queue held here, each with a write to make; an admission applied after it waits behind
//! that whole fan-out. So within a batch every entry except the snapshots goes first, in the
//! order it was written, and the snapshots follow: only the newest of each queue, because
//! positions never go up while a browser stays connected and the newest snapshot is the
//! line as it is now (an older one would cost a write per browser that the newer one
//! overwrites at once).
//!
//! One other message depends on its order with a snapshot: an inventory report
//! (`Inventory`) sets each browser's outlook, and a snapshot sets it too, from the report the
//! dispatcher held when it wrote the snapshot. A report written after the kept snapshot of
//! its queue is therefore applied after the snapshots (`after`), or the older snapshot would
//! take the browsers back to the outlook the report replaced; a report written before it is
//! applied first, and the snapshot carries it on. Nothing else depends on the order: a
//! snapshot of a queue closed meanwhile reaches no connection (the close ended them all), a
//! notice carries the newest position whichever came first, an admitted place is no longer a
//! slot for the snapshot to move, and door tokens keep the newest window whichever came last.

use usher_core::messages::StreamMessage;
use usher_core::store::StreamEntry;

/// A batch split for applying: `first` (everything but the snapshots and the late inventory
/// reports, in stream order), then `snapshots` (the newest `state` of each queue, in stream
/// order), then `after` (the inventory reports written after their queue's kept snapshot).
#[derive(Debug, Default)]
pub(crate) struct Ordered {
    pub(crate) first: Vec<StreamEntry>,
    pub(crate) snapshots: Vec<StreamEntry>,
    pub(crate) after: Vec<StreamEntry>,
    /// Whether `first` holds an admission (then the snapshots wait until the connections
    /// just given their `admitted` event have written it).
    pub(crate) admits: bool,
}

/// Splits `entries` (in stream order) as the module explains.
pub(crate) fn admissions_first(entries: Vec<StreamEntry>) -> Ordered {
    let mut out = Ordered::default();
    for e in entries {
        match &e.message {
            Some(StreamMessage::State(s)) => {
                // A newer snapshot of the same queue replaces an older one of this batch, and
                // carries the inventory reports written before it: those go first.
                let queue = &s.queue;
                out.snapshots.retain(|older| {
                    !matches!(&older.message, Some(StreamMessage::State(o)) if &o.queue == queue)
                });
                let (earlier, later): (Vec<_>, Vec<_>) =
                    std::mem::take(&mut out.after).into_iter().partition(|r| {
                        matches!(&r.message, Some(StreamMessage::Inventory { queue: q, .. }) if q == queue)
                    });
                out.first.extend(earlier);
                out.after = later;
                out.snapshots.push(e);
            }
            Some(StreamMessage::Inventory { .. }) => out.after.push(e),
            m => {
                out.admits |= matches!(
                    m,
                    Some(StreamMessage::Admitted { .. } | StreamMessage::AdmittedStaged { .. })
                );
                out.first.push(e);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use usher_core::ids::{PlaceId, QueueId};
    use usher_core::inventory::InventoryState;
    use usher_core::messages::{Admission, QueueState};

    fn entry(id: &str, message: StreamMessage) -> StreamEntry {
        StreamEntry {
            id: id.into(),
            message: Some(message),
            traceparent: None,
        }
    }

    fn state(queue: &str, at_ms: u64) -> StreamMessage {
        StreamMessage::State(QueueState {
            queue: QueueId::new(queue).expect("a queue id"),
            at_ms,
            waiting: 10,
            rate: 1.0,
            runs: vec![(1, 10)],
            samples: Vec::new(),
            last_place: 10,
            inventory: None,
            lanes: Vec::new(),
            door: None,
        })
    }

    fn admitted(queue: &str, place: u64) -> StreamMessage {
        StreamMessage::Admitted {
            queue: QueueId::new(queue).expect("a queue id"),
            items: vec![Admission {
                place: PlaceId(place),
                token: "t".into(),
                admitted_at_ms: 1,
                expires_at_ms: 2,
            }],
        }
    }

    fn ids(v: &[StreamEntry]) -> Vec<&str> {
        v.iter().map(|e| e.id.as_str()).collect()
    }

    #[test]
    fn admissions_go_before_every_snapshot_and_only_the_newest_snapshot_per_queue_stays() {
        let batch = vec![
            entry("1", state("a", 1_000)),
            entry("2", state("b", 1_000)),
            entry("3", admitted("a", 7)),
            entry(
                "4",
                StreamMessage::Notice {
                    queue: QueueId::new("a").expect("a queue id"),
                    message: "hello".into(),
                },
            ),
            entry("5", state("a", 2_000)),
            entry("6", admitted("b", 9)),
        ];
        let o = admissions_first(batch);
        assert_eq!(ids(&o.first), ["3", "4", "6"], "the rest keeps its order");
        assert_eq!(
            ids(&o.snapshots),
            ["2", "5"],
            "a's older snapshot is dropped"
        );
        assert!(o.admits);
    }

    fn inventory(queue: &str, remaining: u64) -> StreamMessage {
        StreamMessage::Inventory {
            queue: QueueId::new(queue).expect("a queue id"),
            inventory: InventoryState {
                remaining,
                held: 0,
                basket_size: 1,
                stale: false,
            },
        }
    }

    #[test]
    fn an_inventory_report_written_after_its_queues_snapshot_is_applied_after_it() {
        let batch = vec![
            entry("1", inventory("a", 10)),
            entry("2", state("a", 1_000)),
            entry("3", inventory("a", 0)),
            entry("4", inventory("b", 5)),
            entry("5", state("b", 1_000)),
        ];
        let o = admissions_first(batch);
        // a's first report is older than a's snapshot, which carries it: it goes first. a's
        // second report is newer than a's snapshot: it goes after, or the snapshot would undo
        // it. b's report is older than b's snapshot.
        assert_eq!(ids(&o.first), ["1", "4"]);
        assert_eq!(ids(&o.snapshots), ["2", "5"]);
        assert_eq!(ids(&o.after), ["3"]);
    }

    #[test]
    fn a_batch_without_admissions_does_not_wait() {
        let o = admissions_first(vec![entry("1", state("a", 1)), entry("2", state("a", 2))]);
        assert!(o.first.is_empty());
        assert_eq!(ids(&o.snapshots), ["2"]);
        assert!(!o.admits);
    }
}
