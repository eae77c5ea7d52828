//! Browser binding (a queue's `bind: "browser_key"`): the key each place joined with, and the
//! proofs of possession already spent. The thumbprints are written by `join.lua` with the
//! place ([`Store::join_bound`]); these are the reads and the one-use check around it.

use redis::Value;

use super::decode::{array, status, text};
use super::reply::BoundStatus;
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store};
use crate::binding::{Thumbprint, PROOF_JTI_TTL_MS};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;

/// What a ticket's place is bound to ([`Store::ticket_key`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TicketKey {
    /// The browser key the place joined with.
    Bound(Thumbprint),
    /// A live place that joined without a key (before its queue bound): it cannot be proven.
    Unbound,
    /// The place is over for good (left, dropped, closed, its session ended): its key may be
    /// forgotten already ([`Store::prune_bound`]), and nothing of it can be had with its
    /// ticket, so its own scripts answer the request.
    Over,
}

/// Who asks a place's own script ([`Store::leave_as`], [`Store::status_as`],
/// [`Store::resume_bound`]) about it, for a queue that binds places to the browser's key
/// (`bind: "browser_key"`). The script checks the key itself, in the same call as what it
/// does (`lua/prelude.lua`, `wrong_key`): the gateway's check before it ([`Store::ticket_key`])
/// is a separate call, and a data loss, a restore or a stale setting in between must not let a
/// copied ticket act on the place.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Asker<'a> {
    /// The gateway's own bookkeeping (an abandoned join's session given back, a held stream's
    /// resync), tools and tests: nothing is checked.
    #[default]
    Gateway,
    /// A browser's request naming the place's ticket. On a binding queue it is refused
    /// (`WrongKey`) unless `proven` is the place's key: the one in `bound`, else `known`; a
    /// place with neither is refused while it is live, and answered as ever once over for good.
    Ticket {
        /// The key the request's proof of possession was made with (`None`: it proved none).
        proven: Option<&'a Thumbprint>,
        /// The place's key as the gateway knows it besides `bound`: the stream it holds the
        /// place with (after a data loss `bound` may have lost it), or what `bound` said.
        known: Option<&'a Thumbprint>,
    },
}

impl Asker<'_> {
    /// The scripts' binding arguments: whether to check, the proven key, the known key.
    pub(super) fn args(&self) -> (&'static str, &str, &str) {
        match self {
            Asker::Gateway => ("", "", ""),
            Asker::Ticket { proven, known } => (
                "1",
                proven.map_or("", |k| k.as_str()),
                known.map_or("", |k| k.as_str()),
            ),
        }
    }
}

/// How many `bound` fields one [`Store::prune_bound`] call looks at.
pub const PRUNE_BOUND_COUNT: u32 = 500;

impl Store {
    /// What the place a ticket names (a scheduled sale's pre-queue id included: `drawn` maps
    /// it to its place in line) is bound to: one script call (`lua/place_key.lua`).
    pub async fn ticket_key(&self, q: &QueueId, place: PlaceId) -> Result<TicketKey> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .place_key
            .key(&k.bound)
            .key(&k.drawn)
            .key(&k.waiting)
            .key(&k.parked)
            .key(&k.pre)
            .key(&k.active)
            .lane_keys(&k)
            .arg(place.0)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        let bad = || protocol(format!("place_key reply {a:?}"));
        match status(&a, BoundStatus::from_code) {
            Some(BoundStatus::Key) => a
                .get(1)
                .and_then(text)
                .as_deref()
                .and_then(Thumbprint::parse)
                .map(TicketKey::Bound)
                .ok_or_else(bad),
            Some(BoundStatus::None) => Ok(TicketKey::Unbound),
            Some(BoundStatus::Over) => Ok(TicketKey::Over),
            None => Err(bad()),
        }
    }

    /// Forgets the keys of places over for good, [`PRUNE_BOUND_COUNT`] fields of `bound` a
    /// call, going round the hash from call to call (`lua/prune_bound.lua`); called by the
    /// replica driving the queue. Returns how many it forgot.
    pub async fn prune_bound(&self, q: &QueueId) -> Result<u64> {
        let k = QueueKeys::of(q);
        Ok(SCRIPTS
            .prune_bound
            .key(&k.meta)
            .key(&k.bound)
            .key(&k.waiting)
            .key(&k.parked)
            .key(&k.pre)
            .key(&k.active)
            .lane_keys(&k)
            .arg(PRUNE_BOUND_COUNT)
            .invoke_async(&mut self.c())
            .await?)
    }

    /// The thumbprint of the browser key `place` joined with; `None` for a place that joined
    /// without one (or is unknown).
    pub async fn place_key(&self, q: &QueueId, place: PlaceId) -> Result<Option<Thumbprint>> {
        let k = QueueKeys::of(q);
        let v: Option<String> = redis::cmd("HGET")
            .arg(&k.bound)
            .arg(place.0)
            .query_async(&mut self.c())
            .await?;
        Ok(v.as_deref().and_then(Thumbprint::parse))
    }

    /// The thumbprints of `places` (in order): one `EXISTS`, then one `HMGET` where the queue
    /// has any; nothing is asked for no places. The dispatcher asks for every batch it mints,
    /// whether or not the queue binds browsers: a queue that never did has no `bound` hash,
    /// and one integer is cheaper to send than a nil per place. (A place's key is written
    /// with the place, and a place being minted is live, so its key is never pruned between
    /// the two calls.)
    pub async fn place_keys(
        &self,
        q: &QueueId,
        places: &[PlaceId],
    ) -> Result<Vec<Option<Thumbprint>>> {
        if places.is_empty() {
            return Ok(Vec::new());
        }
        let k = QueueKeys::of(q);
        let any: bool = redis::cmd("EXISTS")
            .arg(&k.bound)
            .query_async(&mut self.c())
            .await?;
        if !any {
            return Ok(vec![None; places.len()]);
        }
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
    /// characters) made by `key`: `true` the first time, `false` when it was spent already
    /// (a replay). Remembered for [`PROOF_JTI_TTL_MS`], past which the proof is too old
    /// anyway.
    pub async fn spend_proof(&self, q: &QueueId, key: &Thumbprint, jti: &str) -> Result<bool> {
        let k = QueueKeys::of(q);
        let set: Option<String> = redis::cmd("SET")
            .arg(k.used_proof(key.as_str(), jti))
            .arg("1")
            .arg("NX")
            .arg("PX")
            .arg(PROOF_JTI_TTL_MS)
            .query_async(&mut self.c())
            .await?;
        Ok(set.is_some())
    }
}
