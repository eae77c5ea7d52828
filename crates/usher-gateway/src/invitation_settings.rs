//! Queues' invitation settings as a gateway caches them (`crate::invitation` reads them for
//! every join and every `POST …/invitation`), apart from the gateway's shared state so that
//! state can hold the cache without importing the invitation routes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use usher_core::ids::QueueId;
use usher_core::store::{InvitationSetting, Store, StoreError};

/// How long a queue's invitation setting is used before it is read again.
const SETTING_TTL: Duration = Duration::from_secs(1);
/// Most queues whose setting is cached (past this the cache starts over).
const MAX_CACHED: usize = 10_000;

type Cached = (Instant, Option<Arc<InvitationSetting>>);

/// Queues' invitation settings, cached for [`SETTING_TTL`]: every join asks whether its queue
/// requires an invitation, and a flood of joins must not become a flood of reads.
#[derive(Default)]
pub(crate) struct Settings {
    cache: Mutex<HashMap<QueueId, Cached>>,
}

impl Settings {
    /// `q`'s setting; `None` for an unknown queue.
    pub(crate) async fn get(
        &self,
        store: &Store,
        q: &QueueId,
    ) -> Result<Option<Arc<InvitationSetting>>, StoreError> {
        let lock = || self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, s)) = lock().get(q) {
            if at.elapsed() < SETTING_TTL {
                return Ok(s.clone());
            }
        }
        let s = store.invitation_setting(q).await?.map(Arc::new);
        let mut cache = lock();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(q.clone(), (Instant::now(), s.clone()));
        Ok(s)
    }
}
