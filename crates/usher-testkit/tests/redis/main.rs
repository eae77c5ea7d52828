//! Integration tests that need only a plain `redis-server` (started per test from the
//! machine's binary) and the usher binaries from `target/debug`: the bulk of the suite and,
//! with the unit tests, `make test-fast`.
//!
//! One binary, one module per area: `cargo test -p usher-testkit --test redis <area>::`.

/// The scenarios `contract` and `positions` run on every backend: here on one redis-server
/// (`<area>::standalone::<name>`); `topologies` compiles the same files for a Redis Cluster.
macro_rules! on_every_backend {
    ($($name:ident),+ $(,)?) => {
        usher_testkit::on_backend!(standalone, RedisServer, $($name),+);
    };
}

mod draw_check;

mod abuse;
mod adaptive;
mod admin_auth;
mod admission;
mod admitted_first;
mod ahead;
mod ahead_paths;
mod away_batch;
mod away_wall;
mod bind_loss;
mod bind_script;
mod bind_store;
mod burst;
mod capacity;
mod contract;
mod data_loss;
mod draw;
mod draw_data_loss;
mod draw_steps;
mod edits;
mod faults;
mod flow;
mod hard_limits;
mod inventory;
mod invitations;
mod keepalive;
mod lanes;
mod lanes_e2e;
mod layering;
mod load_reports;
mod logs;
mod metrics;
mod no_shows;
mod notices;
mod open_door;
mod open_files_cap;
mod out_of_memory;
mod outage;
mod page;
mod passthrough;
mod passthrough_courier;
mod poll_rate;
mod positions;
mod pow;
mod prequeue;
mod process;
mod proxy_wait;
mod readiness;
mod reconnect;
mod redis_acl;
mod rehearsal_clock;
mod rehearsal_lanes;
mod report_e2e;
mod report_store;
mod report_windows;
mod rotation;
mod scale;
mod session_dpop;
mod session_trust;
mod sessions;
mod shop;
mod slow_clients;
mod staging;
mod states;
mod stranded;
mod strict_http;
mod time_rules;
mod traces;
