//! `: keepalive` comments: one timer for every stream, spread over the period.
//!
//! Proxies and load balancers close connections that stay silent too long (nginx's
//! `proxy_read_timeout` is 60 s by default), so a stream that has nothing to say gets a comment.
//! The contract: no stream is silent for longer than the period. Three rules keep that cheap:
//!
//! - **Spread.** Streams are split into [`BUCKETS`] groups by place id, and the timer wakes one
//!   group at a time, in turn. One tick for every stream at once made every connection write
//!   in the same millisecond: a burst of CPU that stalled joins once per period
//!   (BENCHMARKS.md).
//! - **Twice per period.** Each group is woken every half period. At each tick a stream decides
//!   whether it may stay silent until its group's next tick; with a single tick per period it
//!   could only keep the bound by writing at every tick, events or not.
//! - **Only when needed.** A stream gets a comment at a tick when waiting for the next one
//!   would leave it silent for longer than the period ([`Keepalive::due`]). Streams whose line
//!   moves get events and never need one.
//!
//! So a stream is silent for at most one period, plus however late the timer and the stream's
//! task run, and an idle stream gets exactly one comment per period: its comment is written
//! just after a tick, so half a period later it has been silent for just under half a period
//! and skips, and a period later it comments again.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Groups of streams woken in turn (at the default 15 s period: one group every 117 ms).
pub(crate) const BUCKETS: usize = 64;

/// How many times per period each group is woken.
const TICKS_PER_PERIOD: u32 = 2;

/// The gateway-wide keepalive timer. Each group's channel carries the instant its latest tick
/// was due, so every stream of the group judges its silence against the same moment, however
/// late its own task wakes.
pub(crate) struct Keepalive {
    period: Duration,
    buckets: Box<[watch::Sender<Instant>]>,
}

impl Keepalive {
    pub(crate) fn new(period: Duration) -> Self {
        let now = Instant::now();
        Self {
            period,
            buckets: (0..BUCKETS).map(|_| watch::channel(now).0).collect(),
        }
    }

    /// The ticks a stream keyed by `key` (its place id) listens to.
    pub(crate) fn subscribe(&self, key: u64) -> watch::Receiver<Instant> {
        self.buckets[(key % BUCKETS as u64) as usize].subscribe()
    }

    /// Whether a stream that last wrote at `last_write` gets a comment at its group's tick due
    /// at `tick`: yes when, were it skipped, the group's next tick would find the stream silent
    /// for longer than the period.
    pub(crate) fn due(&self, last_write: Instant, tick: Instant) -> bool {
        tick.saturating_duration_since(last_write) + self.group_interval() > self.period
    }

    /// Time between two ticks of the same group.
    fn group_interval(&self) -> Duration {
        self.period / TICKS_PER_PERIOD
    }

    /// Wakes one group every `period / (2 × BUCKETS)`, in turn, until `stop`.
    ///
    /// A timer held up (a loaded machine) wakes the groups it missed at once, each with its own
    /// due instant, and keeps its schedule: a group's ticks stay half a period apart. Were the
    /// schedule shifted by the delay instead (tokio's `Delay`), a group's next tick would come
    /// more than half a period after the last, and an idle stream that commented at the last
    /// would be due again: two comments a period for as long as the machine is loaded.
    pub(crate) async fn run(&self, stop: CancellationToken) {
        let step = self.group_interval() / BUCKETS as u32;
        let mut every = tokio::time::interval_at(Instant::now() + step, step);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        for bucket in self.buckets.iter().cycle() {
            tokio::select! {
                () = stop.cancelled() => break,
                due = every.tick() => {
                    bucket.send_replace(due);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn groups_are_woken_in_turn_twice_per_period() {
        // 64 groups, each woken twice per 1,280 ms period: one group every 10 ms.
        let k = std::sync::Arc::new(Keepalive::new(Duration::from_millis(1280)));
        let stop = CancellationToken::new();
        let mut rxs: Vec<_> = (0..BUCKETS as u64).map(|key| k.subscribe(key)).collect();
        let same_group = k.subscribe(BUCKETS as u64);
        let timer = tokio::spawn({
            let (k, stop) = (k.clone(), stop.clone());
            async move { k.run(stop).await }
        });
        // Group 0 is woken first, alone: the last group half a period later.
        rxs[0].changed().await.expect("the timer keeps its senders");
        assert!(
            same_group.has_changed().expect("sender alive"),
            "key 64 is in group 0"
        );
        let last = BUCKETS - 1;
        assert!(
            !rxs[last].has_changed().expect("sender alive"),
            "woken with group 0"
        );
        rxs[last]
            .changed()
            .await
            .expect("the timer keeps its senders");
        // By then every group in between was woken.
        for (key, rx) in rxs.iter().enumerate().take(last).skip(1) {
            assert!(
                rx.has_changed().expect("sender alive"),
                "group {key} not woken"
            );
        }
        stop.cancel();
        timer.await.expect("the timer stops");
    }

    /// A timer polled late (by more than tokio's 5 ms leeway) keeps each group's ticks half a
    /// period apart: the late tick carries its own due instant and the schedule does not move.
    /// The test holds its one-thread runtime (and so the timer) up for 30 ms after group 0's
    /// first tick.
    #[tokio::test]
    async fn a_late_timer_keeps_each_groups_ticks_half_a_period_apart() {
        // 64 groups, each woken twice per 320 ms period: one group every 2.5 ms.
        let k = std::sync::Arc::new(Keepalive::new(Duration::from_millis(320)));
        let stop = CancellationToken::new();
        let mut group = k.subscribe(0);
        let timer = tokio::spawn({
            let (k, stop) = (k.clone(), stop.clone());
            async move { k.run(stop).await }
        });
        group.changed().await.expect("the timer keeps its senders");
        let first = *group.borrow_and_update();
        std::thread::sleep(Duration::from_millis(30));
        group.changed().await.expect("the timer keeps its senders");
        let second = *group.borrow_and_update();
        assert_eq!(second - first, k.group_interval(), "group 0's ticks");
        stop.cancel();
        timer.await.expect("the timer stops");
    }

    #[tokio::test]
    async fn a_stream_that_wrote_recently_skips_its_comment() {
        let k = Keepalive::new(Duration::from_secs(10));
        let now = Instant::now();
        assert!(!k.due(now, now), "just wrote");
        let long_ago = now
            .checked_sub(Duration::from_secs(6))
            .expect("the clock started long enough ago");
        assert!(k.due(long_ago, now), "silent for more than half the period");
    }

    /// Walks one group's ticks (due every half period) from a stream's last write, writing a
    /// comment whenever one is due, a little after the tick (as a real write lands).
    fn comments(k: &Keepalive, start: Instant, last_write: Instant, periods: u32) -> Vec<Instant> {
        let late = Duration::from_millis(3);
        let mut last = last_write;
        let mut written = Vec::new();
        for i in 1..=periods * TICKS_PER_PERIOD {
            let tick = start + k.group_interval() * i;
            if tick > last && k.due(last, tick) {
                last = tick + late;
                written.push(last);
            }
        }
        written
    }

    #[tokio::test]
    async fn no_stream_is_silent_longer_than_the_period() {
        let period = Duration::from_secs(10);
        let k = Keepalive::new(period);
        let start = Instant::now();
        let late = Duration::from_millis(3);
        // A stream's last event at any moment between two of its group's ticks.
        for ms in (0..k.group_interval().as_millis() as u64).step_by(7) {
            let wrote = start + Duration::from_millis(ms);
            let written = comments(&k, start, wrote, 6);
            let mut prev = wrote;
            for at in &written {
                assert!(
                    *at - prev <= period + late,
                    "silent {:?} after an event {ms} ms into the half period",
                    *at - prev
                );
                prev = *at;
            }
            // An idle stream: one comment per period.
            assert!(
                (5..=6).contains(&written.len()),
                "{} comments in 6 periods",
                written.len()
            );
        }
    }
}
