//! Which replica drives which queue: rendezvous hashing over the live replicas.
//!
//! Each queue has one preferred replica, which acquires its lease (a Redis key with a TTL and
//! a fencing token). The holder renews the lease inside every tick script, so a stale holder's
//! tick is rejected by Redis itself. When a replica dies, its registry entry and leases expire
//! and the queues' new preferred replicas take them over. When a replica joins, holders hand
//! over the queues that now prefer it; rendezvous hashing moves only those queues.

use usher_core::ids::QueueId;

/// The replica that should drive `queue` (rendezvous hashing: highest score wins).
pub fn preferred<'a>(queue: &QueueId, replicas: &'a [String]) -> Option<&'a str> {
    replicas
        .iter()
        .max_by_key(|r| fnv1a(&[queue.as_str().as_bytes(), r.as_bytes()]))
        .map(String::as_str)
}

/// FNV-1a: a hash every replica computes the same way (unlike std's seeded hasher).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in *p {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_spreads_queues_and_moves_few_when_a_replica_joins() {
        let two: Vec<String> = vec!["a".into(), "b".into()];
        let three: Vec<String> = vec!["a".into(), "b".into(), "c".into()];
        let queues: Vec<QueueId> = (0..300)
            .map(|i| QueueId::new(format!("q{i}")).expect("valid"))
            .collect();
        let on_a = queues
            .iter()
            .filter(|q| preferred(q, &two) == Some("a"))
            .count();
        assert!((100..200).contains(&on_a), "{on_a} of 300 on a");
        let moved = queues
            .iter()
            .filter(|q| preferred(q, &two) != preferred(q, &three))
            .count();
        for q in &queues {
            let now = preferred(q, &three);
            if preferred(q, &two) != now {
                assert_eq!(now, Some("c"), "only moves to the new replica");
            }
        }
        assert!((50..150).contains(&moved), "{moved} moved");
        assert_eq!(preferred(&queues[0], &[]), None);
    }
}
