//! Test support: a real `redis-server` per test, in-process usher servers on port 0, an SSE
//! client that reads streams the way a browser's `EventSource` does, and the Redis operations
//! only tests and benchmarks need ([`probe`]), the browser tools the page's tests drive
//! ([`tools`]), and an OTLP/HTTP receiver that collects the spans real binaries export
//! ([`otlp`]), what the API description test needs ([`openapi`]), and the least Redis ACL each
//! binary needs ([`acl`]), and a relay in front of Redis that can hold its answers on one
//! connection ([`redis_relay`]).

pub mod acl;
pub mod answers;
pub mod browser;
pub mod config;
pub mod docs;
pub mod dpop;
pub mod jwks_relay;
pub mod line;
pub mod nginx;
pub mod openapi;
pub mod otlp;
pub mod probe;
pub mod procs;
pub mod raw;
pub mod redis_cluster;
pub mod redis_relay;
pub mod redis_sentinel;
pub mod redis_server;
pub mod solo;
pub mod sse;
pub mod stack;
pub mod tls;
pub mod tools;
pub mod wait;

pub use probe::RedisProbe;
pub use redis_cluster::RedisCluster;
pub use redis_server::RedisServer;
pub use solo::solo;
pub use sse::SseClient;
pub use stack::Stack;
pub use wait::{eventually, eventually_within, patience, patient};

/// The tick arguments a dispatcher holding `lease` would pass at admission time `now_ms`
/// (100 ms budget on a queue's first tick, 1,000 exact places): for tests and benchmarks of the
/// Redis side alone.
pub fn tick_args(lease: &usher_core::store::Lease, now_ms: u64) -> usher_core::store::TickArgs<'_> {
    usher_core::store::TickArgs {
        now_ms,
        clock_ms: None,
        first_elapsed_ms: 100,
        max_elapsed_ms: 1000,
        exact: 1000,
        max_position_error: 0.01,
        store_rate: None,
        lease,
        lease_ttl_ms: 600_000,
        gateways: &[],
        bucket_rate: None,
        tick_ms: 100,
    }
}

/// Runs one dispatcher tick script call on `q` directly, now (see [`tick_args`]).
pub async fn tick_once(
    store: &usher_core::store::Store,
    q: &usher_core::ids::QueueId,
    lease: &usher_core::store::Lease,
) -> Result<usher_core::store::Tick, usher_core::store::StoreError> {
    store
        .tick(q, &tick_args(lease, usher_core::time::now_ms()))
        .await
}

/// A whole tick on `q` at admission time `now_ms` ([`tick_calls`] with [`tick_args`]), summed:
/// its calls' admissions and drops, and its last call's `waiting` and `carry`. Fails on a call
/// that did not tick (the error names its outcome).
pub async fn tick_at(
    store: &usher_core::store::Store,
    q: &usher_core::ids::QueueId,
    lease: &usher_core::store::Lease,
    now_ms: u64,
) -> anyhow::Result<usher_core::store::TickOutcome> {
    let mut sum = usher_core::store::TickOutcome::default();
    for call in tick_calls(store, q, &tick_args(lease, now_ms)).await? {
        match call {
            usher_core::store::Tick::Ticked(o) => {
                sum.admitted += o.admitted;
                sum.dropped += o.dropped;
                sum.waiting = o.waiting;
                sum.carry = o.carry;
            }
            other => anyhow::bail!("tick at {now_ms}: {other:?}"),
        }
    }
    Ok(sum)
}

/// Runs a whole tick on `q` directly: script calls with `args` until one has no `more` (or
/// does not tick), at most 100 of them; their outcomes, in order.
pub async fn tick_calls(
    store: &usher_core::store::Store,
    q: &usher_core::ids::QueueId,
    args: &usher_core::store::TickArgs<'_>,
) -> Result<Vec<usher_core::store::Tick>, usher_core::store::StoreError> {
    let mut calls = Vec::new();
    while calls.len() < 100 {
        let t = store.tick(q, args).await?;
        let more = matches!(&t, usher_core::store::Tick::Ticked(o) if o.more);
        calls.push(t);
        if !more {
            break;
        }
    }
    Ok(calls)
}
