//! `: keepalive` comments: one timer for every stream, spread over the period.
//!
//! Proxies and load balancers close connections that stay silent too long (nginx's
//! `proxy_read_timeout` is 60 s by default), so a stream that has nothing to say gets a comment
//! now and then. Two rules keep that cheap:
//!
//! - **Spread.** Streams are split into [`BUCKETS`] groups by place id, and the timer wakes one
//!   group every `period / BUCKETS`. One tick for every stream at once made every connection
//!   write in the same millisecond: with 10,000 streams per gateway, a burst of CPU that
//!   stalled joins for hundreds of milliseconds every period (BENCHMARKS.md).
//! - **Only when silent.** A stream that wrote anything in the last half period skips the
//!   comment. Streams whose line moves get an event every tick and never need one.
//!
//! So a stream is silent for at most 1.5 periods (it wrote just under half a period before its
//! group's tick, then nothing), and an idle one gets exactly one comment per period.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Groups of streams woken in turn (at the default 15 s period: one group every 234 ms).
pub(crate) const BUCKETS: usize = 64;

pub(crate) struct Keepalive {
    period: Duration,
    buckets: Box<[watch::Sender<()>]>,
}

impl Keepalive {
    pub(crate) fn new(period: Duration) -> Self {
        Self {
            period,
            buckets: (0..BUCKETS).map(|_| watch::channel(()).0).collect(),
        }
    }

    /// The tick a stream keyed by `key` (its place id) listens to.
    pub(crate) fn subscribe(&self, key: u64) -> watch::Receiver<()> {
        self.buckets[(key % BUCKETS as u64) as usize].subscribe()
    }

    /// Whether a stream that last wrote at `last_write` should send a comment on its tick.
    pub(crate) fn due(&self, last_write: Instant) -> bool {
        last_write.elapsed() >= self.period / 2
    }

    /// Wakes one group every `period / BUCKETS`, in turn, until `stop`.
    pub(crate) async fn run(&self, stop: CancellationToken) {
        let step = self.period / BUCKETS as u32;
        let mut every = tokio::time::interval_at(Instant::now() + step, step);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        for bucket in self.buckets.iter().cycle() {
            tokio::select! {
                () = stop.cancelled() => break,
                _ = every.tick() => bucket.send_modify(|()| ()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn groups_are_woken_in_turn_over_the_period() {
        // 64 groups over 640 ms: one every 10 ms.
        let k = std::sync::Arc::new(Keepalive::new(Duration::from_millis(640)));
        let stop = CancellationToken::new();
        let mut rxs: Vec<_> = (0..BUCKETS as u64).map(|key| k.subscribe(key)).collect();
        let same_group = k.subscribe(BUCKETS as u64);
        let timer = tokio::spawn({
            let (k, stop) = (k.clone(), stop.clone());
            async move { k.run(stop).await }
        });
        // Group 0 is woken first, alone: the last group a period later.
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

    #[tokio::test]
    async fn a_stream_that_wrote_recently_skips_its_comment() {
        let k = Keepalive::new(Duration::from_secs(10));
        assert!(!k.due(Instant::now()), "just wrote");
        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(6))
            .expect("the clock started long enough ago");
        assert!(k.due(long_ago), "silent for more than half the period");
    }
}
