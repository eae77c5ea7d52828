//! A queue's lanes in Redis (crate::lanes): the settings in meta `lanes`
//! (`<name>:<share>:<slot>,...`, see `lua/lanes.lua`), written by `lua/put_lanes.lua`, and
//! each lane's waiting count.

use redis::Value;

use super::decode::{array, status, text, u};
use super::reply::LanesStatus;
use super::scripts::{WithLaneKeys, SCRIPTS};
use super::{protocol, Result, Store, StoreError};
use crate::ids::QueueId;
use crate::keys::QueueKeys;
use crate::lanes::{Lane, LaneName, Lanes};

/// What [`Store::put_lanes`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LanesWrite {
    Written,
    /// Refused: `lane` still has `places` in line, and the change would remove it or move it
    /// (make it, or stop it being, the default lane). Nothing was written.
    NotEmpty {
        lane: String,
        places: u64,
    },
    /// Refused: a scheduled sale's draw is pending (its pre-queue has no lanes).
    Scheduled,
    /// No such queue.
    Unknown,
}

/// One lane and how many are in line in it (present and away).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct LaneCount {
    pub name: LaneName,
    pub share: u8,
    /// Whether joins that name no lane go here.
    pub default: bool,
    pub waiting: u64,
}

/// The lane a `status` or `resume` reply names (false: the default lane).
pub(super) fn lane_in(v: Option<&Value>) -> Option<LaneName> {
    v.and_then(text).and_then(|l| LaneName::new(l).ok())
}

/// The error of a join into `lane`, which the queue does not have.
pub(super) fn no_such_lane(lane: Option<&LaneName>) -> StoreError {
    StoreError::NoSuchLane(lane.map_or_else(String::new, |l| l.to_string()))
}

/// The lanes of a meta `lanes` field, each with its slot, in the order configured.
fn parse(spec: &str) -> Vec<(Lane, usize)> {
    spec.split(',')
        .filter_map(|item| {
            let mut parts = item.split(':');
            let name = LaneName::new(parts.next()?).ok()?;
            let share = parts.next()?.parse().ok()?;
            let slot = parts.next()?.parse().ok()?;
            Some((Lane { name, share }, slot))
        })
        .collect()
}

impl Store {
    /// Sets `q`'s lanes (`lua/put_lanes.lua`): checked there against the places in line, in
    /// the same call, so no place is ever left in a lane that no longer exists.
    pub async fn put_lanes(&self, q: &QueueId, lanes: &Lanes) -> Result<LanesWrite> {
        let k = QueueKeys::of(q);
        let spec = lanes
            .lanes()
            .iter()
            .map(|l| format!("{}:{}", l.name, l.share))
            .collect::<Vec<_>>()
            .join(",");
        let v: Value = SCRIPTS
            .put_lanes
            .key(&k.meta)
            .key(&k.waiting)
            .key(&k.parked)
            .lane_keys(&k)
            .arg(spec)
            .arg(lanes.default_lane().map_or("", LaneName::as_str))
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match status(&a, LanesStatus::from_code) {
            Some(LanesStatus::Written) => Ok(LanesWrite::Written),
            Some(LanesStatus::Scheduled) => Ok(LanesWrite::Scheduled),
            Some(LanesStatus::Unknown) => Ok(LanesWrite::Unknown),
            Some(LanesStatus::NotEmpty) => Ok(LanesWrite::NotEmpty {
                lane: a.get(1).and_then(text).unwrap_or_default(),
                places: a.get(2).map(u).transpose()?.unwrap_or(0),
            }),
            None => Err(protocol(format!("put_lanes reply {a:?}"))),
        }
    }

    /// `q`'s lanes (empty: none, or no such queue).
    pub async fn queue_lanes(&self, q: &QueueId) -> Result<Lanes> {
        let spec: Option<String> = redis::cmd("HGET")
            .arg(&QueueKeys::of(q).meta)
            .arg("lanes")
            .query_async(&mut self.c())
            .await?;
        let parsed = parse(spec.as_deref().unwrap_or(""));
        let default = parsed
            .iter()
            .find(|(_, slot)| *slot == 0)
            .map(|(l, _)| l.name.clone());
        Lanes::new(parsed.into_iter().map(|(l, _)| l).collect(), default)
            .map_err(|e| protocol(format!("meta lanes {spec:?}: {e}")))
    }

    /// How many are in line in `q`'s lanes other than the default one (slots 1..=7).
    pub async fn other_lanes_places(&self, q: &QueueId) -> Result<u64> {
        let k = QueueKeys::of(q);
        let mut pipe = redis::pipe();
        for (w, p) in &k.lanes {
            pipe.cmd("ZCARD").arg(w).cmd("ZCARD").arg(p);
        }
        let counts: Vec<u64> = pipe.query_async(&mut self.c()).await?;
        Ok(counts.iter().sum())
    }

    /// Each of `q`'s lanes with how many are in line in it (empty without lanes).
    pub async fn lane_counts(&self, q: &QueueId) -> Result<Vec<LaneCount>> {
        let k = QueueKeys::of(q);
        let spec: Option<String> = redis::cmd("HGET")
            .arg(&k.meta)
            .arg("lanes")
            .query_async(&mut self.c())
            .await?;
        let lanes = parse(spec.as_deref().unwrap_or(""));
        if lanes.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (_, slot) in &lanes {
            let (w, p) = k.lane_sets(*slot);
            pipe.cmd("ZCARD").arg(w).cmd("ZCARD").arg(p);
        }
        let counts: Vec<u64> = pipe.query_async(&mut self.c()).await?;
        Ok(lanes
            .into_iter()
            .zip(counts.chunks_exact(2))
            .map(|((lane, slot), c)| LaneCount {
                name: lane.name,
                share: lane.share,
                default: slot == 0,
                waiting: c[0] + c[1],
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn the_meta_field_parses_and_skips_what_is_not_a_lane() {
        let l = parse("general:70:0,members:30:1,BAD:1:2");
        assert_eq!(l.len(), 2);
        assert_eq!(
            (l[1].0.name.as_str(), l[1].0.share, l[1].1),
            ("members", 30, 1)
        );
        assert!(parse("").is_empty());
    }
}
