//! Policy inputs kept outside the per-queue scripts: booking backends' load reports (the
//! adaptive rate), a queue's adaptive setting as the dispatcher reads it before a tick, and
//! the wake signal for passthrough admissions.

use std::time::Duration;

use futures::StreamExt;

use super::{Result, Store};
use crate::ids::QueueId;
use crate::keys::{self, QueueKeys};
use crate::policy::{Adaptive, BackendName, LoadReport, MAX_STALE_AFTER_SECONDS};

impl Store {
    /// Stores a backend's load report. It is kept [`MAX_STALE_AFTER_SECONDS`]; each queue
    /// following the backend decides by its own `stale_after_seconds` whether it is fresh.
    pub async fn report_load(&self, backend: &BackendName, report: LoadReport) -> Result<()> {
        let _: () = redis::cmd("SET")
            .arg(keys::backend_load(backend))
            .arg(report.encode())
            .arg("EX")
            .arg(MAX_STALE_AFTER_SECONDS)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// A backend's last load report, if one is kept.
    pub async fn backend_load(&self, backend: &BackendName) -> Result<Option<LoadReport>> {
        let v: Option<String> = redis::cmd("GET")
            .arg(keys::backend_load(backend))
            .query_async(&mut self.c())
            .await?;
        Ok(v.as_deref().and_then(LoadReport::parse))
    }

    /// What a queue's rate follows besides `admit_per_second`: its adaptive setting (`None`:
    /// off, or no such queue), its `max_active` cap, and the no-show share to make up for.
    pub async fn queue_rate_policy(&self, q: &QueueId) -> Result<RatePolicy> {
        #[allow(clippy::type_complexity)]
        let (adaptive, max_active, aps, make_up, outcomes, no_shows): (
            Option<String>,
            Option<u64>,
            Option<f64>,
            Option<String>,
            Option<u64>,
            Option<u64>,
        ) = redis::cmd("HMGET")
            .arg(&QueueKeys::of(q).meta)
            .arg("adaptive")
            .arg("max_active")
            .arg("admit_per_second")
            .arg("make_up_no_shows")
            .arg("arrivals_n")
            .arg("no_shows_n")
            .query_async(&mut self.c())
            .await?;
        Ok(RatePolicy {
            adaptive: adaptive.and_then(|s| serde_json::from_str(&s).ok()),
            max_active,
            admit_per_second: aps,
            make_up_no_shows: make_up.is_some_and(|m| m == "1"),
            no_show_ratio: crate::policy::no_show_ratio(
                outcomes.unwrap_or(0),
                no_shows.unwrap_or(0),
            ),
        })
    }

    /// Tells the dispatchers that a join admitted places of `q` at once (passthrough).
    pub async fn wake(&self, q: &QueueId) -> Result<()> {
        let _: i64 = redis::cmd("PUBLISH")
            .arg(keys::WAKE_CHANNEL)
            .arg(q.as_str())
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }
}

/// A queue's adaptive setting and capacity cap, read before each tick.
#[derive(Debug, Clone, Default)]
pub struct RatePolicy {
    pub adaptive: Option<Adaptive>,
    pub max_active: Option<u64>,
    /// `admit_per_second` (`None`: no such queue).
    pub admit_per_second: Option<f64>,
    /// Whether the rate makes up for no-shows.
    pub make_up_no_shows: bool,
    /// The measured no-show share (`None` until measured: [`crate::policy::no_show_ratio`]).
    pub no_show_ratio: Option<f64>,
}

/// The wake signals (see [`Store::wake`]), on a connection of their own.
pub struct Wakes {
    messages: redis::aio::PubSubStream,
}

impl Wakes {
    /// Subscribes to the wake channel of the Redis `args` name.
    pub async fn subscribe(args: &super::RedisArgs) -> Result<Self> {
        let client = args.pubsub_client()?;
        let mut pubsub = tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub())
            .await
            .map_err(|_| super::protocol("timed out connecting for wake signals"))??;
        pubsub.subscribe(keys::WAKE_CHANNEL).await?;
        Ok(Self {
            messages: pubsub.into_on_message(),
        })
    }

    /// The next queue woken; `None` when the connection ended (subscribe again).
    pub async fn next(&mut self) -> Option<Option<QueueId>> {
        let msg = self.messages.next().await?;
        Some(
            msg.get_payload::<String>()
                .ok()
                .and_then(|s| QueueId::new(s).ok()),
        )
    }
}
