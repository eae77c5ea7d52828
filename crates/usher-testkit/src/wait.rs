//! Waiting on conditions, never on luck: [`eventually`] polls a check until it holds, and every
//! limit a test waits under is scaled by one patience multiplier ([`patience`]).
//!
//! A fixed sleep "long enough for X" is a guess that a loaded machine proves wrong; polling the
//! condition returns as soon as it holds and fails with what it saw. The limits only bound a
//! failing test: `USHER_TEST_PATIENCE=3 make test` on a slow machine gives every wait three
//! times as long, without editing a test.

use std::fmt::{Debug, Display};
use std::ops::AsyncFnMut;
use std::sync::OnceLock;
use std::time::Duration;

/// How often [`eventually`] checks again.
pub const POLL: Duration = Duration::from_millis(20);

/// The limit of [`eventually`], before [`patience`]: long enough for any wait on a healthy
/// stack of debug builds on a loaded machine, short enough that a real failure reports soon.
pub const LIMIT: Duration = Duration::from_secs(10);

/// Time for an event a server has already sent to reach a test's reader over loopback. For
/// negative checks ("nothing was shown") once the server has acknowledged what it was sent
/// (e.g. [`crate::probe::RedisProbe::gateway_applied`]): the server's side is then known to be
/// done, and this covers only the socket and the reader's task.
pub const DELIVERY: Duration = Duration::from_millis(100);

/// The multiplier every wait's limit is scaled by: `USHER_TEST_PATIENCE` (a positive number,
/// 1 when unset). Read once per test process.
///
/// # Panics
/// When the variable is set to something other than a positive number: a typo must not
/// silently run the suite with the default.
pub fn patience() -> f64 {
    static PATIENCE: OnceLock<f64> = OnceLock::new();
    *PATIENCE.get_or_init(|| match std::env::var("USHER_TEST_PATIENCE") {
        Err(_) => 1.0,
        Ok(v) => match v.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && p > 0.0 => p,
            _ => panic!("USHER_TEST_PATIENCE={v:?}: expected a positive number such as 2 or 0.5"),
        },
    })
}

/// `limit` scaled by [`patience`]: what a test waits at most for something that should happen
/// within `limit` on a healthy machine.
pub fn patient(limit: Duration) -> Duration {
    limit.mul_f64(patience())
}

/// Runs `fut` under `limit` scaled by [`patience`]; the error names `what` it waited for.
pub async fn within<T>(
    what: &str,
    limit: Duration,
    fut: impl std::future::Future<Output = T>,
) -> anyhow::Result<T> {
    let limit = patient(limit);
    tokio::time::timeout(limit, fut)
        .await
        .map_err(|_| anyhow::anyhow!("timed out after {limit:?} waiting for {what}"))
}

/// What a check of [`eventually`] says: done with a value, or not yet with what it saw.
pub trait Outcome {
    /// What the wait hands back once the check holds.
    type Value;
    /// `Ok` once the check holds; otherwise the observation to report if it never does.
    fn into_outcome(self) -> Result<Self::Value, String>;
}

impl Outcome for bool {
    type Value = ();
    fn into_outcome(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the check was false".to_owned())
        }
    }
}

impl<T> Outcome for Option<T> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.ok_or_else(|| "the check found nothing".to_owned())
    }
}

impl<T, E: Display> Outcome for Result<T, E> {
    type Value = T;
    fn into_outcome(self) -> Result<T, String> {
        self.map_err(|e| format!("{e:#}"))
    }
}

/// A check's observation for the failure message: `Err(Seen(x))` reports `x` with `{:?}`.
pub struct Seen<T>(pub T);

impl<T: Debug> Display for Seen<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Polls `check` every [`POLL`] until it holds, for at most [`LIMIT`] × [`patience`]; hands back
/// what it returned. `check` returns a `bool`, an `Option<T>` (`Some` when done) or a
/// `Result<T, E>` (`Err` carrying the observation so far, e.g. `Err(Seen(waiting))`).
///
/// ```no_run
/// # async fn demo(w: usher_testkit::sse::Watcher) -> anyhow::Result<()> {
/// use usher_testkit::wait::eventually;
/// let admitted = eventually("the browser is admitted", async || w.last("admitted")).await?;
/// # Ok(()) }
/// ```
///
/// # Errors
/// When the limit passes: the error says `what` was awaited, for how long, and the last
/// observation.
pub async fn eventually<O: Outcome>(
    what: &str,
    check: impl AsyncFnMut() -> O,
) -> anyhow::Result<O::Value> {
    eventually_within(what, LIMIT, check).await
}

/// [`eventually`] with a limit other than [`LIMIT`] (still scaled by [`patience`]): for waits
/// that include a known slow step, such as a Redis failover or a draw over a large pre-queue.
///
/// # Errors
/// As [`eventually`].
pub async fn eventually_within<O: Outcome>(
    what: &str,
    limit: Duration,
    mut check: impl AsyncFnMut() -> O,
) -> anyhow::Result<O::Value> {
    let limit = patient(limit);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        // A check that never returns (a request to a server that took it and never answers)
        // must fail the wait too, not hang the test: it gets until the deadline, and at least
        // a second however late it starts.
        let cutoff = deadline.max(tokio::time::Instant::now() + patient(Duration::from_secs(1)));
        let Ok(outcome) = tokio::time::timeout_at(cutoff, check()).await else {
            anyhow::bail!(
                "waited {limit:?} for {what}; the last check was still running at the end"
            );
        };
        let last = match outcome.into_outcome() {
            Ok(v) => return Ok(v),
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("waited {limit:?} for {what}; last seen: {last}");
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the wall clock is past `deadline_ms` (ms since the epoch), as the servers read
/// it: for end-to-end tests of a time rule, whose condition is a time the rule itself names
/// (a puzzle's `expires_at`, an admission plus its grace), not a guessed pause.
///
/// # Errors
/// When the clock does not get there within [`LIMIT`] × [`patience`] (a deadline too far off).
pub async fn clock_past(what: &str, deadline_ms: u64) -> anyhow::Result<()> {
    eventually(what, async || usher_core::time::now_ms() > deadline_ms).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn eventually_hands_back_what_the_check_found() -> anyhow::Result<()> {
        let mut n = 0;
        let v = eventually("the third call", async || {
            n += 1;
            (n == 3).then_some(n * 10)
        })
        .await?;
        assert_eq!(v, 30);
        Ok(())
    }

    #[tokio::test]
    async fn a_failed_wait_names_what_it_waited_for_and_the_last_observation() {
        let e = eventually_within("seven", Duration::from_millis(60), async || {
            Err::<(), _>(Seen(6))
        })
        .await
        .expect_err("never holds");
        let text = e.to_string();
        assert!(text.contains("for seven"), "{text}");
        assert!(text.ends_with("last seen: 6"), "{text}");
    }

    #[tokio::test]
    async fn a_check_that_never_returns_fails_the_wait_instead_of_hanging_it() {
        // A request a server took and never answered: the wait ends at its limit (at least
        // a second after the check started), and says so.
        let started = tokio::time::Instant::now();
        let e = within(
            "the wait to end by itself",
            Duration::from_secs(30),
            eventually_within("an answer", Duration::from_millis(60), async || {
                std::future::pending::<bool>().await
            }),
        )
        .await
        .expect("the wait ended")
        .expect_err("the check never returns");
        let text = e.to_string();
        assert!(text.contains("for an answer"), "{text}");
        assert!(text.contains("still running"), "{text}");
        assert!(
            started.elapsed() >= patient(Duration::from_secs(1)),
            "{text}"
        );
    }

    #[test]
    fn patience_defaults_to_one() {
        // The unit tests run without USHER_TEST_PATIENCE unless someone sets it on purpose.
        if std::env::var_os("USHER_TEST_PATIENCE").is_none() {
            assert_eq!(patient(Duration::from_secs(3)), Duration::from_secs(3));
        }
    }
}
