//! The proofs of possession `POST /entry` has taken already, so a proof is taken once.
//!
//! A bound token's form carries a proof made by the browser key (`usher-admission`'s
//! `check_proof`); the proof is good for [`PROOF_MAX_AGE_SECS`] either side of its `iat`, so
//! someone who saw the form (a proxy log, a shared machine) could send it again within that
//! window. A booking service remembers each proof's `jti` as long as the proof could pass
//! and refuses a second use, as docs/booking-services.md tells it to. This demo keeps them in
//! memory (one process; a service behind several instances keeps them in a shared store,
//! e.g. Redis `SET jti NX EX 121`).
//!
//! Bounded: at most [`SpentProofs::capacity`] proofs at once, and at most [`PER_KEY`] of one
//! browser key (`cnf.jkt`). Only a proof by the key a valid token names gets here, and one
//! admitted browser could sign fresh proofs as fast as it likes: the per-key cap stops it
//! (that key is told to wait) long before it fills the cache for everyone. Filling it takes
//! thousands of admitted browsers within two minutes; when full, a new proof is refused (fail
//! closed: a `503` the page can retry) rather than an old `jti` forgotten early, which would
//! let its replay through.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use usher_admission::PROOF_MAX_AGE_SECS;

/// How long a `jti` is remembered, in seconds: a proof made up to [`PROOF_MAX_AGE_SECS`]
/// ahead of this clock stays good through the second that long after it, so it is forgotten
/// one second later (at 120 s, a proof stamped 60 s ahead passed once more at the 120th).
pub const REMEMBER_SECS: u64 = 2 * PROOF_MAX_AGE_SECS + 1;

/// The most proofs of one browser key remembered at once: a browser enters once, and sends
/// the form again only when a post failed.
pub const PER_KEY: usize = 16;

/// The answer to [`SpentProofs::spend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spend {
    /// The first use of this `jti`: go on.
    First,
    /// Taken already: a replay.
    Replayed,
    /// The cache holds as many proofs as it may: try again later.
    Full,
    /// This key has [`PER_KEY`] proofs remembered: it waits until the oldest is forgotten.
    TooManyOfThisKey,
}

/// The `jti`s of the proofs taken in the last [`REMEMBER_SECS`], oldest first.
#[derive(Debug)]
pub struct SpentProofs {
    capacity: usize,
    inner: Mutex<Spent>,
}

#[derive(Debug, Default)]
struct Spent {
    /// (key thumbprint, jti) of every proof remembered.
    ids: HashSet<(String, String)>,
    /// How many proofs of each key are remembered.
    per_key: HashMap<String, usize>,
    /// (forget at, key, jti), in the order taken: the times never decrease (a clock stepped
    /// back only keeps an entry longer).
    order: VecDeque<(u64, String, String)>,
}

impl SpentProofs {
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Spent::default()),
        }
    }

    /// The most proofs remembered at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Takes proof `jti` of the browser key `jkt` at `now_secs` (Unix seconds), forgetting
    /// first those past their time.
    pub fn spend(&self, jkt: &str, jti: &str, now_secs: u64) -> Spend {
        let mut s = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while s.order.front().is_some_and(|(at, _, _)| *at <= now_secs) {
            if let Some((_, key, old)) = s.order.pop_front() {
                if let Some(n) = s.per_key.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        s.per_key.remove(&key);
                    }
                }
                s.ids.remove(&(key, old));
            }
        }
        let id = (jkt.to_owned(), jti.to_owned());
        if s.ids.contains(&id) {
            return Spend::Replayed;
        }
        if s.per_key.get(jkt).is_some_and(|n| *n >= PER_KEY) {
            return Spend::TooManyOfThisKey;
        }
        if s.ids.len() >= self.capacity {
            return Spend::Full;
        }
        let at = s
            .order
            .back()
            .map_or(0, |(at, _, _)| *at)
            .max(now_secs + REMEMBER_SECS);
        *s.per_key.entry(jkt.to_owned()).or_insert(0) += 1;
        s.ids.insert(id);
        s.order.push_back((at, jkt.to_owned(), jti.to_owned()));
        Spend::First
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_taken_once_while_it_could_pass() {
        let spent = SpentProofs::new(2);
        assert_eq!(spent.spend("k", "a", 1000), Spend::First);
        assert_eq!(
            spent.spend("k", "a", 1000 + REMEMBER_SECS - 1),
            Spend::Replayed
        );
        assert_eq!(spent.spend("k", "b", 1001), Spend::First);
        assert_eq!(
            spent.spend("k", "c", 1001),
            Spend::Full,
            "bounded, fail closed"
        );
        // The last second a proof first seen at 1000 can still pass: stamped 60 s ahead
        // (1060), it is within 60 s of 1120.
        assert_eq!(
            spent.spend("k", "a", 1000 + 2 * PROOF_MAX_AGE_SECS),
            Spend::Replayed
        );
        // Past its time the first is forgotten (its proof is too old to pass anyway).
        assert_eq!(spent.spend("k", "c", 1000 + REMEMBER_SECS), Spend::First);
        assert_eq!(spent.spend("k", "a", 1000 + REMEMBER_SECS), Spend::Full);
    }

    /// One admitted browser signing fresh proofs in a loop fills its own share, never the
    /// cache: other browsers still enter.
    #[test]
    fn one_key_cannot_fill_the_cache_for_everyone() {
        let spent = SpentProofs::new(100);
        for i in 0..PER_KEY {
            assert_eq!(spent.spend("bot", &format!("j{i}"), 1000), Spend::First);
        }
        for i in PER_KEY..1000 {
            assert_eq!(
                spent.spend("bot", &format!("j{i}"), 1000),
                Spend::TooManyOfThisKey
            );
        }
        assert_eq!(
            spent.spend("browser", "j0", 1000),
            Spend::First,
            "its own jti space"
        );
        // Once its proofs are forgotten the key may enter again.
        assert_eq!(
            spent.spend("bot", "later", 1000 + REMEMBER_SECS),
            Spend::First
        );
    }
}
