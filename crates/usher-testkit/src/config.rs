//! Server configurations for tests: what `--help` documents, tuned for a test's time scale.
//!
//! They live here, not in the servers' crates, so production code carries no test-only
//! constructors. Each is a plain struct literal: a new configuration field fails to compile
//! here until the tests say what they want for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use usher_runtime::LogFormat;

/// A gateway on an ephemeral loopback port with a fast heartbeat and a short drain.
pub fn gateway(redis_url: &str) -> usher_gateway::Config {
    usher_gateway::Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        redis: usher_core::store::RedisArgs::standalone(redis_url),
        server_id: None,
        ticket_key: None,
        keepalive_secs: 15,
        retry_ms: 1000,
        heartbeat_ms: 500,
        max_connections: 18_000,
        drain_delay_ms: 200,
        drain_secs: 1,
        worker_threads: 0,
        log_format: LogFormat::Text,
    }
}

/// A dispatcher on an ephemeral loopback port, ticking every `tick_ms`, with a lease of three
/// ticks (at least 300 ms) and a replica id of its own.
pub fn dispatcher(redis_url: &str, tick_ms: u64) -> usher_dispatcher::Config {
    // Replica ids must be unique among live dispatchers; a test may start several.
    static NEXT: AtomicU64 = AtomicU64::new(1);
    usher_dispatcher::Config {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        redis: usher_core::store::RedisArgs::standalone(redis_url),
        tick_ms,
        jwt_key_file: None,
        jwt_key: None,
        admin_token: None,
        exact_positions: 1000,
        replica_id: format!(
            "test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
        lease_ttl_ms: (tick_ms * 3).max(300),
        worker_threads: 0,
        log_format: LogFormat::Text,
    }
}
