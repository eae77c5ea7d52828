//! Integration tests on other Redis topologies: Redis Cluster (with its faults and shard
//! losses), Sentinel, and Redis over TLS.
//!
//! One binary, one module per area: `cargo test -p usher-testkit --test topologies <area>::`.

mod cluster;
mod cluster_faults;
mod cluster_shard_loss;
mod redis_tls;
mod sentinel;
