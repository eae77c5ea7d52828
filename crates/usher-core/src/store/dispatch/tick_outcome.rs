//! What a tick call found ([`Tick`]): the lease lost, the queue closed, or what it admitted
//! and the line as it left it ([`TickOutcome`], per lane [`LaneOutcome`]).

use crate::lanes::LaneName;

use super::outbox::OutboxEntry;

/// What a tick found.
// One is returned per tick script call and never stored in bulk: boxing the outcome would
// cost an allocation per call for nothing (it outgrew clippy's size limit with `lanes` and `inventory`).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Tick {
    /// Another replica holds the queue's lease now: stop driving it.
    LeaseLost,
    /// The queue is closed; its outbox may still hold admissions to deliver.
    Closed {
        outbox_len: u64,
    },
    Ticked(TickOutcome),
}

/// What one tick call did, and the queue as it left it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TickOutcome {
    pub admitted: u64,
    pub waiting: u64,
    pub active: u64,
    /// The snapshot of the line (see `lua/tick.lua`); empty when [`TickOutcome::more`] is set:
    /// the tick's last call takes it.
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
    /// The last place id handed out when the snapshot was taken (0 when there is none): see
    /// [`crate::messages::QueueState::last_place`].
    pub last_place: u64,
    /// Indexes of gateways holding browsers of this queue.
    pub gateways: Vec<u16>,
    pub outbox_len: u64,
    pub admit_per_second: f64,
    /// Places removed without admission this tick (grace expired, gateway gone).
    pub dropped: u64,
    /// Sessions this call ended because the booking service never checked them within
    /// `arrival_seconds` (no-shows).
    pub no_shows: u64,
    /// The token bucket's level after this call: the admission budget carried to the next
    /// tick (a fraction of a place while people wait; up to one tick's worth while nobody
    /// does and passthrough is on).
    pub carry: f64,
    /// The queue's session TTL.
    pub session_ttl_ms: u64,
    /// From admission to its token's `exp`: `max_session_seconds` for a sliding session, the
    /// TTL otherwise.
    pub token_ttl_ms: u64,
    /// Admission is paused.
    pub paused: bool,
    /// What this tick admitted (the last `fresh_entries` entries of the outbox), for
    /// delivery without reading the outbox back.
    pub fresh: Vec<OutboxEntry>,
    pub fresh_entries: u64,
    /// This call admitted [`ADMIT_PER_CALL`](crate::store::ADMIT_PER_CALL) places and the tick's
    /// budget is not spent: call [`Store::tick`](crate::store::Store::tick) again with the same arguments (the same admission time) to admit more.
    pub more: bool,
    /// The queue's inventory as the booking service last reported it (`None`: no report).
    pub inventory: Option<crate::inventory::InventoryState>,
    /// Nothing is left and no session has been active for `sold_out_grace_seconds`: the
    /// dispatcher closes the queue with `sold_out` (`Store::close_sold_out`).
    pub sold_out: bool,
    /// Each lane's line and admissions, and its snapshot on the tick's last call
    /// (crate::lanes; empty without lanes). `waiting` above counts every lane; `runs` and
    /// `samples` are the default lane's.
    pub lanes: Vec<LaneOutcome>,
}

/// One lane as a tick left it (see [`TickOutcome::lanes`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LaneOutcome {
    pub name: LaneName,
    /// Joins that name no lane go here (its snapshot is also the outcome's `runs`/`samples`).
    pub default: bool,
    pub share: u8,
    /// In line in this lane (present and away).
    pub waiting: u64,
    /// Present (not away): the lane could be admitted from now.
    pub present: u64,
    /// Admitted from this lane by this call.
    pub admitted: u64,
    pub runs: Vec<(u64, u64)>,
    pub samples: Vec<(u64, u64)>,
}
