//! Reports the demo's own request rate to the dispatcher as its load, so a queue with an
//! adaptive rate following this backend admits more while the demo is idle and fewer while it
//! is busy.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use usher_admission::Admission;

/// Counts requests; read and reset once per report.
#[derive(Debug, Default)]
pub struct RequestCounter(AtomicU64);

impl RequestCounter {
    pub fn count(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    fn take(&self) -> u64 {
        self.0.swap(0, Ordering::Relaxed)
    }
}

/// Every `period`, reports the requests per second since the last report as the load of
/// `backend`. A failed report is logged (once until reports succeed again) and the next
/// period tries again; the dispatcher reads a missing report as "the backend is down".
pub fn spawn_reporter(
    admission: Admission,
    backend: String,
    period: Duration,
    counter: Arc<RequestCounter>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut last = Instant::now();
        let mut failing = false;
        loop {
            ticks.tick().await;
            let now = Instant::now();
            let secs = now.duration_since(last).as_secs_f64().max(1e-3);
            last = now;
            let load = counter.take() as f64 / secs;
            match admission.report_load(&backend, load).await {
                Ok(()) => {
                    if failing {
                        tracing::info!(%backend, "load reports accepted again");
                    }
                    failing = false;
                    tracing::debug!(%backend, load, "load reported");
                }
                Err(e) if !failing => {
                    tracing::warn!(%backend, error = %e, "cannot report the load");
                    failing = true;
                }
                Err(_) => {}
            }
        }
    })
}
