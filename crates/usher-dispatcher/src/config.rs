//! Dispatcher configuration: every flag is also a `USHER_*` environment variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use usher_core::store::RedisArgs;
use usher_runtime::LogFormat;

/// usher dispatcher — admits waiting browsers at a controlled rate.
///
/// Every tick, for every open queue, the dispatcher moves `admit_per_second × elapsed` places
/// from the head of the queue's line into its active sessions (one Lua script, one Redis slot),
/// mints an Ed25519 entry token (JWT) for each, and sends `admitted` and `state` messages to the
/// Redis Stream of the gateway holding each browser.
///
/// It also serves the admin API (`/admin/queues/...`, bearer token) and the public keys booking
/// services use to verify entry tokens (`/.well-known/jwks.json`).
#[derive(Debug, Clone, Parser)]
#[command(name = "usher-dispatcher", version, about, long_about)]
pub struct Config {
    /// Address the HTTP server (admin API and dashboard, JWKS, health) listens on.
    #[arg(long, env = "USHER_LISTEN", default_value = "0.0.0.0:8081")]
    pub listen: SocketAddr,

    /// How to reach Redis (URL, standalone or cluster, TLS files).
    #[command(flatten)]
    pub redis: RedisArgs,

    /// Milliseconds between admission ticks. Each tick admits `admit_per_second × elapsed`
    /// places per queue and publishes every queue's line to the gateways, so this is also how
    /// often browsers see their position move.
    #[arg(long, env = "USHER_TICK_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub tick_ms: u64,

    /// File holding the entry-token keys: one or more PEM blocks, concatenated. The first must
    /// be an Ed25519 private key (PKCS#8, `-----BEGIN PRIVATE KEY-----`, made with `openssl
    /// genpkey -algorithm ed25519`): it signs every new token. Later blocks are verify-only:
    /// private keys (retired signing keys) or public keys (`-----BEGIN PUBLIC KEY-----`, e.g. the
    /// next signing key while it is rolled out). All are published in the JWKS, the signing key
    /// first. A key listed twice is refused. docs/http-contract.md ("Entry tokens") has the
    /// rotation steps.
    #[arg(long, env = "USHER_JWT_KEY_FILE", conflicts_with = "jwt_key")]
    pub jwt_key_file: Option<PathBuf>,

    /// The entry-token keys themselves (the same PEM text as `USHER_JWT_KEY_FILE` holds: the
    /// signing key first, then any verify-only keys), instead of a file. When neither is
    /// given, a development key is generated, shared with other dispatchers through Redis, and
    /// a warning is logged: do not run production that way.
    #[arg(long, env = "USHER_JWT_KEY", hide_env_values = true)]
    pub jwt_key: Option<String>,

    /// Bearer tokens of the admin API (`Authorization: Bearer <token>`): `label:token`, several
    /// separated by commas (`alice:…,deploy-bot:…`), so the audit trail names who made each
    /// change; a token without a label is labelled `admin`. Labels are 1 to 64 letters, digits,
    /// `.`, `_` or `-`; each token (after the `label:`) has at least 32 characters (e.g.
    /// `openssl rand -hex 32`), or the dispatcher refuses to start. Required: without it the
    /// dispatcher refuses to start, unless `USHER_DEV=1`.
    #[arg(long, env = "USHER_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Bearer token booking services send with their load reports (`PUT
    /// /api/backends/{name}/load`, for queues with an adaptive rate); separate from the admin
    /// token, so a booking service cannot reconfigure queues. At least 32 characters, or the
    /// dispatcher refuses to start. When unset, every load report is refused with 401 (and a
    /// warning is logged once), so adaptive queues admit nobody.
    #[arg(long, env = "USHER_SERVICE_TOKEN", hide_env_values = true)]
    pub service_token: Option<String>,

    /// Development mode: without `USHER_ADMIN_TOKEN`, generate an admin token, share it with the
    /// other dispatchers through Redis (the first one stores it, every one reads it back) and
    /// log it once at start. Never in production: anyone with Redis access can read it.
    /// `make run` sets it.
    #[arg(long, env = "USHER_DEV", default_value_t = false, num_args = 0..=1, default_missing_value = "true", value_parser = clap::builder::BoolishValueParser::new())]
    pub dev: bool,

    /// Queue definitions to load at start and to apply again whenever Redis turns out to have
    /// lost a queue (restarted empty, flushed): YAML or JSON, a map of queue id → the fields
    /// `PUT /admin/queues/{queue}` takes. At start, only queues missing from Redis are
    /// created (changes made through the admin API since are kept). docs/failure-model.md
    /// has what a loss keeps and what it cannot.
    #[arg(long, env = "USHER_QUEUES_FILE")]
    pub queues_file: Option<PathBuf>,

    /// How many places at the head of each line are published exactly in every `state`
    /// message. Beyond them, gateways interpolate between samples (error ≤ 1%).
    #[arg(long, env = "USHER_EXACT_POSITIONS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub exact_positions: u64,

    /// This replica's id in the dispatcher registry and in queue leases. Run any number of
    /// replicas: each queue is driven by exactly one of them at a time. Defaults to a random
    /// id unique to this process.
    // The default is drawn once, when the flags are parsed: every use of the id (registry,
    // leases, logs) must see the same one.
    #[arg(long, env = "USHER_REPLICA_ID", default_value_t = random_replica_id(), hide_default_value = true)]
    pub replica_id: String,

    /// Milliseconds a queue lease (and a replica's registry entry) lasts without renewal. When
    /// a replica dies, another takes its queues within this time plus one or two ticks. Must be
    /// at least two ticks.
    #[arg(long, env = "USHER_LEASE_TTL_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub lease_ttl_ms: u64,

    /// Runtime worker threads; 0 = one per core. Use 1 when several usher processes share a
    /// few cores (the scheduler then does no cross-thread wake-ups).
    #[arg(long, env = "USHER_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Deadlines and the connection cap for slow or idle clients.
    #[command(flatten)]
    pub serve: usher_http::ServeLimits,

    /// Log format: `text` or `json`. Filter with `RUST_LOG` (default `info`).
    #[arg(long, env = "USHER_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("USHER_LEASE_TTL_MS ({lease_ttl_ms}) must be at least two ticks (USHER_TICK_MS = {tick_ms})")]
    LeaseTooShort { lease_ttl_ms: u64, tick_ms: u64 },
    #[error("USHER_REPLICA_ID must be 1 to 128 characters without '|'")]
    ReplicaId,
    #[error("USHER_ADMIN_TOKEN is set but empty; set a long random token or unset it")]
    EmptyAdminToken,
    #[error("USHER_SERVICE_TOKEN is set but empty; set a long random token or unset it")]
    EmptyServiceToken,
    #[error(
        "USHER_SERVICE_TOKEN has {chars} characters; at least {} are required (e.g. \
         `openssl rand -hex 32`)",
        crate::admin::auth::MIN_SECRET_CHARS
    )]
    ShortServiceToken { chars: usize },
    #[error(
        "USHER_ADMIN_TOKEN is not set: the admin API has no unauthenticated access. Set it \
         (`label:token`, comma-separated for several), or set USHER_DEV=1 for a development \
         token shared through Redis"
    )]
    NoAdminToken,
    #[error("USHER_ADMIN_TOKEN: {0}")]
    BadAdminToken(#[from] crate::admin::auth::TokenSpecError),
}

impl Config {
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }

    /// Checks what clap cannot check field by field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.lease_ttl_ms < self.tick_ms * 2 {
            return Err(ConfigError::LeaseTooShort {
                lease_ttl_ms: self.lease_ttl_ms,
                tick_ms: self.tick_ms,
            });
        }
        match self.admin_token.as_deref() {
            Some(t) if t.trim().is_empty() => return Err(ConfigError::EmptyAdminToken),
            Some(t) => {
                crate::admin::auth::AdminTokens::parse(t)?;
            }
            None if !self.dev => return Err(ConfigError::NoAdminToken),
            None => {}
        }
        match self.service_token.as_deref() {
            Some(t) if t.trim().is_empty() => return Err(ConfigError::EmptyServiceToken),
            Some(t) if t.chars().count() < crate::admin::auth::MIN_SECRET_CHARS => {
                return Err(ConfigError::ShortServiceToken {
                    chars: t.chars().count(),
                })
            }
            _ => {}
        }
        let id = &self.replica_id;
        if id.is_empty() || id.len() > 128 || id.contains('|') {
            return Err(ConfigError::ReplicaId);
        }
        Ok(())
    }
}

/// A replica id unique to this process, for when `USHER_REPLICA_ID` is not set.
fn random_replica_id() -> String {
    format!("dsp-{:016x}", rand::random::<u64>())
}
