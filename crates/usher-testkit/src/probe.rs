//! Redis operations only tests and benchmarks need: what Redis reports about itself (`INFO`,
//! `MEMORY USAGE`) and a single join. usher's processes never call them, so they live here
//! rather than in `usher_core::store`; key names still come from `usher_core::keys`, the one
//! place they are defined.

use usher_core::ids::QueueId;
use usher_core::keys::QueueKeys;
use usher_core::store::{PlaceState, Store, StoreError};

/// A plain connection to a test's Redis, for questions about Redis itself.
#[derive(Clone)]
pub struct RedisProbe {
    conn: redis::aio::MultiplexedConnection,
}

impl RedisProbe {
    pub async fn connect(url: &str) -> redis::RedisResult<Self> {
        let client = redis::Client::open(url)?;
        let conn = client.get_multiplexed_async_connection().await?;
        Ok(Self { conn })
    }

    /// An `INFO` section as text (tests read commandstats from it).
    pub async fn info(&self, section: &str) -> redis::RedisResult<String> {
        redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn.clone())
            .await
    }

    /// `MEMORY USAGE` of a queue's waiting set, with `SAMPLES 0` (exact); 0 when it is empty.
    pub async fn waiting_memory(&self, q: &QueueId) -> redis::RedisResult<u64> {
        let v: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(QueueKeys::new(q).waiting)
            .arg("SAMPLES")
            .arg(0)
            .query_async(&mut self.conn.clone())
            .await?;
        Ok(v.unwrap_or(0))
    }
}

/// Takes one new place at the tail of `q` for a browser held by gateway `gw`: a join call of
/// one, as a gateway makes for a browser that joins alone.
pub async fn join(
    store: &Store,
    q: &QueueId,
    gw: u16,
    now_ms: u64,
) -> Result<PlaceState, StoreError> {
    Ok(store.join_many(q, gw, now_ms, 1).await?.state(0))
}
