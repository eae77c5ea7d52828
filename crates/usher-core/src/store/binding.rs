//! Browser binding (a queue's `bind: "browser_key"`): the key each place joined with, and the
//! proofs of possession already spent. The thumbprints are written by `join.lua` with the
//! place ([`Store::join_bound`]); these are the reads and the one-use check around it.

use super::{Result, Store};
use crate::binding::{Thumbprint, PROOF_JTI_TTL_MS};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;

impl Store {
    /// The thumbprint of the browser key `place` joined with; `None` for a place that joined
    /// without one (or is unknown).
    pub async fn place_key(&self, q: &QueueId, place: PlaceId) -> Result<Option<Thumbprint>> {
        let k = QueueKeys::new(q);
        let v: Option<String> = redis::cmd("HGET")
            .arg(&k.bound)
            .arg(place.0)
            .query_async(&mut self.c())
            .await?;
        Ok(v.as_deref().and_then(Thumbprint::parse))
    }

    /// The thumbprints of `places` (in order), one `HMGET`; nothing is asked for no places.
    pub async fn place_keys(
        &self,
        q: &QueueId,
        places: &[PlaceId],
    ) -> Result<Vec<Option<Thumbprint>>> {
        if places.is_empty() {
            return Ok(Vec::new());
        }
        let k = QueueKeys::new(q);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&k.bound);
        for p in places {
            cmd.arg(p.0);
        }
        let v: Vec<Option<String>> = cmd.query_async(&mut self.c()).await?;
        Ok(v.iter()
            .map(|s| s.as_deref().and_then(Thumbprint::parse))
            .collect())
    }

    /// Spends a proof of possession's `jti` (checked by the caller: 1..=64 base64url
    /// characters): `true` the first time, `false` when it was spent already (a replay).
    /// Remembered for [`PROOF_JTI_TTL_MS`], past which the proof is too old anyway.
    pub async fn spend_proof(&self, q: &QueueId, jti: &str) -> Result<bool> {
        let k = QueueKeys::new(q);
        let set: Option<String> = redis::cmd("SET")
            .arg(k.used_proof(jti))
            .arg("1")
            .arg("NX")
            .arg("PX")
            .arg(PROOF_JTI_TTL_MS)
            .query_async(&mut self.c())
            .await?;
        Ok(set.is_some())
    }
}
