//! Finished connections kept open and idle for a while, as a browser's connection pool keeps
//! them, then closed: spread over 50–150% of `--linger-ms`, so closes do not come in bursts.
//!
//! A connection is finished inside the burst being measured (its `admitted` event), so keeping
//! it costs no task and no timer of its own: it goes into a bucket of [`BUCKET`] by the time
//! it is due, and one task per worker ([`Lingering::close_when_due`]) drops each bucket once
//! its time has come. The task is not one of the connections' tasks: a worker that has
//! reported keeps its lingering connections open until the coordinator says `stop`
//! (`crate::worker`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

/// How finely close times are kept: a connection is closed never early, and at most two of
/// these late.
pub const BUCKET: Duration = Duration::from_millis(10);

/// The connections waiting to be closed, by the bucket they are due in.
pub struct Lingering {
    linger: Duration,
    epoch: Instant,
    due: Mutex<BTreeMap<u64, Vec<TcpStream>>>,
}

impl Lingering {
    /// Keeps finished connections for 50–150% of `linger` (none when it is zero).
    pub fn new(linger: Duration) -> Self {
        Self {
            linger,
            epoch: Instant::now(),
            due: Mutex::new(BTreeMap::new()),
        }
    }

    /// Keeps `stream` open for a spread-out 50–150% of the linger, then closes it (at once
    /// when the linger is zero). `spread` (any number) picks where in that range: the caller's
    /// arbitrary enough choice.
    pub fn keep(&self, stream: TcpStream, spread: u64) {
        if self.linger.is_zero() {
            return;
        }
        let wait = self.linger / 2 + self.linger.mul_f64((spread % 1000) as f64 / 1000.0);
        let bucket = self.bucket_of(Instant::now() + wait);
        if let Ok(mut due) = self.due.lock() {
            due.entry(bucket).or_default().push(stream);
        }
    }

    /// How many connections are kept now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.due
            .lock()
            .map(|d| d.values().map(Vec::len).sum())
            .unwrap_or(0)
    }

    /// Nothing is kept now.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes each connection once its bucket is due; runs until the worker exits.
    pub async fn close_when_due(self: std::sync::Arc<Self>) {
        let mut every = tokio::time::interval(BUCKET);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            every.tick().await;
            // Buckets before the current one: every connection in them is due.
            let now = self.bucket_of(Instant::now());
            // Taken out under the lock, closed after it: a close is a system call.
            let mut closing = Vec::new();
            match self.due.lock() {
                Ok(mut due) => {
                    while let Some(first) = due.first_entry() {
                        if *first.key() >= now {
                            break;
                        }
                        closing.push(first.remove());
                    }
                }
                Err(_) => return,
            }
            drop(closing);
        }
    }

    fn bucket_of(&self, at: Instant) -> u64 {
        (at.saturating_duration_since(self.epoch).as_millis() / BUCKET.as_millis()) as u64
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    /// A kept connection stays open for at least half the linger and is closed by one and a
    /// half (and a bucket); with no linger it is closed at once.
    #[tokio::test]
    async fn a_kept_connection_is_closed_within_its_spread() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let linger = Duration::from_millis(400);
        let kept = Arc::new(Lingering::new(linger));
        tokio::spawn(kept.clone().close_when_due());
        for spread in [0, 999] {
            let client = TcpStream::connect(addr).await?;
            let (mut server, _) = listener.accept().await?;
            let started = Instant::now();
            kept.keep(client, spread);
            assert_eq!(kept.len(), 1);
            let mut buf = [0u8; 1];
            // The read ends (0 bytes) when the kept side is closed.
            assert_eq!(server.read(&mut buf).await?, 0);
            let took = started.elapsed();
            let least = linger / 2 + linger.mul_f64(spread as f64 / 1000.0);
            assert!(took >= least, "spread {spread}: closed after {took:?}");
            assert!(
                took < least + Duration::from_millis(300),
                "spread {spread}: {took:?}"
            );
            assert!(kept.is_empty());
        }
        let none = Lingering::new(Duration::ZERO);
        let client = TcpStream::connect(addr).await?;
        let (mut server, _) = listener.accept().await?;
        none.keep(client, 500);
        let mut buf = [0u8; 1];
        assert_eq!(server.read(&mut buf).await?, 0);
        assert!(none.is_empty());
        Ok(())
    }
}
