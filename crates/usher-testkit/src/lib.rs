//! Test support: a real `redis-server` per test, in-process usher servers on port 0, and an
//! SSE client that reads streams the way a browser's `EventSource` does.

pub mod browser;
pub mod procs;
pub mod redis_server;
pub mod sse;
pub mod stack;

pub use redis_server::RedisServer;
pub use sse::SseClient;
pub use stack::Stack;

/// Runs one dispatcher tick script on `q` directly (100 ms budget, 1,000 exact places), as a
/// dispatcher holding `lease` would: for tests and benchmarks of the Redis side alone.
pub async fn tick_once(
    store: &usher_core::store::Store,
    q: &usher_core::ids::QueueId,
    lease: &usher_core::store::Lease,
) -> Result<usher_core::store::Tick, usher_core::store::StoreError> {
    store
        .tick(
            q,
            &usher_core::store::TickArgs {
                now_ms: usher_core::time::now_ms(),
                first_elapsed_ms: 100,
                max_elapsed_ms: 1000,
                exact: 1000,
                max_position_error: 0.01,
                store_rate: None,
                lease,
                lease_ttl_ms: 600_000,
                gateways: &[],
            },
        )
        .await
}
