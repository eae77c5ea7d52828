//! Sleeps to about a tenth of a millisecond, where tokio's timer gives the millisecond.
//!
//! tokio's timer wheel counts whole milliseconds from its runtime's start and its driver parks
//! in `epoll_wait` for whole milliseconds, so `tokio::time::sleep` ends up to two milliseconds
//! late. That is right for timeouts and wrong for a moment everybody waits on: a tick's
//! admissions released 1–2 ms after their admission time kept both cores of the reference
//! machine idle while every browser of the burst waited (BENCHMARKS.md, "An admission
//! burst"). [`sleep`] hands its deadline to one timer thread per process, which parks on a
//! futex with a timeout (the kernel's high-resolution timers, 50 µs of timer slack) and
//! answers each waiter through a oneshot channel when its deadline passes: about 0.1 ms late
//! on an idle machine (BENCHMARKS.md). One thread however many wait (every queue of a tick
//! waits for the same instant); no spinning.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

/// A waiter: when to answer it, and where.
struct Due {
    at: Instant,
    /// Arrival order, so that two waiters for the same instant compare (and are answered) in
    /// the order they came.
    seq: u64,
    tx: oneshot::Sender<()>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// A waiter's request: its deadline, and where to answer it.
type Request = (Instant, oneshot::Sender<()>);

/// The timer thread's inbox; `None` when the thread could not be started.
static TIMER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();

fn timer() -> Option<&'static mpsc::Sender<Request>> {
    TIMER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel();
            match std::thread::Builder::new()
                .name("usher-precise-timer".into())
                .spawn(move || answer_when_due(&rx))
            {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot start the precise timer thread; sleeps end on tokio's timer, up to 2 ms late");
                    None
                }
            }
        })
        .as_ref()
}

/// The timer thread: answers every waiter whose deadline passed, then parks until the next
/// deadline or the next waiter, whichever comes first. The inbox's sender lives in a static,
/// so the loop runs as long as the process. A waiter that gave up (its receiver dropped) is
/// answered into the void at its deadline, or dropped sooner when the heap has doubled since
/// it was last cleared of them: many long sleeps given up on do not pile up.
fn answer_when_due(rx: &mpsc::Receiver<Request>) {
    let mut due: BinaryHeap<Reverse<Due>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut cleared_at = 0usize;
    loop {
        let now = Instant::now();
        while due.peek().is_some_and(|Reverse(d)| d.at <= now) {
            if let Some(Reverse(d)) = due.pop() {
                let _ = d.tx.send(());
            }
        }
        // The time again: answering many waiters takes some.
        let next = match due.peek() {
            Some(Reverse(d)) => rx.recv_timeout(d.at.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok((at, tx)) => {
                seq += 1;
                due.push(Reverse(Due { at, seq, tx }));
                if due.len() > 2 * cleared_at.max(64) {
                    due.retain(|Reverse(d)| !d.tx.is_closed());
                    cleared_at = due.len();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sleeps for `d`, ending about a tenth of a millisecond after it (a loaded machine may add its
/// own delay, as to anything). Should the timer thread be missing (it could not be started),
/// or `d` be past what an `Instant` can hold, tokio's millisecond sleep: a later end, never an
/// earlier one.
pub async fn sleep(d: Duration) {
    if d.is_zero() {
        return;
    }
    let Some(at) = Instant::now().checked_add(d) else {
        return tokio::time::sleep(d).await;
    };
    let (tx, rx) = oneshot::channel();
    if let Some(timer) = timer() {
        if timer.send((at, tx)).is_ok() && rx.await.is_ok() {
            return;
        }
    }
    tokio::time::sleep_until(at.into()).await;
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    /// Never early, whatever the length; the precision itself is measured where it matters
    /// (BENCHMARKS.md), not asserted here: the host may stall a vCPU for tens of milliseconds.
    #[tokio::test]
    async fn a_precise_sleep_is_never_short() {
        for us in [1, 150, 999, 1_000, 1_500, 2_999, 20_000] {
            let d = Duration::from_micros(us);
            let began = Instant::now();
            super::sleep(d).await;
            assert!(
                began.elapsed() >= d,
                "{us} µs: woke after {:?}",
                began.elapsed()
            );
        }
    }

    /// Waiters are answered by deadline, not by arrival: a short sleep that came after a long
    /// one ends first. (A first-in-first-out timer would hold the short one for the long one's
    /// two seconds.)
    #[tokio::test]
    async fn a_shorter_sleep_that_came_later_ends_first() {
        let long = super::sleep(Duration::from_secs(2));
        tokio::pin!(long);
        // The long one registers with the timer thread first.
        assert!(futures::poll!(long.as_mut()).is_pending());
        tokio::select! {
            biased;
            () = super::sleep(Duration::from_millis(1)) => {}
            () = &mut long => panic!("the 2 s sleep ended before the 1 ms one"),
        }
        // Answered at its own deadline, not with the short one.
        assert!(
            futures::poll!(long.as_mut()).is_pending(),
            "the 2 s sleep ended with the 1 ms one"
        );
    }

    /// Many at once, for deadlines in any order and some the same: each ends, none early.
    /// Sleeps given up on, short and long, hold none of the others.
    #[tokio::test]
    async fn many_precise_sleeps_each_end_at_their_own_time() {
        for d in [Duration::from_millis(2), Duration::from_secs(5)] {
            let gave_up = tokio::time::timeout(Duration::from_micros(100), super::sleep(d)).await;
            assert!(gave_up.is_err());
        }
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..64u64 {
            let d = Duration::from_micros(500 + (i * 7_919) % 5_000);
            tasks.spawn(async move {
                let t = Instant::now();
                super::sleep(d).await;
                (d, t.elapsed())
            });
        }
        let mut ended = 0;
        while let Some(r) = tasks.join_next().await {
            let (d, took) = r.expect("a sleep does not panic");
            assert!(took >= d, "{d:?}: woke after {took:?}");
            ended += 1;
        }
        assert_eq!(ended, 64);
    }

    /// A length past what an `Instant` holds does not panic: it is tokio's sleep's to wait.
    #[tokio::test]
    async fn an_endless_sleep_does_not_panic() {
        let endless = tokio::time::timeout(Duration::from_millis(5), super::sleep(Duration::MAX));
        assert!(endless.await.is_err());
    }

    /// On a one-thread runtime too (the gateway's and the bench's), where the reactor is
    /// driven by the same thread that waits.
    #[test]
    fn a_precise_sleep_ends_on_a_one_thread_runtime() -> std::io::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let d = Duration::from_micros(2_500);
        let began = Instant::now();
        rt.block_on(super::sleep(d));
        assert!(began.elapsed() >= d);
        Ok(())
    }
}
