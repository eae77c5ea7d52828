//! Integration tests on other Redis topologies: Redis Cluster (with its faults and shard
//! losses), Sentinel, and Redis over TLS.
//!
//! One binary, one module per area: `cargo test -p usher-testkit --test topologies <area>::`.

/// The scenarios of the `redis` binary's `contract` and `positions` on a 3-master Redis
/// Cluster (`<area>::cluster::<name>`): the same files, compiled here with this macro.
macro_rules! on_every_backend {
    ($($name:ident),+ $(,)?) => {
        usher_testkit::on_backend!(cluster, RedisCluster, $($name),+);
    };
}

mod cluster;
mod cluster_faults;
mod cluster_shard_loss;
#[path = "../redis/contract.rs"]
mod contract;
#[path = "../redis/positions.rs"]
mod positions;
mod readiness_cluster;
mod redis_tls;
mod sentinel;
