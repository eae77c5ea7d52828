//! Redis out of memory (`maxmemory` reached with the `noeviction` policy): how it is told
//! apart from other failures, and how it is logged without one line per request.
//!
//! Under `noeviction` Redis refuses every command that may grow memory (`OOM command not
//! allowed…`) and keeps serving reads and deletes. Every join then fails the same way, so
//! logging each would write thousands of identical lines while the operator needs one.

use std::sync::atomic::{AtomicU64, Ordering};

use super::StoreError;
use crate::time::now_ms;

/// Whether Redis refused a command (or a script's write) for lack of memory. A script's
/// error keeps the `OOM` code since Redis 7; older servers put it in the message.
pub(super) fn is_oom(e: &redis::RedisError) -> bool {
    e.code() == Some("OOM") || e.to_string().contains("OOM command not allowed")
}

/// A log of out-of-memory failures that writes at most one line per period, saying how many
/// failures it left out since the last line. One per process, shared by its tasks.
#[derive(Debug)]
pub struct OomLog {
    period_ms: u64,
    /// When the last line was written (ms since the epoch; 0: never).
    last_ms: AtomicU64,
    /// Failures since the last line.
    unlogged: AtomicU64,
}

impl OomLog {
    /// A log writing at most one line every `period_ms`.
    pub const fn new(period_ms: u64) -> Self {
        Self {
            period_ms,
            last_ms: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
        }
    }

    /// Counts an out-of-memory failure of `what`, and logs it when the period since the last
    /// line is over. Returns whether it wrote a line.
    pub fn report(&self, what: &str, e: &StoreError) -> bool {
        self.unlogged.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if last != 0 && now < last + self.period_ms {
            return false;
        }
        if self
            .last_ms
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false; // another task logs this period
        }
        let failures = self.unlogged.swap(0, Ordering::Relaxed);
        tracing::error!(
            error = %e,
            failures,
            period_ms = self.period_ms,
            "REDIS OUT OF MEMORY: {what} refused (maxmemory reached, policy noeviction); \
             close queues or raise maxmemory. Further failures are counted, one line per period"
        );
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oom() -> StoreError {
        StoreError::OutOfMemory(redis::RedisError::from((
            redis::ErrorKind::Io,
            "OOM command not allowed when used memory > 'maxmemory'.",
        )))
    }

    #[test]
    fn logs_one_line_per_period() {
        let log = OomLog::new(60_000);
        assert!(log.report("a join", &oom()));
        for _ in 0..1000 {
            assert!(!log.report("a join", &oom()));
        }
        assert_eq!(log.unlogged.load(Ordering::Relaxed), 1000);
    }
}
