//! Server configurations for tests: what `--help` documents, tuned for a test's time scale.
//!
//! They live here, not in the servers' crates, so production code carries no test-only
//! constructors. Each is a plain struct literal: a new configuration field fails to compile
//! here until the tests say what they want for it.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};

use usher_runtime::LogFormat;

/// The admin token every test dispatcher accepts, labelled [`ADMIN_LABEL`]
/// ([`dispatcher`], and [`crate::procs::Proc`] for the binary); [`admin_client`] sends it.
pub const ADMIN_TOKEN: &str = "usher-test-admin-token-7d1c0e9a5b3f4e21";
/// The label of [`ADMIN_TOKEN`], as the audit trail names it.
pub const ADMIN_LABEL: &str = "tests";

/// The longest any request of [`admin_client`] may take, before patience.
pub const ADMIN_REQUEST_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// `USHER_ADMIN_TOKEN` for test dispatchers: [`ADMIN_TOKEN`] labelled [`ADMIN_LABEL`].
pub fn admin_token_spec() -> String {
    format!("{ADMIN_LABEL}:{ADMIN_TOKEN}")
}

/// An HTTP client that sends [`ADMIN_TOKEN`] with every request: the admin API has no
/// unauthenticated access.
///
/// Every request it makes is bounded ([`ADMIN_REQUEST_LIMIT`], scaled by
/// [`crate::wait::patience`]): no admin call streams or takes that long, so one that does is a
/// server that took the request and never answered, and the test must fail, not hang.
pub fn admin_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    let value = format!("Bearer {ADMIN_TOKEN}");
    if let Ok(v) = reqwest::header::HeaderValue::from_str(&value) {
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .timeout(crate::wait::patient(ADMIN_REQUEST_LIMIT))
        .build()
        .unwrap_or_default()
}

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
        page_dir: None,
        // Hardening (issue 14). Tests burst from one loopback address: the per-IP limits are
        // off unless a test turns them on; the socket cap and deadlines are the defaults.
        trusted_proxy_hops: 0,
        proxy_protocol: false,
        ip_join_rate: 0,
        ip_join_burst: 0,
        ip_poll_rate: 0,
        ip_poll_burst: 0,
        ip_max_streams: 0,
        ip_max_places: 0,
        // Issue 23: sockets per address off too (tests connect from one address); IPv6 by
        // the default /56.
        ip_max_sockets: 0,
        ipv6_prefix: 56,
        max_sockets: 20_000,
        health_reserve_sockets: 64,
        header_timeout_secs: 10,
        body_timeout_secs: 10,
        idle_timeout_secs: 30,
        restore_window_secs: 120,
        // Proof of work (issue 14): the secret is shared through Redis, as in production
        // without USHER_CHALLENGE_SECRET; puzzles live the default 120 s.
        challenge_secret: None,
        challenge_ttl_secs: 120,
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
        admin_token: Some(admin_token_spec()),
        service_token: None,
        dev: false,
        queues_file: None,
        exact_positions: 1000,
        replica_id: format!(
            "test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ),
        lease_ttl_ms: (tick_ms * 3).max(300),
        worker_threads: 0,
        serve: usher_http::ServeLimits::default(),
        log_format: LogFormat::Text,
    }
}

/// The demo booking service against the dispatcher at `dispatcher_url` (its JWKS and its
/// session API), on a loopback port chosen by the OS, without load reports.
pub fn booking(dispatcher_url: &str) -> usher_booking_demo::Config {
    usher_booking_demo::Config {
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        jwks_url: format!("{dispatcher_url}/.well-known/jwks.json"),
        dispatcher_url: dispatcher_url.to_owned(),
        load_backend: None,
        service_token: None,
        load_report_seconds: 2,
        jwks_min_gap_seconds: 3,
        jwks_max_age_seconds: 300,
        queue_page_url: None,
        log_format: Default::default(),
        serve: usher_http::ServeLimits::default(),
    }
}
