//! The gateway registry (each gateway process's index, server id and heartbeat) and the
//! gateways' interest in queues (which gateways hold browsers of a queue).

use std::collections::HashMap;
use std::time::Duration;

use redis::Value;

use super::decode::{array, float, status, text};
use super::reply::HeartbeatStatus;
use super::scripts::SCRIPTS;
use super::{protocol, Result, Store};
use crate::ids::{QueueId, ServerId};
use crate::keys::{self, QueueKeys};
use crate::messages::CloseReason;

/// A registered gateway process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayInfo {
    /// Index of the gateway process (unique among registered ones; one per process start).
    pub index: u16,
    /// Heartbeat expiry: the gateway counts as alive until then.
    pub alive_until_ms: u64,
    pub server_id: ServerId,
}

impl GatewayInfo {
    /// Whether its heartbeat is still valid at `now_ms`.
    pub fn is_alive(&self, now_ms: u64) -> bool {
        self.alive_until_ms > now_ms
    }
}

/// Where a queue a gateway holds browsers of stands, as [`Store::refresh_interest`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interest {
    /// Open; `epoch` names this configuration of the queue (see [`Store::put_queue`]): a
    /// different one than before means Redis lost the queue and it was configured again.
    Open { epoch: Option<u64> },
    /// Closed, for this reason (`queue_closed` when none was kept).
    Closed(CloseReason),
    /// Not configured: Redis lost the queue (or it never existed).
    Unknown,
}

/// Gateway interest in a queue lapses after this long without a join or refresh.
pub const GWS_TTL_MS: u64 = 30_000;
/// Dead gateways are remembered this long (so their orphaned places can be recognised).
const GATEWAY_MEMORY_MS: u64 = 86_400_000;

impl Store {
    /// Registers a gateway process; returns its new index.
    pub async fn register_gateway(&self, id: &ServerId, now_ms: u64, ttl: Duration) -> Result<u16> {
        let v: Value = SCRIPTS
            .register_gateway
            .key(keys::GW_LIVE)
            .key(keys::GW_IDS)
            .key(keys::GW_NEXT)
            .arg(id.as_str())
            .arg(now_ms)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        text(&v)
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| protocol(format!("gateway index {v:?}")))
    }

    /// Keeps a gateway's registry entry alive for `ttl`. `false` when another process owns
    /// the index (this one registered while Redis had lost the registry, or its entry was
    /// taken over): nothing was written, and the process must register again.
    pub async fn heartbeat_gateway(
        &self,
        index: u16,
        id: &ServerId,
        now_ms: u64,
        ttl: Duration,
    ) -> Result<bool> {
        let v: Value = SCRIPTS
            .heartbeat_gateway
            .key(keys::GW_LIVE)
            .key(keys::GW_IDS)
            .key(keys::GW_NEXT)
            .arg(index)
            .arg(id.as_str())
            .arg(now_ms)
            .arg(ttl.as_millis() as u64)
            .invoke_async(&mut self.c())
            .await?;
        match status(&array(v)?, HeartbeatStatus::from_code) {
            Some(HeartbeatStatus::Kept) => Ok(true),
            Some(HeartbeatStatus::NotOwner) => Ok(false),
            None => Err(protocol("heartbeat_gateway reply")),
        }
    }

    /// Marks a gateway process as gone (on shutdown): its browsers that do not resume elsewhere
    /// within the grace period are dropped.
    pub async fn deregister_gateway(&self, index: u16, now_ms: u64) -> Result<()> {
        let _: () = redis::cmd("ZADD")
            .arg(keys::GW_LIVE)
            .arg("XX")
            .arg(now_ms)
            .arg(index)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Every registered gateway process, live or dead within the last day.
    pub async fn gateways(&self, now_ms: u64) -> Result<Vec<GatewayInfo>> {
        let v: Value = SCRIPTS
            .gateways
            .key(keys::GW_LIVE)
            .key(keys::GW_IDS)
            .arg(now_ms)
            .arg(GATEWAY_MEMORY_MS)
            .invoke_async(&mut self.c())
            .await?;
        Ok(array(v)?
            .chunks(3)
            .filter_map(|c| match c {
                [i, t, id] => Some(GatewayInfo {
                    index: text(i)?.parse().ok()?,
                    alive_until_ms: float(t)? as u64,
                    server_id: ServerId::new(text(id)?).ok()?,
                }),
                _ => None,
            })
            .collect())
    }

    /// Live gateways by index.
    pub async fn live_gateways(&self, now_ms: u64) -> Result<HashMap<u16, ServerId>> {
        Ok(self
            .gateways(now_ms)
            .await?
            .into_iter()
            .filter(|g| g.is_alive(now_ms))
            .map(|g| (g.index, g.server_id))
            .collect())
    }

    /// Tells the dispatcher that gateway `gw` still holds browsers of these queues; returns
    /// where each queue stands ([`Interest`]).
    pub async fn refresh_interest(
        &self,
        queues: &[QueueId],
        gw: u16,
        now_ms: u64,
    ) -> Result<Vec<Interest>> {
        if queues.is_empty() {
            return Ok(Vec::new());
        }
        // One pipeline per queue, sent together: each touches one queue's slot only, so in
        // a cluster each goes to its own master (a pipeline spanning slots is refused).
        let state: Vec<(Option<String>, Option<String>, Option<String>)> =
            futures::future::try_join_all(queues.iter().map(|q| {
                let k = QueueKeys::of(q);
                let mut c = self.c();
                async move {
                    redis::pipe()
                        .cmd("ZADD")
                        .arg(&k.gws)
                        .arg(now_ms + GWS_TTL_MS)
                        .arg(gw)
                        .ignore()
                        .cmd("HMGET")
                        .arg(&k.meta)
                        .arg("open")
                        .arg("close_reason")
                        .arg("epoch")
                        .query_async::<((Option<String>, Option<String>, Option<String>),)>(&mut c)
                        .await
                        .map(|(s,)| s)
                }
            }))
            .await?;
        Ok(state
            .into_iter()
            .map(|(open, reason, epoch)| match (open.as_deref(), reason) {
                (Some("1"), _) => Interest::Open {
                    epoch: epoch.and_then(|e| e.parse().ok()),
                },
                (None, _) => Interest::Unknown,
                (Some(_), reason) => Interest::Closed(
                    reason
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(CloseReason::QueueClosed),
                ),
            })
            .collect())
    }

    /// Indexes of the gateways holding browsers of `q` at `now_ms` (those `state` goes to;
    /// dead ones included until their interest lapses: filter with the registry).
    pub async fn queue_gateways(&self, q: &QueueId, now_ms: u64) -> Result<Vec<u16>> {
        let k = QueueKeys::of(q);
        let v: Vec<u16> = redis::cmd("ZRANGEBYSCORE")
            .arg(&k.gws)
            .arg(now_ms)
            .arg("+inf")
            .query_async(&mut self.c())
            .await?;
        Ok(v)
    }
}
