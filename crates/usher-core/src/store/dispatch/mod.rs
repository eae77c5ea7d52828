//! What the dispatcher does in Redis: hold queue leases ([`Lease`]), register its replicas,
//! and per queue tick (`tick`; its reply decoded by `tick_reply` into a `tick_outcome`),
//! deliver admissions from the outbox (`outbox`) and store the minted tokens (`records`).

use std::time::Duration;

use super::scripts::SCRIPTS;
use super::{Result, Store};
use crate::ids::QueueId;
use crate::keys::{self, QueueKeys};

pub(super) mod outbox;
pub(super) mod records;
pub(super) mod tick;
pub(super) mod tick_outcome;
mod tick_reply;

/// A queue lease held by one dispatcher replica: `<owner>|<fencing token>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub value: String,
    pub fence: u64,
}

impl Store {
    /// Acquires (or renews) the lease on a queue for `owner`. `None` when another replica
    /// holds it.
    pub async fn acquire_lease(
        &self,
        q: &QueueId,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let k = QueueKeys::of(q);
        let fence: u64 = SCRIPTS
            .acquire
            .key(&k.lease)
            .key(&k.meta)
            .arg(owner)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        Ok((fence > 0).then(|| Lease {
            value: format!("{owner}|{fence}"),
            fence,
        }))
    }

    /// Gives a lease up (if it is still ours).
    pub async fn release_lease(&self, q: &QueueId, lease: &Lease) -> Result<()> {
        let k = QueueKeys::of(q);
        let _: i64 = SCRIPTS
            .release
            .key(&k.lease)
            .arg(&lease.value)
            .invoke_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Registers (or heartbeats) a dispatcher replica; returns the live replicas, sorted.
    pub async fn heartbeat_dispatcher(
        &self,
        id: &str,
        now_ms: u64,
        ttl: Duration,
    ) -> Result<Vec<String>> {
        let (_, _, live): ((), (), Vec<String>) = redis::pipe()
            .atomic()
            .cmd("ZADD")
            .arg(keys::DISPATCHERS)
            .arg(now_ms + ttl.as_millis() as u64)
            .arg(id)
            .cmd("ZREMRANGEBYSCORE")
            .arg(keys::DISPATCHERS)
            .arg("-inf")
            .arg(format!("({now_ms}"))
            .cmd("ZRANGEBYSCORE")
            .arg(keys::DISPATCHERS)
            .arg(now_ms)
            .arg("+inf")
            .query_async(&mut self.c())
            .await?;
        let mut live = live;
        live.sort();
        Ok(live)
    }

    /// Removes a dispatcher replica from the registry (on shutdown).
    pub async fn deregister_dispatcher(&self, id: &str) -> Result<()> {
        let _: () = redis::cmd("ZREM")
            .arg(keys::DISPATCHERS)
            .arg(id)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }
}
