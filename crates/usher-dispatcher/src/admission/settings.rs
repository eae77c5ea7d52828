//! What the admission loop is told at start-up.

use std::time::Duration;

/// Settings of the admission loop.
#[derive(Debug, Clone)]
pub struct Settings {
    /// This replica's id in the dispatcher registry and in leases.
    pub replica: String,
    pub tick: Duration,
    pub lease_ttl: Duration,
    pub exact_positions: u64,
    /// Where the passthrough courier subscribes to wake signals (its own connection).
    pub redis: usher_core::store::RedisArgs,
}
