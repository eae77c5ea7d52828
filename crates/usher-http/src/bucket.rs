//! A token bucket: `burst` requests at once, then `per_second` on average. The gateway's
//! per-IP limits keep one per client address for joins and one for status polls and leaves;
//! [`Buckets`] keeps one per key of any kind (a binding queue's proofs spent per place, at a
//! gateway and at the dispatcher's session API).
//!
//! A bucket is two numbers and is refilled lazily, when it is next drawn from: nothing runs
//! per bucket between requests, and a full bucket can be forgotten (a new one starts full,
//! so forgetting it changes no answer).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often full buckets are forgotten (on the next draw after this long).
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// A rate as configured; `0` for either number turns it off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Tokens refilled per second.
    pub per_second: u32,
    /// The bucket's size: requests at once before the rate applies.
    pub burst: u32,
}

impl Rate {
    pub fn is_on(self) -> bool {
        self.per_second > 0 && self.burst > 0
    }
}

/// One bucket's tokens, as of its last refill; a new one is full.
#[derive(Debug, Default)]
pub struct Bucket {
    tokens: f64,
    refilled: Option<Instant>,
}

impl Bucket {
    /// The tokens as of `now` (refilled at `rate`, capped at its burst).
    pub fn refill(&mut self, rate: Rate, now: Instant) -> f64 {
        let burst = f64::from(rate.burst);
        self.tokens = match self.refilled {
            None => burst,
            Some(t) => (self.tokens
                + now.saturating_duration_since(t).as_secs_f64() * f64::from(rate.per_second))
            .min(burst),
        };
        self.refilled = Some(now);
        self.tokens
    }

    /// Whether the bucket is full again at `now` (it can be forgotten).
    pub fn is_full(&mut self, rate: Rate, now: Instant) -> bool {
        self.refill(rate, now) >= f64::from(rate.burst)
    }

    /// Takes one token at `now`; when none is left, how long until one is (the refusal's
    /// `Retry-After`). A rate that is off always gives one.
    pub fn take(&mut self, rate: Rate, now: Instant) -> Result<(), Duration> {
        if !rate.is_on() {
            return Ok(());
        }
        let tokens = self.refill(rate, now);
        if tokens < 1.0 {
            return Err(Duration::from_secs_f64(
                (1.0 - tokens) / f64::from(rate.per_second),
            ));
        }
        self.tokens -= 1.0;
        Ok(())
    }
}

/// A refusal's `Retry-After` for a wait of `wait`: whole seconds, rounded up, at least 1.
pub fn retry_after_secs(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// One bucket per key, all at one rate; a bucket full again is forgotten, so the map holds
/// only the keys drawn from lately.
pub struct Buckets<K> {
    rate: Rate,
    state: Mutex<(HashMap<K, Bucket>, Instant)>,
}

impl<K: Hash + Eq> Buckets<K> {
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            state: Mutex::new((HashMap::new(), Instant::now())),
        }
    }

    /// Takes one token from `key`'s bucket ([`Bucket::take`]).
    pub fn take(&self, key: K) -> Result<(), Duration> {
        self.take_at(key, Instant::now())
    }

    fn take_at(&self, key: K, now: Instant) -> Result<(), Duration> {
        if !self.rate.is_on() {
            return Ok(());
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (buckets, swept) = &mut *guard;
        if now.saturating_duration_since(*swept) >= SWEEP_EVERY {
            *swept = now;
            buckets.retain(|_, b| !b.is_full(self.rate, now));
        }
        buckets.entry(key).or_default().take(self.rate, now)
    }

    /// Gives back the token a request took from `key`'s bucket when the request turned out
    /// to cost nothing (e.g. a replayed proof, which writes nothing): a replay by someone
    /// else does not use up the owner's share.
    pub fn give_back(&self, key: &K) {
        if !self.rate.is_on() {
            return;
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = guard.0.get_mut(key) {
            b.tokens = (b.tokens + 1.0).min(f64::from(self.rate.burst));
        }
    }

    /// Keys with a bucket (for tests of the bound).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.state.lock().map(|s| s.0.len()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_the_wait_until_the_next_token() {
        let rate = Rate {
            per_second: 2,
            burst: 3,
        };
        let mut b = Bucket::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.take(rate, t0), Ok(()));
        }
        assert_eq!(b.take(rate, t0), Err(Duration::from_millis(500)));
        let later = t0 + Duration::from_millis(500);
        assert_eq!(b.take(rate, later), Ok(()), "one token every half second");
        assert!(b.take(rate, later).is_err());
        assert!(!b.is_full(rate, later));
        assert!(b.is_full(rate, later + Duration::from_secs(2)));
    }

    #[test]
    fn a_rate_that_is_off_refuses_nothing() {
        let mut b = Bucket::default();
        let off = Rate {
            per_second: 0,
            burst: 5,
        };
        let now = Instant::now();
        for _ in 0..100 {
            assert_eq!(b.take(off, now), Ok(()));
        }
    }

    #[test]
    fn buckets_by_key_are_forgotten_once_full() {
        let buckets = Buckets::new(Rate {
            per_second: 1000,
            burst: 1,
        });
        let t0 = Instant::now();
        assert_eq!(buckets.take_at("a", t0), Ok(()));
        assert!(
            buckets.take_at("a", t0).is_err(),
            "one key's bucket is empty"
        );
        assert_eq!(buckets.take_at("b", t0), Ok(()), "another key has its own");
        assert_eq!(buckets.tracked(), 2);
        // A sweep later, both are full again and forgotten.
        assert_eq!(buckets.take_at("c", t0 + SWEEP_EVERY * 2), Ok(()));
        assert_eq!(buckets.tracked(), 1, "only the bucket just drawn from");
    }

    #[test]
    fn a_token_given_back_can_be_taken_again_up_to_the_burst() {
        let buckets = Buckets::new(Rate {
            per_second: 1,
            burst: 2,
        });
        let t0 = Instant::now();
        assert_eq!(buckets.take_at("a", t0), Ok(()));
        assert_eq!(buckets.take_at("a", t0), Ok(()));
        assert!(buckets.take_at("a", t0).is_err(), "the burst is used up");
        buckets.give_back(&"a");
        assert_eq!(buckets.take_at("a", t0), Ok(()), "the token given back");
        buckets.give_back(&"a");
        buckets.give_back(&"a");
        buckets.give_back(&"a");
        assert_eq!(buckets.take_at("a", t0), Ok(()));
        assert_eq!(buckets.take_at("a", t0), Ok(()));
        assert!(
            buckets.take_at("a", t0).is_err(),
            "never more than the burst"
        );
    }
}
