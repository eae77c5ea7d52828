//! All Redis access. This module (with [`crate::keys`] and `src/lua/`) is the only code that
//! knows key names and scripts; the binaries call these typed operations.
//!
//! The operations are split by who calls them:
//! * `admin` — queue settings and counters (the dispatcher's admin API);
//! * `gateways` — the gateway registry and gateways' interest in queues;
//! * `streams` — the per-gateway streams the dispatcher writes and each gateway reads;
//! * `joins` — browsers taking places in line, a gateway's batch in one call (the gateways);
//! * `places` — a browser's place: resume, status, leave (the gateways);
//! * `away` — a dropped connection's place kept for the grace period, and back (the gateways);
//! * `binding` — the browser key a place joined with, and spent proofs of possession (the
//!   gateways; the dispatcher reads the keys to mint `cnf.jkt`);
//! * `queue_meta` — a queue's page and proof-of-work settings (the admin API writes the page's,
//!   gateways read both);
//! * `sessions` — an admitted place's session: status, touch, release (the dispatcher's
//!   session API for booking services);
//! * `draw` — a scheduled sale: its schedule, entrant hashes, the draw and its record;
//! * `draw_restore` — a scheduled sale's pre-queue put back after a data loss, its published
//!   commitment kept or its draw recorded void;
//! * `policy` — backends' load reports, a queue's adaptive setting, passthrough wake signals;
//! * `readiness` — what the readiness report reads: Redis' persistence, memory and clock
//!   (`INFO`, `TIME`), live replicas, a shared development key, the gateways' own facts;
//! * `dispatch` — leases and replicas; `dispatch::tick`, `dispatch::outbox` and
//!   `dispatch::records` (the dispatcher).
//!
//! Underneath, `connection` reaches Redis (standalone, cluster or sentinel; TLS; ACL user),
//! `reply` names every status a script returns (the Lua reads the same list), `scripts` loads
//! the Lua, `decode` turns raw replies into values, and `timed` measures every call. The
//! modules are
//! private: every type and constant is reached as `usher_core::store::X`, re-exported here.

use std::time::Duration;

use redis::Value;

use crate::keys;

mod admin;
mod audit;
mod away;
mod binding;
mod connection;
mod decode;
mod dispatch;
// >>> door
mod door;
// <<< door
mod draw;
mod draw_restore;
mod draw_run;
mod gateway_load;
mod gateways;
mod inventory;
mod invitations;
mod invocation;
mod joins;
mod lanes;
mod oom;
mod places;
mod policy;
mod queue_meta;
mod readiness;
mod record;
mod recovery;
mod reply;
mod script_text;
mod scripts;
mod sentinel;
mod sessions;
mod streams;
mod timed;
mod usage;

pub use admin::{QueueConfig, QueueStats, VersionedWrite, EPOCH_IDS_PER_MS};
pub use audit::{AuditRecord, AUDIT_MAXLEN};
pub use binding::{Asker, TicketKey, PRUNE_BOUND_COUNT};
pub use connection::{RedisArgs, RedisMode};
pub use dispatch::outbox::{OutboxEntry, OutboxList};
pub use dispatch::records::TokenRecord;
pub use dispatch::tick::{TickArgs, ADMIT_PER_CALL, MAX_ADMIT_PER_TICK};
pub use dispatch::tick_outcome::{LaneOutcome, Tick, TickOutcome};
pub use dispatch::Lease;
// >>> door
pub use door::DoorRecord;
// <<< door
pub use draw::{Beacon, BeaconChange, BeaconOutcome, DrawPhase, Schedule, VoidedDraw};
pub use draw_restore::{PreQueueFate, PreRestore, SeenDraw};
pub use draw_run::{DrawOutcome, DrawPrep, DrawStep, DueDraw, DRAW_STEP};
pub use gateway_load::GatewayConnections;
pub use gateways::{GatewayInfo, Interest, GWS_TTL_MS};
pub use inventory::InventoryReport;
pub use invitations::{AccountPlace, InvitationSetting, ACCOUNT_TTL_SECS};
pub use joins::{JoinBatch, Joined, JOIN_BATCH_MAX};
pub use lanes::{LaneCount, LanesWrite};
pub use oom::OomLog;
pub use places::{LeaveOutcome, PlaceState};
pub use policy::{RatePolicy, Wakes};
pub use queue_meta::{ChallengeSetting, QueuePage};
pub use readiness::{DispatcherFacts, GatewayFacts, RedisFacts, MEMORY_PER_PLACE_BYTES};
pub use record::REPORT_SLICE;
pub use recovery::{Restore, RESTORE_BATCH};
pub use reply::PowVerdict;
pub use sessions::{SessionEnd, SessionState};
pub use streams::{StreamEntry, StreamLag, STREAM_MAXLEN};
pub use timed::{describe_redis_metrics, REDIS_COMMAND_DURATION, REDIS_COMMAND_ERRORS};
pub use usage::RedisUsage;

/// Why a store operation failed. The messages do not say "redis" themselves: the callers'
/// errors name the component that failed, so a message reads the word once.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The connection or the command failed (Redis' own message). The prefix is said here
    /// once; the crates that wrap a `StoreError` pass it through unchanged.
    #[error("redis: {0}")]
    Redis(redis::RedisError),
    /// Redis refused a write because it reached `maxmemory` (policy `noeviction`): the
    /// request can succeed once memory is freed (a queue closed, sessions expired), not by
    /// retrying at once. Told apart so callers answer and log it as what it is.
    #[error("redis is out of memory (maxmemory reached): {0}")]
    OutOfMemory(redis::RedisError),
    /// Redis answered something the scripts never return (a bug, or a foreign writer).
    #[error("unexpected reply from redis: {0}")]
    Protocol(String),
    /// A join named a lane the queue does not have (crate::lanes): no place was taken.
    #[error("the queue has no lane {0:?}")]
    NoSuchLane(String),
}

impl From<redis::RedisError> for StoreError {
    fn from(e: redis::RedisError) -> Self {
        if oom::is_oom(&e) {
            Self::OutOfMemory(e)
        } else {
            Self::Redis(e)
        }
    }
}

impl StoreError {
    /// Whether Redis refused the request for lack of memory.
    pub fn is_out_of_memory(&self) -> bool {
        matches!(self, Self::OutOfMemory(_))
    }

    // >>> door
    /// Whether Redis could not be reached at all (no connection, a dropped one, no answer in
    /// time), as opposed to an answer that refused the command: what the open door counts as
    /// an outage (`crate::door`).
    pub fn is_unreachable(&self) -> bool {
        match self {
            Self::Redis(e) => {
                e.is_io_error()
                    || e.is_timeout()
                    || e.is_connection_refusal()
                    || e.is_connection_dropped()
            }
            Self::OutOfMemory(_) | Self::Protocol(_) | Self::NoSuchLane(_) => false,
        }
    }
    // <<< door
}

pub type Result<T> = std::result::Result<T, StoreError>;

fn protocol(what: impl Into<String>) -> StoreError {
    StoreError::Protocol(what.into())
}

/// The connection to Redis, shared by all tasks of a process. Reconnects by itself.
#[derive(Clone)]
pub struct Store {
    conn: connection::RedisConn,
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
    /// The dispatcher's admin token with `USHER_DEV=1` and no `USHER_ADMIN_TOKEN`.
    AdminToken,
    /// The gateways' puzzle secret without `USHER_CHALLENGE_SECRET` (not only for development:
    /// any secret all gateways share will do).
    ChallengeSecret,
}

impl Store {
    /// How long an ordinary command may take to be answered.
    const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

    /// Connects to a standalone Redis at `url` for ordinary commands (each answered within
    /// five seconds).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::open(&RedisArgs::standalone(url)).await
    }

    /// Connects as `args` say (standalone or cluster, TLS, ACL user) for ordinary commands.
    pub async fn open(args: &RedisArgs) -> Result<Self> {
        Self::open_with_timeout(args, Self::RESPONSE_TIMEOUT).await
    }

    /// Connects with a custom response timeout: use one longer than `BLOCK` for a connection
    /// that runs blocking `XREADGROUP`. Such a connection must be its own (not shared with
    /// ordinary commands): a blocked read holds up every command queued behind it on the
    /// same socket, in cluster mode too.
    pub async fn open_with_timeout(args: &RedisArgs, response_timeout: Duration) -> Result<Self> {
        Ok(Self {
            conn: connection::RedisConn::open(args, response_timeout).await?,
        })
    }

    /// A handle on the shared connection for one command (cheap: the connection is shared),
    /// timed: every call's latency and failure is recorded ([`timed`]).
    fn c(&self) -> timed::Timed<connection::RedisConn> {
        timed::Timed(self.conn.clone())
    }

    pub async fn ping(&self) -> Result<()> {
        // In cluster mode PING goes to every master; any reply means all answered.
        let _: Value = redis::cmd("PING").query_async(&mut self.c()).await?;
        Ok(())
    }

    /// A development secret shared by every process using this Redis: the first process to
    /// ask stores `generated`; everyone gets the stored value.
    pub async fn shared_dev_secret(&self, which: DevSecret, generated: String) -> Result<String> {
        let key = match which {
            DevSecret::JwtKey => keys::DEV_JWT_KEY,
            DevSecret::TicketKey => keys::DEV_TICKET_KEY,
            DevSecret::AdminToken => keys::DEV_ADMIN_TOKEN,
            DevSecret::ChallengeSecret => keys::CHALLENGE_SECRET,
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
