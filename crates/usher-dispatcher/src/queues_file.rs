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
//! Draw commitments (when a queue has a scheduled draw): a file entry that carries the draw's
//! seed restores the same commitment; one without it gives the queue a new draw, and the old
//! commitment is void (the hook is [`configure_missing`]: whatever fields the file carries go
//! through the same checks as `PUT`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use usher_core::ids::QueueId;
use usher_core::store::{QueueConfig, Store, StoreError};

use crate::admin::{configured, QueueUpdate};

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

/// The queues of the file, each with its settings as a new queue gets them.
#[derive(Debug, Clone)]
pub struct QueuesFile {
    queues: Vec<(QueueId, QueueConfig)>,
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

    fn parse(path: &Path, text: &str) -> Result<Self, QueuesFileError> {
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
            // A scheduled sale commits its seed once, through the admin API; a file configured
            // again after a data loss must not schedule (or re-seed) a sale behind its back.
            if update.opens_at.is_some() || update.draw_beacon.is_some() {
                return Err(problem(
                    &name,
                    "opens_at and draw_beacon are set through the admin API only".to_owned(),
                ));
            }
            let cfg = configured(None, &update).map_err(|e| problem(&name, e.message))?;
            queues.push((q, cfg));
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
    let mut configured = Vec::new();
    let mut present = Vec::new();
    for (q, cfg) in &file.queues {
        if store.queue_config(q).await?.is_some() {
            present.push(q.clone());
            continue;
        }
        store.put_queue(q, cfg).await?;
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
        let (q, cfg) = &f.queues[0];
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
        // A scheduled sale is the admin API's: its seed is committed once.
        for sale in [
            "a:\n  opens_at: \"2030-01-31T18:00:00Z\"\n",
            "a:\n  draw_beacon: {drand_round: 1}\n",
        ] {
            let e = QueuesFile::parse(p, sale).expect_err(sale).to_string();
            assert!(e.contains("admin API"), "{sale}: {e}");
        }
    }
}
