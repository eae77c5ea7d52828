//! Away and back: browsers whose connections dropped keep their places for the queue's grace
//! period (`lua/away.lua`, `lua/pre_away.lua`), are marked present again when they come back
//! (`lua/back.lua`), and the gateway that holds a place now.

use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{Result, Store};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;

impl Store {
    /// Browsers held by gateway `gw` disconnected: their places are kept for the queue's grace
    /// period (those this gateway still holds), then dropped unless the browsers resume.
    /// Returns how many places were affected.
    pub async fn mark_away(
        &self,
        q: &QueueId,
        places: &[PlaceId],
        gw: u16,
        now_ms: u64,
    ) -> Result<u64> {
        let k = QueueKeys::of(q);
        let mut n = 0;
        for chunk in places.chunks(1000) {
            let mut inv = SCRIPTS.away.key(&k.meta);
            inv.key(&k.waiting)
                .key(&k.away)
                .key(&k.parked)
                .lane_keys(&k);
            inv.arg(gw).arg(now_ms);
            for p in chunk {
                inv.arg(p.0);
            }
            let m: u64 = inv.invoke_async(&mut self.c()).await?;
            n += m;
            // Places not in line may stand in a scheduled sale's pre-queue: their browsers'
            // absence is recorded for the draw (`lua/pre_away.lua`).
            if m < chunk.len() as u64 {
                let mut inv = SCRIPTS.pre_away.key(&k.meta);
                inv.key(&k.pre).key(&k.pre_away).arg(gw);
                for p in chunk {
                    inv.arg(p.0);
                }
                let pre: u64 = inv.invoke_async(&mut self.c()).await?;
                n += pre;
            }
        }
        Ok(n)
    }

    /// The gateway that holds `place` in Redis now: the one its waiting (or parked, or
    /// pre-queue) member names. `None` when the place is in none of them (admitted, gone, or
    /// never taken). A gateway told that its connection was taken over elsewhere asks this
    /// first: the news may be older than its own newer connection for the place (the `redis`
    /// test `pow::` resumes a place on one gateway right after another).
    pub async fn holder(&self, q: &QueueId, place: PlaceId) -> Result<Option<u16>> {
        let k = QueueKeys::of(q);
        let seq = place.seq();
        // The members of `place` in `waiting`, `parked` and `pre`, in that order, then in the
        // other lanes' zsets (crate::lanes: a place is in one of them at most).
        let mut pipe = redis::pipe();
        let lanes = k.lanes.iter().flat_map(|(w, p)| [w, p]);
        for set in [&k.waiting, &k.parked, &k.pre].into_iter().chain(lanes) {
            pipe.cmd("ZRANGEBYSCORE").arg(set).arg(seq).arg(seq);
        }
        let found: Vec<Vec<Vec<u8>>> = pipe.query_async(&mut self.c()).await?;
        Ok(found
            .iter()
            .find_map(|members| members.first())
            .and_then(|m| crate::keys::member_gateway(m)))
    }

    /// Clears the away marks of `places` that gateway `gw` holds again (see `lua/back.lua`):
    /// for places whose browsers came back while [`Store::mark_away`] was writing them.
    /// Returns how many were away.
    pub async fn mark_back(&self, q: &QueueId, places: &[PlaceId], gw: u16) -> Result<u64> {
        let k = QueueKeys::of(q);
        let mut n = 0;
        for chunk in places.chunks(1000) {
            let mut inv = SCRIPTS.back.key(&k.waiting);
            inv.key(&k.away).key(&k.parked).lane_keys(&k).arg(gw);
            for p in chunk {
                inv.arg(p.0);
            }
            let m: u64 = inv.invoke_async(&mut self.c()).await?;
            // A pre-queue place held here again is present for the draw.
            let ids: Vec<u64> = chunk.iter().map(|p| p.0).collect();
            let pre: u64 = redis::cmd("SREM")
                .arg(&k.pre_away)
                .arg(&ids)
                .query_async(&mut self.c())
                .await?;
            n += m + pre;
        }
        Ok(n)
    }
}
