//! A held connection's channel: the latest update for its one receiver, and the waker of the
//! task that waits for it.
//!
//! It keeps `tokio::sync::watch`'s meaning, for the one receiver a held stream has: a new
//! value replaces one not yet seen (a slow browser gets the newest position, never a backlog),
//! `changed` waits for a value not yet seen and fails once the sender is gone and every value
//! was seen, and a value can be changed in place ([`Sender::send_if_modified`]).
//!
//! Why not `watch` itself: it is built for many receivers. Each send wakes them through eight
//! `Notify` lists (its `BigNotify`), and each wait registers on one: in a profile of an
//! admission burst, a large share of a gateway's own CPU per event, and the lists make each
//! held connection's channel larger (figures: BENCHMARKS.md, "Where the time goes"). Here the
//! value, its version and the one waker sit under one mutex: a send is a lock, a version bump
//! and at most one wake; a wait is a lock and a version check. The mutex is never held across
//! an `await` or a write (the hub sends while it holds its own lock: see
//! `stream::pump::write_position`).

use std::future::poll_fn;
use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

/// The receiver's side is gone or the sender's: `changed` found no value to wait for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

struct State<T> {
    value: T,
    /// Bumped by every change; the receiver has seen the value when its own count matches.
    version: u64,
    /// The sender was dropped: no later value will come.
    closed: bool,
    /// The task waiting in [`Receiver::changed`], if any.
    waker: Option<Waker>,
}

struct Shared<T> {
    state: Mutex<State<T>>,
}

impl<T> Shared<T> {
    /// The state, also after a panic elsewhere while it was held (a value is replaced
    /// whole or changed in place by a closure that cannot leave it half-written in a way
    /// that matters here: the next update replaces it).
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Sends the latest value; dropping it ends the channel.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// Receives the latest value.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// The version last seen.
    seen: u64,
}

/// A channel holding `init`, not yet seen by the receiver as a change (as `watch`: the first
/// `changed` waits for the next value; `borrow_and_update` reads the current one).
pub fn channel<T>(init: T) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            value: init,
            version: 0,
            closed: false,
            waker: None,
        }),
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared, seen: 0 },
    )
}

/// The value, read under the channel's lock: keep it briefly.
pub struct Ref<'a, T> {
    guard: MutexGuard<'a, State<T>>,
}

impl<T> Deref for Ref<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard.value
    }
}

impl<T> Sender<T> {
    /// Replaces the value and wakes the receiver.
    pub fn send(&self, value: T) {
        self.send_if_modified(|v| {
            *v = value;
            true
        });
    }

    /// Changes the value in place with `modify`; when it returns `true` (it changed something
    /// the receiver should hear), wakes the receiver. Returns what `modify` returned.
    pub fn send_if_modified(&self, modify: impl FnOnce(&mut T) -> bool) -> bool {
        let waker = {
            let mut st = self.shared.lock();
            if !modify(&mut st.value) {
                return false;
            }
            st.version += 1;
            st.waker.take()
        };
        // Woken after the lock is released: the receiver's task may run on another thread and
        // lock it at once.
        if let Some(w) = waker {
            w.wake();
        }
        true
    }

    /// The current value.
    pub fn borrow(&self) -> Ref<'_, T> {
        Ref {
            guard: self.shared.lock(),
        }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut st = self.shared.lock();
            st.closed = true;
            st.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// Waits for a value not seen yet and marks it seen. `Err` once the sender is gone and
    /// nothing new is left to see.
    pub async fn changed(&mut self) -> Result<(), Closed> {
        poll_fn(|cx| {
            // Within the task's budget, as `watch`'s `changed` is: a stream whose updates keep
            // coming, each written at once, still yields to the other tasks of its thread.
            let coop = std::task::ready!(tokio::task::coop::poll_proceed(cx));
            let mut st = self.shared.lock();
            if st.version != self.seen {
                self.seen = st.version;
                coop.made_progress();
                return Poll::Ready(Ok(()));
            }
            if st.closed {
                coop.made_progress();
                return Poll::Ready(Err(Closed));
            }
            // The same task polls again and again (a held stream's): keep its waker then.
            match &mut st.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                slot => *slot = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
        .await
    }

    #[cfg(test)]
    /// Whether a value not seen yet is there; `Err` once the sender is gone (as `watch`).
    pub fn has_changed(&self) -> Result<bool, Closed> {
        let st = self.shared.lock();
        if st.closed {
            return Err(Closed);
        }
        Ok(st.version != self.seen)
    }

    #[cfg(test)]
    /// Marks the current value seen without reading it.
    pub fn mark_unchanged(&mut self) {
        self.seen = self.shared.lock().version;
    }

    #[cfg(test)]
    /// The current value, without marking it seen.
    pub fn borrow(&self) -> Ref<'_, T> {
        Ref {
            guard: self.shared.lock(),
        }
    }

    /// The current value, marked seen.
    pub fn borrow_and_update(&mut self) -> Ref<'_, T> {
        let guard = self.shared.lock();
        self.seen = guard.version;
        Ref { guard }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A slow receiver sees the newest value once, not a backlog; a change in place that says
    /// "nothing changed" wakes nobody; the first value is read, not awaited.
    #[tokio::test]
    async fn the_receiver_sees_the_latest_value_once() {
        let (tx, mut rx) = channel(1);
        assert_eq!(*rx.borrow_and_update(), 1);
        assert_eq!(rx.has_changed(), Ok(false));
        tx.send(2);
        tx.send(3);
        assert_eq!(rx.has_changed(), Ok(true));
        assert_eq!(rx.changed().await, Ok(()));
        assert_eq!(*rx.borrow_and_update(), 3);
        assert!(!tx.send_if_modified(|_| false));
        assert_eq!(rx.has_changed(), Ok(false));
        assert!(tx.send_if_modified(|v| {
            *v += 1;
            true
        }));
        assert_eq!(*tx.borrow(), 4);
        rx.mark_unchanged();
        assert_eq!(rx.has_changed(), Ok(false));
    }

    /// A task waiting in `changed` is woken by a send from another task, and by the sender's
    /// drop, after which `changed` fails (a value sent before the drop is still seen first).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiting_task_is_woken_by_a_send_and_by_the_end() {
        let (tx, mut rx) = channel(0u64);
        let waiter = tokio::spawn(async move {
            let mut got = Vec::new();
            while rx.changed().await.is_ok() {
                got.push(*rx.borrow_and_update());
            }
            got
        });
        for i in 1..=1000 {
            tx.send(i);
            if i % 100 == 0 {
                tokio::task::yield_now().await;
            }
        }
        drop(tx);
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter ends")
            .expect("no panic");
        // Whatever it saw, it saw in order, and it saw the last value.
        assert!(got.windows(2).all(|w| w[0] < w[1]), "{got:?}");
        assert_eq!(got.last(), Some(&1000));
    }

    /// A task parked in `changed` is woken by a send while the sender lives on (not only by
    /// the sender's drop): on one thread, the waiter is parked before the send, and runs again
    /// only if the send wakes it.
    #[tokio::test]
    async fn a_parked_task_is_woken_by_a_send_alone() {
        let (tx, mut rx) = channel(0u64);
        let waiter = tokio::spawn(async move {
            rx.changed().await.expect("the sender lives");
            *rx.borrow_and_update()
        });
        // The waiter runs until it parks in `changed`.
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        tx.send(7);
        let got = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("woken by the send")
            .expect("no panic");
        assert_eq!(got, 7);
        drop(tx);
    }

    /// Dropped with nothing unseen, `changed` fails at once and `has_changed` says so.
    #[tokio::test]
    async fn a_dropped_sender_ends_the_channel() {
        let (tx, mut rx) = channel("first");
        drop(tx);
        assert_eq!(rx.has_changed(), Err(Closed));
        assert_eq!(rx.changed().await, Err(Closed));
        assert_eq!(*rx.borrow(), "first");
    }
}
