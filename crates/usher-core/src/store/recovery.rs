//! After a Redis data loss: gateways put the places of the browsers they hold back into a
//! queue configured again (`restore.lua`), and read a queue's epoch to tell a loss from a
//! removal.

use redis::Value;

use super::decode::{array, int, status, text};
use super::reply::RestoreStatus;
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::binding::Thumbprint;
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;
use crate::messages::CloseReason;
use crate::store::GWS_TTL_MS;

/// Places put back per script call (one call holds Redis for about a millisecond per
/// thousand).
pub const RESTORE_BATCH: usize = 1000;

/// `items` in batches of [`RESTORE_BATCH`], each with the index of its first item; one
/// empty batch when there are none (the restore script still runs: it reports the epoch, or
/// the draw's fate).
pub(super) fn restore_batches<T>(items: &[T]) -> Vec<(usize, &[T])> {
    if items.is_empty() {
        return vec![(0, &[])];
    }
    items
        .chunks(RESTORE_BATCH)
        .enumerate()
        .map(|(i, b)| (i * RESTORE_BATCH, b))
        .collect()
}

/// What putting places back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restore {
    /// The queue is not configured (yet): keep the browsers and try again later.
    Unknown,
    /// The queue is configured again, closed.
    Closed(CloseReason),
    /// The places are back: `restored` of them were missing; `epoch` is the queue's.
    Done { restored: u64, epoch: Option<u64> },
}

impl Store {
    /// Puts `places` (in the line's order) back into `q` for gateway `gw`, in batches of
    /// [`RESTORE_BATCH`]. Places keep their ids; the place counter is raised above them.
    pub async fn restore_places(
        &self,
        q: &QueueId,
        gw: u16,
        places: &[PlaceId],
        now_ms: u64,
    ) -> Result<Restore> {
        self.restore_places_bound(q, gw, places, &[], now_ms).await
    }

    /// [`Store::restore_places`] with the browser key of each place (`keys[i]` for
    /// `places[i]`; missing or `None`: no key) as the gateway checked it at the place's join or
    /// resume: each place left in line gets its key back in the same call (a binding queue).
    pub async fn restore_places_bound(
        &self,
        q: &QueueId,
        gw: u16,
        places: &[PlaceId],
        keys: &[Option<Thumbprint>],
        now_ms: u64,
    ) -> Result<Restore> {
        let k = QueueKeys::of(q);
        let mut restored = 0;
        let mut epoch = None;
        let batches = restore_batches(places);
        for (start, batch) in batches {
            let mut inv = SCRIPTS.restore.prepare_invoke();
            inv.key(&k.meta)
                .key(&k.seq)
                .key(&k.waiting)
                .key(&k.active)
                .key(&k.ended)
                .key(&k.tokens)
                .key(&k.gws)
                .key(&k.away)
                .key(&k.parked)
                .key(&k.bound)
                .lane_keys(&k)
                .arg(gw)
                .arg(now_ms)
                .arg(GWS_TTL_MS);
            for (i, p) in batch.iter().enumerate() {
                let key = keys.get(start + i).and_then(Option::as_ref);
                inv.arg(p.0).arg(key.map_or("", Thumbprint::as_str));
            }
            let v: Value = inv.invoke_async(&mut self.c()).await?;
            let reply = array(v)?;
            match status(&reply, RestoreStatus::from_code) {
                Some(RestoreStatus::Unknown) => return Ok(Restore::Unknown),
                Some(RestoreStatus::Closed) => {
                    let reason = reply
                        .get(1)
                        .and_then(text)
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(CloseReason::QueueClosed);
                    return Ok(Restore::Closed(reason));
                }
                Some(RestoreStatus::Done) => {
                    restored += reply.get(1).and_then(int).unwrap_or(0) as u64;
                    epoch = reply.get(2).and_then(text).and_then(|e| e.parse().ok());
                }
                None => return Err(protocol(format!("restore reply {reply:?}"))),
            }
        }
        Ok(Restore::Done { restored, epoch })
    }

    /// A queue's epoch (see [`Store::put_queue`]); `None` for an unknown queue or one
    /// configured before epochs existed.
    pub async fn queue_epoch(&self, q: &QueueId) -> Result<Option<u64>> {
        let v: Option<String> = redis::cmd("HGET")
            .arg(&QueueKeys::of(q).meta)
            .arg("epoch")
            .query_async(&mut self.c())
            .await?;
        Ok(v.and_then(|e| e.parse().ok()))
    }
}
