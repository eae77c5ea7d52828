//! `USHER_QUEUES_FILE`: queue definitions kept outside Redis, so a Redis that lost its data
//! (restarted empty, flushed, a Cluster shard replaced) gets its queues back by itself.
//!
//! The file is YAML (JSON is YAML too): a map of queue id → the fields `PUT
//! /admin/queues/{queue}` takes, checked the same way, at start (a bad file stops the
//! dispatcher). At start, and every [`RECHECK`] after, every queue of the file missing from
//! Redis is configured from it. A queue that exists is left as it is: changes made through the
//! admin API since the file was written win. The check is per queue (its meta hash), not
//! "is Redis empty", because a Cluster shard can lose some queues and keep others.
//!
//! A queue configured again gets a new epoch and a place counter above every id handed out
//! before (`Store::put_queue`); gateways then put back the places of the browsers they hold.
//!
//! A scheduled sale: an entry may carry `opens_at` (and `draw_beacon`'s round), and the
//! `draw_seed` the sale was scheduled with through the admin API. A queue configured while
//! its `opens_at` is ahead is scheduled before it takes any join, with that seed, so the
//! commitment published before a loss is published again and the draw still verifies;
//! without the seed it gets a fresh one, and the gateways record the earlier draw void when
//! they put its pre-queue back (`lua/restore_pre.lua`). A queue configured after its
//! `opens_at` gets no sale: the draw is void, and the pre-queue goes into the line in join
//! order. The seed stays secret: it is never logged (`Seed`'s `Debug` is redacted).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use usher_core::draw::Seed;
use usher_core::ids::QueueId;
use usher_core::lanes::Lanes;
use usher_core::store::{BeaconChange, QueueConfig, Store, StoreError};
use usher_core::time::{now_ms, parse_rfc3339_ms};

use crate::admin::queue_update::{configured, QueueUpdate};

/// How often the dispatcher looks for queues of the file missing from Redis.
pub const RECHECK: Duration = Duration::from_secs(1);

/// A queues file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum QueuesFileError {
    #[error("cannot read USHER_QUEUES_FILE {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("USHER_QUEUES_FILE {path}: {source}")]
    Parse {
        path: PathBuf,
        source: serde_yaml_ng::Error,
    },
    #[error("USHER_QUEUES_FILE {path}: queue {queue:?}: {problem}")]
    Queue {
        path: PathBuf,
        queue: String,
        problem: String,
    },
}

/// The queues of the file, each with its settings as a new queue gets them, and its sale.
#[derive(Debug, Clone)]
pub struct QueuesFile {
    queues: Vec<(QueueId, QueueConfig, Option<Sale>, Lanes)>,
}

/// A scheduled sale of the file.
#[derive(Debug, Clone)]
struct Sale {
    opens_at_ms: u64,
    /// The seed the sale was scheduled with, to publish the same commitment again.
    seed: Option<Seed>,
    drand_round: Option<u64>,
}

impl Sale {
    /// The sale of a file entry: `opens_at` parsed (it may have passed: the file outlives
    /// it), `draw_seed` and `draw_beacon` only beside it.
    fn of(update: &QueueUpdate) -> Result<Option<Self>, String> {
        let round = update.draw_beacon.flatten().map(|b| b.drand_round);
        let Some(Some(text)) = &update.opens_at else {
            if update.draw_seed.is_some() || round.is_some() {
                return Err("draw_seed and draw_beacon need the sale's opens_at".to_owned());
            }
            return Ok(None);
        };
        let opens_at_ms = parse_rfc3339_ms(text).ok_or_else(|| {
            format!(
                "opens_at must be an RFC 3339 time such as \"2030-01-31T18:00:00Z\", not {text:?}"
            )
        })?;
        Ok(Some(Self {
            opens_at_ms,
            seed: update.draw_seed.clone(),
            drand_round: round,
        }))
    }
}

impl QueuesFile {
    /// Reads and checks the file.
    pub fn load(path: &Path) -> Result<Self, QueuesFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| QueuesFileError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Checks `text` as the file at `path` would be (`path` only names it in errors): what
    /// a rehearsal (`usher-rehearse`) reads its queue's settings with, so they are exactly
    /// what `PUT /admin/queues/{queue}` takes.
    pub fn parse(path: &Path, text: &str) -> Result<Self, QueuesFileError> {
        let entries: BTreeMap<String, QueueUpdate> =
            serde_yaml_ng::from_str(text).map_err(|source| QueuesFileError::Parse {
                path: path.to_owned(),
                source,
            })?;
        let problem = |queue: &str, problem: String| QueuesFileError::Queue {
            path: path.to_owned(),
            queue: queue.to_owned(),
            problem,
        };
        let mut queues = Vec::new();
        for (name, update) in entries {
            let q = QueueId::new(&name).map_err(|e| problem(&name, e.to_string()))?;
            let sale = Sale::of(&update).map_err(|e| problem(&name, e))?;
            let cfg = configured(None, &update).map_err(|e| problem(&name, e.message))?;
            // Lanes (usher_core::lanes), checked as `PUT` checks them.
            let lanes = match &update.lanes {
                Some(l) => Lanes::new(l.clone(), update.default_lane.clone()),
                None if update.default_lane.is_some() => {
                    Lanes::new(Vec::new(), update.default_lane.clone())
                }
                None => Ok(Lanes::default()),
            }
            .map_err(|e| problem(&name, e.to_string()))?;
            if !lanes.is_empty() && sale.is_some() {
                return Err(problem(
                    &name,
                    "lanes and opens_at cannot be combined".to_owned(),
                ));
            }
            queues.push((q, cfg, sale, lanes));
        }
        Ok(Self { queues })
    }

    pub fn len(&self) -> usize {
        self.queues.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }
}

/// Configures every queue of `file` that Redis does not know, and lists the others in the
/// registry again if it lost them; returns those it configured.
pub async fn configure_missing(
    store: &Store,
    file: &QueuesFile,
) -> Result<Vec<QueueId>, StoreError> {
    configure_missing_at(store, file, now_ms()).await
}

/// [`configure_missing`] at `now_ms` of a given clock (a rehearsal's virtual one): a sale
/// whose `opens_at` is after `now_ms` is scheduled.
pub async fn configure_missing_at(
    store: &Store,
    file: &QueuesFile,
    now_ms: u64,
) -> Result<Vec<QueueId>, StoreError> {
    let mut configured = Vec::new();
    let mut present = Vec::new();
    for (q, cfg, sale, lanes) in &file.queues {
        // Configured means its epoch is written, which `put_queue` does last: a restore cut
        // short after the sale was scheduled (`meta` no longer empty) is done again, not taken
        // for a configured queue whose browsers would then be told `place_lost`.
        if store.queue_epoch(q).await?.is_some() {
            present.push(q.clone());
            continue;
        }
        // Before the settings, as `PUT` does: the queue takes no join into its line first.
        if let Some(sale) = sale {
            schedule(store, q, sale, now_ms).await?;
        }
        store.put_queue(q, cfg).await?;
        if !lanes.is_empty() {
            // A queue just configured has no place: nothing can refuse its lanes.
            store.put_lanes(q, lanes).await?;
        }
        tracing::warn!(
            target: "audit",
            who = "queues-file",
            queue = %q,
            "queue configured from USHER_QUEUES_FILE (missing from redis: first start, or redis lost it)"
        );
        configured.push(q.clone());
    }
    // A queue whose settings survived may still be missing from the registry (in a cluster the
    // registry's shard can lose its data alone): list it again, or nobody would tick it.
    store.register_queues(&present).await?;
    Ok(configured)
}

/// Schedules the file's `sale` of `q` (missing from Redis) if its `opens_at` is ahead.
async fn schedule(store: &Store, q: &QueueId, sale: &Sale, now_ms: u64) -> Result<(), StoreError> {
    if sale.opens_at_ms <= now_ms {
        tracing::warn!(queue = %q, opens_at_ms = sale.opens_at_ms, "USHER_QUEUES_FILE: the sale's opens_at has passed: configured without a draw");
        return Ok(());
    }
    let seed = sale.seed.clone().unwrap_or_else(Seed::generate);
    store.schedule(q, Some(sale.opens_at_ms), &seed).await?;
    if let Some(r) = sale.drand_round {
        store.set_beacon(q, BeaconChange::Round(Some(r))).await?;
    }
    tracing::warn!(
        target: "audit",
        who = "queues-file",
        queue = %q,
        commitment = %seed.commitment(),
        seed_from_file = sale.seed.is_some(),
        "sale scheduled from USHER_QUEUES_FILE"
    );
    Ok(())
}

/// Re-applies the file every [`RECHECK`] until `cancel`; `hint` hears of each queue
/// configured (so the admission loop ticks it at once).
pub async fn watch(
    store: Store,
    file: QueuesFile,
    cancel: CancellationToken,
    hint: impl Fn(QueueId) + Send,
) {
    let mut failing = false;
    loop {
        tokio::select! {
            () = cancel.cancelled() => break,
            () = tokio::time::sleep(RECHECK) => {}
        }
        match configure_missing(&store, &file).await {
            Ok(done) => {
                failing = false;
                done.into_iter().for_each(&hint);
            }
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "could not check the queues of USHER_QUEUES_FILE; retrying");
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_and_json_files_parse_and_are_checked_like_put() {
        let p = Path::new("queues.yaml");
        let f = QueuesFile::parse(
            p,
            "concert:\n  admit_per_second: 5\n  paused: true\nother: {}\n",
        )
        .expect("valid yaml");
        assert_eq!(f.len(), 2);
        let (q, cfg, _, _) = &f.queues[0];
        assert_eq!(
            (q.as_str(), cfg.admit_per_second, cfg.paused),
            ("concert", 5.0, true)
        );
        let f = QueuesFile::parse(p, r#"{"a": {"open": true, "grace_seconds": 10}}"#)
            .expect("valid json");
        assert_eq!(f.queues[0].1.grace_seconds, 10);
        for bad in [
            "a:\n  admit_per_second: 0\n",
            "a:\n  bogus: 1\n",
            "bad.id:\n  open: true\n",
            "- a\n- b\n",
        ] {
            assert!(QueuesFile::parse(p, bad).is_err(), "{bad}");
        }
        // A sale: opens_at (past ones too: the file outlives them), its seed and round.
        let seed = "ab".repeat(32);
        let f = QueuesFile::parse(
            p,
            &format!("a:\n  opens_at: \"2030-01-31T18:00:00Z\"\n  draw_seed: \"{seed}\"\n  draw_beacon: {{drand_round: 7}}\nb:\n  opens_at: \"2001-01-01T00:00:00Z\"\n"),
        )
        .expect("sales");
        let sale = f.queues[0].2.as_ref().expect("a has a sale");
        assert_eq!(sale.seed, Seed::from_hex(&seed));
        assert_eq!(sale.drand_round, Some(7));
        assert!(f.queues[1].2.as_ref().is_some_and(|s| s.seed.is_none()));
        assert!(
            !format!("{f:?}").contains(&seed),
            "the seed never shows in Debug"
        );
        // Still refused: what has no sale to belong to, and what is not a seed or a time.
        for (bad, why) in [
            (
                format!("a:\n  draw_seed: \"{seed}\"\n"),
                "need the sale's opens_at",
            ),
            (
                "a:\n  draw_beacon: {drand_round: 1}\n".to_owned(),
                "need the sale's opens_at",
            ),
            ("a:\n  opens_at: \"soon\"\n".to_owned(), "RFC 3339"),
            (
                "a:\n  opens_at: \"2030-01-31T18:00:00Z\"\n  draw_seed: \"abcd\"\n".to_owned(),
                "32 bytes of hex",
            ),
        ] {
            let e = QueuesFile::parse(p, &bad).expect_err(&bad).to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}

#[cfg(test)]
mod lane_tests {
    use super::*;

    /// Lanes in the file are checked as `PUT` checks them, and never with a sale.
    #[test]
    fn lanes_in_the_file_are_checked_like_put() {
        let p = Path::new("queues.yaml");
        let f = QueuesFile::parse(
            p,
            "a:\n  lanes: [{name: general, share: 70}, {name: members, share: 30}]\n  default_lane: general\n",
        )
        .expect("valid lanes");
        let lanes = &f.queues[0].3;
        assert_eq!(lanes.lanes().len(), 2);
        assert_eq!(lanes.default_lane().map(|l| l.as_str()), Some("general"));
        for bad in [
            "a:\n  lanes: [{name: general, share: 70}]\n",
            "a:\n  lanes: [{name: Gen, share: 100}]\n",
            "a:\n  default_lane: general\n",
            "a:\n  opens_at: \"2030-01-31T18:00:00Z\"\n  lanes: [{name: general, share: 100}]\n",
        ] {
            assert!(QueuesFile::parse(p, bad).is_err(), "{bad}");
        }
    }
}
