//! The dispatcher's two registries of queues, `usher:queues` (every configured queue) and
//! `usher:draws` (queues whose scheduled sale may not be drawn yet), as one tick reads them,
//! with the entries Redis lost listed again.
//!
//! Each registry is one key: in a cluster it lives on one shard, and that shard can lose its
//! data while the queues' own shards keep theirs. A queue missing from `usher:queues` would
//! never be ticked again, and a sale missing from `usher:draws` never drawn. So this replica
//! remembers every queue a registry listed since it started, and lists again those whose own
//! keys say they belong (settings present; draw still pending). A queue whose own keys are
//! gone was lost with its own shard: it comes back when it is configured again
//! (`USHER_QUEUES_FILE`, an operator's `PUT`), which lists it.

use std::collections::HashSet;

use usher_core::ids::QueueId;
use usher_core::store::{DrawPhase, Store, StoreError};

use crate::metrics;

#[derive(Debug, Clone, Copy)]
enum Registry {
    Queues,
    Sales,
}

impl Registry {
    fn name(self) -> &'static str {
        match self {
            Self::Queues => "queue registry",
            Self::Sales => "scheduled sales registry",
        }
    }

    /// Whether `q`'s own keys say it belongs in this registry.
    async fn belongs(self, store: &Store, q: &QueueId) -> Result<bool, StoreError> {
        Ok(match self {
            Self::Queues => store.queue_config(q).await?.is_some(),
            Self::Sales => store
                .schedule_of(q)
                .await?
                .is_some_and(|s| s.phase == DrawPhase::Pending),
        })
    }

    async fn list(self, store: &Store, qs: &[QueueId]) -> Result<(), StoreError> {
        match self {
            Self::Queues => store.register_queues(qs).await,
            Self::Sales => {
                for q in qs {
                    store.mark_sale(q, true).await?;
                }
                Ok(())
            }
        }
    }
}

/// What one registry listed since this replica started.
struct Seen {
    registry: Registry,
    queues: HashSet<QueueId>,
}

impl Seen {
    /// `listed` (what the registry holds now) plus the queues it lost that still belong,
    /// which are listed again.
    async fn relist(&mut self, store: &Store, mut listed: Vec<QueueId>) -> Vec<QueueId> {
        let now: HashSet<&QueueId> = listed.iter().collect();
        let missing: Vec<QueueId> = self
            .queues
            .iter()
            .filter(|q| !now.contains(q))
            .cloned()
            .collect();
        let mut back = Vec::new();
        for q in missing {
            match self.registry.belongs(store, &q).await {
                Ok(true) => back.push(q),
                Ok(false) => {
                    self.queues.remove(&q);
                }
                // Asked again next tick.
                Err(_) => metrics::redis_error(),
            }
        }
        if !back.is_empty() {
            let names: Vec<&str> = back.iter().map(QueueId::as_str).collect();
            match self.registry.list(store, &back).await {
                Ok(()) => tracing::warn!(
                    registry = self.registry.name(),
                    queues = ?names,
                    "a registry lost queues that still belong in it (its data was lost); listed them again"
                ),
                Err(e) => tracing::warn!(
                    registry = self.registry.name(),
                    error = %e,
                    "could not list lost queues again; retrying next tick"
                ),
            }
            listed.extend(back);
        }
        self.queues.extend(listed.iter().cloned());
        listed
    }
}

/// Both registries' memories.
pub(super) struct Registries {
    queues: Seen,
    sales: Seen,
}

impl Default for Registries {
    fn default() -> Self {
        let seen = |registry| Seen {
            registry,
            queues: HashSet::new(),
        };
        Self {
            queues: seen(Registry::Queues),
            sales: seen(Registry::Sales),
        }
    }
}

impl Registries {
    /// The configured queues and the pending sales as one tick should see them, from what
    /// the registries hold now.
    pub(super) async fn relist(
        &mut self,
        store: &Store,
        queues: Vec<QueueId>,
        sales: Vec<QueueId>,
    ) -> (Vec<QueueId>, Vec<QueueId>) {
        let queues = self.queues.relist(store, queues).await;
        let sales = self.sales.relist(store, sales).await;
        (queues, sales)
    }
}
