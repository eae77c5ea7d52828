//! The open door's Redis side (`crate::door`): a gateway that reached Redis again takes the
//! places it let through out of the line and records the period; the admin API reads the
//! periods back.

use super::decode::u;
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::door::{DoorPeriod, DOOR_PERIODS_KEPT};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;

/// A queue's door as the admin API shows it.
#[derive(
    Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct DoorRecord {
    /// The periods gateways held their door open (`on_outage: "open"`), recorded once each
    /// reached Redis again: newest first, at most 20.
    #[serde(default)]
    pub door_periods: Vec<DoorPeriod>,
    /// Browsers let through any gateway's open door since the queue was created.
    #[serde(default)]
    pub door_admitted_total: u64,
}

impl Store {
    /// Takes `places` (let through a gateway's open door) out of `q`'s line, so the dispatcher
    /// does not admit them again, and records `period` (`None`: places of a period recorded
    /// already). One script call (`lua/door.lua`): the line never shows a period without its
    /// places removed. Places no longer in the line are skipped. Returns how many were removed.
    pub async fn close_door(
        &self,
        q: &QueueId,
        places: &[PlaceId],
        period: Option<&DoorPeriod>,
    ) -> Result<u64> {
        let k = QueueKeys::of(q);
        let json = period
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| protocol(format!("door period: {e}")))?
            .unwrap_or_default();
        let mut invocation = SCRIPTS.door.key(&k.waiting);
        invocation
            .key(&k.parked)
            .key(&k.away)
            .key(&k.door)
            .key(&k.meta)
            .lane_keys(&k)
            .arg(json)
            .arg(DOOR_PERIODS_KEPT)
            .arg(period.map_or(0, |p| p.admitted));
        for p in places {
            invocation.arg(p.0);
        }
        let v: redis::Value = invocation.invoke_async(&mut self.c()).await?;
        u(&v)
    }

    /// `q`'s recorded door periods, newest first, and how many browsers its doors let through.
    pub async fn door_record(&self, q: &QueueId) -> Result<DoorRecord> {
        let k = QueueKeys::of(q);
        let (periods, total): (Vec<String>, Option<u64>) = redis::pipe()
            .cmd("LRANGE")
            .arg(&k.door)
            .arg(0)
            .arg(DOOR_PERIODS_KEPT - 1)
            .cmd("HGET")
            .arg(&k.meta)
            .arg("door_admitted_total")
            .query_async(&mut self.c())
            .await?;
        Ok(DoorRecord {
            // A record this version cannot read is skipped, not an error for the whole queue.
            door_periods: periods
                .iter()
                .filter_map(|p| serde_json::from_str(p).ok())
                .collect(),
            door_admitted_total: total.unwrap_or(0),
        })
    }
}

impl Store {
    /// `q`'s door setting: what it does in an outage, and after how long (ms). `Hold` for a
    /// queue that never set it, or that does not exist.
    pub async fn door_setting(&self, q: &QueueId) -> Result<(crate::door::OnOutage, u64)> {
        let (on, after): (Option<String>, Option<u64>) = redis::cmd("HMGET")
            .arg(&QueueKeys::of(q).meta)
            .arg("on_outage")
            .arg("door_after_seconds")
            .query_async(&mut self.c())
            .await?;
        Ok((
            on.and_then(|s| s.parse().ok()).unwrap_or_default(),
            after.unwrap_or(crate::door::DEFAULT_DOOR_AFTER_SECONDS) * 1000,
        ))
    }
}
