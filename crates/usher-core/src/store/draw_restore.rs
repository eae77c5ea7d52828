//! After a Redis data loss: the gateways put back the pre-queue places of a scheduled sale
//! (`lua/restore_pre.lua`), so that the draw run afterwards matches the commitment published
//! before the loss, or is recorded void, never silently different.

use redis::Value;

use super::decode::{array, int, status, text};
use super::recovery::restore_batches;
use super::reply::PreRestoreStatus;
use super::scripts::SCRIPTS;
use super::{protocol, Result, Store};
use crate::binding::Thumbprint;
use crate::draw::{EntrantHash, VoidReason};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;
use crate::messages::CloseReason;
use crate::store::GWS_TTL_MS;

/// The draw a gateway saw published for a queue before the loss.
#[derive(Debug, Clone, Copy, Default)]
pub struct SeenDraw<'a> {
    /// Its commitment, when a heartbeat read it.
    pub commitment: Option<&'a str>,
    /// Its `opens_at`, when known.
    pub opens_at_ms: Option<u64>,
}

/// What became of the sale's draw for the pre-queue places put back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreQueueFate {
    /// Back in the pre-queue of the draw committed before the loss: it still verifies.
    Kept,
    /// Back in the pre-queue of a draw with a new commitment; the earlier draw is void.
    Redrawn,
    /// The new draw ran already: the places not in it are at the tail of the line.
    Drawn,
    /// No draw is held: the draw is void and the places wait in line in join order.
    Void,
}

impl PreQueueFate {
    /// Whether the draw the browsers joined was voided.
    pub fn voided(self) -> bool {
        matches!(self, PreQueueFate::Redrawn | PreQueueFate::Void)
    }
}

/// What putting pre-queue places back found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreRestore {
    /// The queue is not configured (yet): keep the browsers and try again later.
    Unknown,
    /// The queue is configured again, closed.
    Closed(CloseReason),
    /// The places are back: `restored` of them were missing; `epoch` is the queue's.
    Done {
        fate: PreQueueFate,
        restored: u64,
        epoch: Option<u64>,
    },
}

impl Store {
    /// Puts the pre-queue `places` of `q` (with their entrant hashes, in join order) back for
    /// gateway `gw`, in batches of [`RESTORE_BATCH`]; `seen` is the draw this gateway saw
    /// published before the loss (see `lua/restore_pre.lua` for what happens when).
    pub async fn restore_pre_queue(
        &self,
        q: &QueueId,
        gw: u16,
        places: &[(PlaceId, EntrantHash)],
        seen: SeenDraw<'_>,
        now_ms: u64,
    ) -> Result<PreRestore> {
        self.restore_pre_queue_bound(q, gw, places, &[], seen, now_ms)
            .await
    }

    /// [`Store::restore_pre_queue`] with the browser key of each place (`keys[i]` for
    /// `places[i]`; missing or `None`: no key) as the gateway checked it: each place put back
    /// gets its key back in the same call, under the id it is put back with (a binding queue).
    pub async fn restore_pre_queue_bound(
        &self,
        q: &QueueId,
        gw: u16,
        places: &[(PlaceId, EntrantHash)],
        keys: &[Option<Thumbprint>],
        seen: SeenDraw<'_>,
        now_ms: u64,
    ) -> Result<PreRestore> {
        let k = QueueKeys::of(q);
        let mut done = None;
        let mut restored = 0;
        let batches = restore_batches(places);
        for (start, batch) in batches {
            let mut inv = SCRIPTS.restore_pre.prepare_invoke();
            inv.key(&k.meta)
                .key(&k.seq)
                .key(&k.pre)
                .key(&k.entrants)
                .key(&k.waiting)
                .key(&k.drawn)
                .key(&k.gws)
                .key(&k.away)
                .key(&k.active)
                .key(&k.tokens)
                .key(&k.ended)
                .key(&k.parked)
                .key(&k.bound)
                .arg(gw)
                .arg(now_ms)
                .arg(GWS_TTL_MS)
                .arg(seen.commitment.unwrap_or_default())
                .arg(seen.opens_at_ms.map(|t| t.to_string()).unwrap_or_default())
                .arg(VoidReason::RedisDataLost.as_str());
            for (i, (p, h)) in batch.iter().enumerate() {
                let key = keys.get(start + i).and_then(Option::as_ref);
                inv.arg(p.0)
                    .arg(&h.0[..])
                    .arg(key.map_or("", Thumbprint::as_str));
            }
            let v: Value = inv.invoke_async(&mut self.c()).await?;
            let reply = array(v)?;
            let fate = match status(&reply, PreRestoreStatus::from_code) {
                Some(PreRestoreStatus::Unknown) => return Ok(PreRestore::Unknown),
                Some(PreRestoreStatus::Closed) => {
                    let reason = reply
                        .get(1)
                        .and_then(text)
                        .and_then(|r| r.parse().ok())
                        .unwrap_or(CloseReason::QueueClosed);
                    return Ok(PreRestore::Closed(reason));
                }
                Some(PreRestoreStatus::Kept) => PreQueueFate::Kept,
                Some(PreRestoreStatus::Redrawn) => PreQueueFate::Redrawn,
                Some(PreRestoreStatus::Drawn) => PreQueueFate::Drawn,
                Some(PreRestoreStatus::Void) => PreQueueFate::Void,
                None => return Err(protocol(format!("restore_pre reply {reply:?}"))),
            };
            restored += reply.get(1).and_then(int).unwrap_or(0) as u64;
            let epoch = reply.get(2).and_then(text).and_then(|e| e.parse().ok());
            done = Some((fate, epoch));
        }
        let (fate, epoch) = done.ok_or_else(|| protocol("restore_pre: no batch ran"))?;
        Ok(PreRestore::Done {
            fate,
            restored,
            epoch,
        })
    }
}
