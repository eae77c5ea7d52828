//! All Redis access. This module (with [`crate::keys`] and `src/lua/`) is the only code that
//! knows key names and scripts; the binaries call these typed operations.
//!
//! The operations are split by who calls them:
//! * `admin` — queue settings and counters (the dispatcher's admin API);
//! * `gateways` — the gateway registry and gateways' interest in queues;
//! * `streams` — the per-gateway streams the dispatcher writes and each gateway reads;
//! * `places` — a browser's place: join, resume, status, leave, away (the gateways);
//! * `sessions` — an admitted place's session: status, touch, release (the dispatcher's
//!   session API for booking services);
//! * `draw` — a scheduled sale: its schedule, entrant hashes, the draw and its record;
//! * `dispatch` — leases and replicas; `dispatch::tick`, `dispatch::outbox` and
//!   `dispatch::records` (the dispatcher).
//!
//! Underneath, `reply` names every status a script returns (the Lua reads the same list),
//! `scripts` loads the Lua, and `decode` turns raw replies into values. The modules are
//! private: every type and constant is reached as `usher_core::store::X`, re-exported here.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::Value;

use crate::keys;

mod admin;
mod decode;
mod dispatch;
mod draw;
mod gateways;
mod places;
mod reply;
mod scripts;
mod sessions;
mod streams;

pub use admin::{QueueConfig, QueueStats};
pub use dispatch::outbox::OutboxEntry;
pub use dispatch::records::TokenRecord;
pub use dispatch::tick::{Tick, TickArgs, TickOutcome, ADMIT_PER_CALL, MAX_ADMIT_PER_TICK};
pub use dispatch::Lease;
pub use draw::{Beacon, BeaconChange, BeaconOutcome, DrawOutcome, DrawPhase, DueDraw, Schedule};
pub use gateways::{GatewayInfo, GWS_TTL_MS};
pub use places::{Joined, LeaveOutcome, PlaceState, JOIN_BATCH_MAX};
pub use sessions::SessionState;
pub use streams::{StreamEntry, STREAM_MAXLEN};

/// Why a store operation failed. The messages do not say "redis" themselves: the callers'
/// errors name the component that failed, so a message reads the word once.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The connection or the command failed (Redis' own message). The prefix is said here
    /// once; the crates that wrap a `StoreError` pass it through unchanged.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// Redis answered something the scripts never return (a bug, or a foreign writer).
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
}

pub type Result<T> = std::result::Result<T, StoreError>;

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::Protocol(what.into())
}

/// The connection to Redis, shared by all tasks of a process. Reconnects by itself.
#[derive(Clone)]
pub struct Store {
    conn: ConnectionManager,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Store")
    }
}

/// Which development secret to share.
#[derive(Debug, Clone, Copy)]
pub enum DevSecret {
    JwtKey,
    TicketKey,
}

impl Store {
    /// Connects for ordinary commands (each answered within `response_timeout`).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with_timeout(url, Duration::from_secs(5)).await
    }

    /// Connects with a custom response timeout: use one longer than `BLOCK` for a connection
    /// that runs blocking `XREADGROUP`.
    pub async fn connect_with_timeout(url: &str, response_timeout: Duration) -> Result<Self> {
        let client = redis::Client::open(url)?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(2)))
            .set_response_timeout(Some(response_timeout))
            .set_number_of_retries(3)
            .set_max_delay(Duration::from_secs(2));
        let conn = client.get_connection_manager_with_config(cfg).await?;
        Ok(Self { conn })
    }

    /// A handle on the shared connection for one command (cheap: the manager is shared).
    fn c(&self) -> ConnectionManager {
        self.conn.clone()
    }

    pub async fn ping(&self) -> Result<()> {
        let _: String = redis::cmd("PING").query_async(&mut self.c()).await?;
        Ok(())
    }

    /// A development secret shared by every process using this Redis: the first process to
    /// ask stores `generated`; everyone gets the stored value.
    pub async fn shared_dev_secret(&self, which: DevSecret, generated: String) -> Result<String> {
        let key = match which {
            DevSecret::JwtKey => keys::DEV_JWT_KEY,
            DevSecret::TicketKey => keys::DEV_TICKET_KEY,
        };
        let mut c = self.c();
        let _: Value = redis::cmd("SET")
            .arg(key)
            .arg(&generated)
            .arg("NX")
            .query_async(&mut c)
            .await?;
        let stored: Option<String> = redis::cmd("GET").arg(key).query_async(&mut c).await?;
        stored.ok_or_else(|| protocol(format!("{key} vanished right after SET NX")))
    }
}
