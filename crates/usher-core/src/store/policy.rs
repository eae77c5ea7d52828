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
    /// off, or no such queue) and its `max_active` cap.
    pub async fn queue_rate_policy(&self, q: &QueueId) -> Result<RatePolicy> {
        let (adaptive, max_active): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(QueueKeys::new(q).meta)
            .arg("adaptive")
            .arg("max_active")
            .query_async(&mut self.c())
            .await?;
        Ok(RatePolicy {
            adaptive: adaptive.and_then(|s| serde_json::from_str(&s).ok()),
            max_active,
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
