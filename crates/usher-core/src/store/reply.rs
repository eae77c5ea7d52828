//! The statuses the Lua scripts return, named once for both languages.
//!
//! Every script whose reply can mean different things returns a status first. The values are
//! defined here only: [`lua_constants`] turns this list into Lua `local` definitions that are
//! prepended to the scripts that use them (see `scripts.rs`), and the scripts use the names
//! (`return {PLACE_GONE}`), never the numbers. A script naming a status that is not in this
//! list fails when it runs (Redis rejects reads of undefined globals), and a unit test checks
//! every upper-case name in the scripts against the list, so the two cannot drift apart.

/// Defines status enums with explicit values and the Lua name of each value.
macro_rules! statuses {
    ($(
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $lua:literal, )+
        }
    )+) => {
        $(
            $(#[$meta])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub enum $name {
                $( $(#[$vmeta])* $variant = $value, )+
            }

            impl $name {
                /// Every status, in definition order.
                pub const ALL: &'static [Self] = &[$(Self::$variant),+];

                /// The value the scripts return.
                pub fn code(self) -> i64 {
                    self as i64
                }

                /// The name the scripts use.
                pub fn lua_name(self) -> &'static str {
                    match self {
                        $(Self::$variant => $lua,)+
                    }
                }

                /// The status a script returned, or `None` for a value no script returns.
                pub fn from_code(code: i64) -> Option<Self> {
                    match code {
                        $($value => Some(Self::$variant),)+
                        _ => None,
                    }
                }
            }
        )+

        /// Every status as (Lua name, value).
        pub fn all() -> Vec<(&'static str, i64)> {
            let mut all = Vec::new();
            $( all.extend($name::ALL.iter().map(|s| (s.lua_name(), s.code()))); )+
            all
        }
    };
}

statuses! {
    /// Where a place stands: the first element of a `join`, `resume` or `status` reply.
    pub enum PlaceStatus {
        /// The queue is closed or unknown.
        QueueClosed = 0 => "PLACE_QUEUE_CLOSED",
        /// Waiting in line; position and line length follow.
        Waiting = 1 => "PLACE_WAITING",
        /// Admitted, the session valid; the token record follows.
        Admitted = 2 => "PLACE_ADMITTED",
        /// Admitted a moment ago; the token is being minted.
        AdmissionPending = 3 => "PLACE_ADMISSION_PENDING",
        /// The place no longer exists.
        Gone = 4 => "PLACE_GONE",
        /// The place was admitted and its session ended (released or expired).
        SessionEnded = 5 => "PLACE_SESSION_ENDED",
        /// In a scheduled sale's pre-queue, waiting for the draw; `opens_at_ms` follows.
        Scheduled = 6 => "PLACE_SCHEDULED",
        /// A proof-of-work queue refused every join of the call; the verdicts follow.
        Challenged = 7 => "PLACE_CHALLENGED",
        /// A scheduled sale's pre-queue holds `max_entrants` already: no place was taken;
        /// the cap follows.
        PreQueueFull = 8 => "PLACE_PRE_QUEUE_FULL",
        /// A binding queue's place that is not the requester's (its proof is by another key,
        /// by none, or the place has no key): nothing was done or told.
        WrongKey = 9 => "PLACE_WRONG_KEY",
        /// A join named a lane the queue does not have (crate::lanes): no place taken.
        NoSuchLane = 10 => "PLACE_NO_SUCH_LANE",
    }

    /// What `join.lua` made of one join's proof of work, in a proof-of-work queue.
    pub enum PowVerdict {
        /// Spent now: the join takes a place.
        Accepted = 0 => "POW_ACCEPTED",
        /// No solution.
        Missing = 1 => "POW_MISSING",
        /// The puzzle is easier than the queue asks now.
        Insufficient = 2 => "POW_INSUFFICIENT",
        /// The solution took a place already.
        Spent = 3 => "POW_SPENT",
    }

    /// Where an admitted place's session stands: the first element of a `session`,
    /// `touch_session` or `end_session` reply.
    pub enum SessionStatus {
        /// Ended (released or expired) before this call.
        Ended = 0 => "SESSION_ENDED",
        /// Active; its expiry (ms) follows.
        Active = 1 => "SESSION_ACTIVE",
        /// Active until this call, which released it.
        Released = 2 => "SESSION_RELEASED",
    }

    /// What a `leave` call removed.
    pub enum LeaveStatus {
        /// Nothing: the place was neither waiting nor admitted.
        NotFound = 0 => "LEAVE_NOT_FOUND",
        /// A waiting place; the index of the gateway that held it follows.
        Left = 1 => "LEAVE_LEFT",
        /// An admitted session.
        Released = 2 => "LEAVE_RELEASED",
        /// Nothing: a binding queue's place that is not the requester's.
        WrongKey = 3 => "LEAVE_WRONG_KEY",
    }

    /// What a `tick` call found.
    pub enum TickStatus {
        /// Another replica holds the queue's lease.
        LeaseLost = -1 => "TICK_LEASE_LOST",
        /// The queue is closed; the outbox length follows.
        Closed = 0 => "TICK_CLOSED",
        /// The queue ticked; the outcome follows as a JSON object.
        Ticked = 1 => "TICK_TICKED",
    }

    /// What a `draw_begin`, `draw_step` or `draw` call did.
    pub enum DrawStatus {
        /// Another replica holds the queue's lease: nothing was drawn.
        LeaseLost = -1 => "DRAW_LEASE_LOST",
        /// No draw is pending (already done, unscheduled, or the queue is closed).
        NotPending = 0 => "DRAW_NOT_PENDING",
        /// Places were put in the line (a step's, or the last ones and the draw is done): how
        /// many, and the first new place id, follow.
        Done = 1 => "DRAW_DONE",
        /// The record is not as long as the caller expects, or the schedule changed since it
        /// was read: nothing was done; read again.
        Stale = 2 => "DRAW_STALE",
        /// The draw's end placed some of what is left (or stamped some drawn places again)
        /// and needs another call; the next cursor, how many it placed and the first new
        /// place id follow.
        More = 3 => "DRAW_MORE",
    }

    /// What a `schedule` call did.
    pub enum ScheduleStatus {
        /// Refused: a draw is pending, so the sale cannot be unscheduled.
        DrawPending = 0 => "SCHEDULE_DRAW_PENDING",
        /// The schedule is as asked.
        Set = 1 => "SCHEDULE_SET",
    }

    /// What a `put_settings` call did (see `lua/put_settings.lua`).
    pub enum SettingsStatus {
        /// Refused: the settings' version is not the one the editor read (`If-Match`).
        Stale = 0 => "SETTINGS_STALE",
        /// Written; the new version follows.
        Written = 1 => "SETTINGS_WRITTEN",
    }

    /// What a `put_lanes` call did (see `lua/put_lanes.lua`).
    pub enum LanesStatus {
        Written = 0 => "LANES_WRITTEN",
        /// A lane removed or moved still has places; its name and count follow.
        NotEmpty = 1 => "LANES_NOT_EMPTY",
        /// A scheduled sale's draw is pending.
        Scheduled = 2 => "LANES_SCHEDULED",
        Unknown = 3 => "LANES_UNKNOWN",
    }

    /// What a `beacon` call did.
    pub enum BeaconStatus {
        /// No draw is pending: the beacon can no longer change.
        NotPending = 0 => "BEACON_NOT_PENDING",
        /// Done as asked.
        Set = 1 => "BEACON_SET",
        /// Randomness for a sale that names no round.
        NoRound = 2 => "BEACON_NO_ROUND",
        /// Other randomness is already recorded for the round.
        Conflict = 3 => "BEACON_CONFLICT",
    }

    /// What a gateway's `heartbeat_gateway` call found.
    pub enum HeartbeatStatus {
        /// The process owns its index; the entry is renewed.
        Kept = 1 => "HEARTBEAT_KEPT",
        /// Another process owns the index: this one must register again.
        NotOwner = 0 => "HEARTBEAT_NOT_OWNER",
    }

    /// What a `restore` call did.
    pub enum RestoreStatus {
        /// The queue is not configured: nothing to restore into (yet).
        Unknown = 0 => "RESTORE_UNKNOWN",
        /// The queue is closed; its close reason follows (or false).
        Closed = 1 => "RESTORE_CLOSED",
        /// The places were put back; the count and the queue's epoch follow.
        Done = 2 => "RESTORE_DONE",
    }

    /// What a `restore_pre` call did with a scheduled sale's pre-queue places after a data
    /// loss (see `lua/restore_pre.lua`).
    pub enum PreRestoreStatus {
        /// The queue is not configured: nothing to restore into (yet).
        Unknown = 0 => "PRE_RESTORE_UNKNOWN",
        /// The queue is closed; its close reason follows (or false).
        Closed = 1 => "PRE_RESTORE_CLOSED",
        /// Back in the pre-queue of the draw whose commitment was published before the loss.
        Kept = 2 => "PRE_RESTORE_KEPT",
        /// Back in the pre-queue of a draw with a new commitment: the earlier one is void.
        Redrawn = 3 => "PRE_RESTORE_REDRAWN",
        /// The new draw ran already: places it did not place went to the tail of the line.
        Drawn = 4 => "PRE_RESTORE_DRAWN",
        /// No draw is pending: the draw is void and the places are in line in join order.
        Void = 5 => "PRE_RESTORE_VOID",
    }

    /// What a ticket's place is bound to, for the gateway's proof check (see
    /// `lua/place_key.lua`).
    pub enum BoundStatus {
        /// A live place without a key (it joined before the queue bound).
        None = 0 => "BOUND_NONE",
        /// The place's key; its thumbprint follows.
        Key = 1 => "BOUND_KEY",
        /// The place is over for good: its key may be forgotten already.
        Over = 2 => "BOUND_OVER",
    }

    /// What a `trim_outbox` call did.
    pub enum TrimStatus {
        /// Another replica holds the queue's lease: nothing was trimmed.
        LeaseLost = -1 => "TRIM_LEASE_LOST",
        /// The entries were dropped.
        Trimmed = 1 => "TRIM_TRIMMED",
    }
}

/// The Lua definitions of every status (`local PLACE_WAITING = 1`, one a line); each script
/// gets those it uses (`script_text`).
pub fn lua_constants() -> String {
    all()
        .into_iter()
        .map(|(name, value)| format!("local {name} = {value}\n"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::scripts;

    #[test]
    fn codes_round_trip_and_names_are_unique() {
        for s in PlaceStatus::ALL {
            assert_eq!(PlaceStatus::from_code(s.code()), Some(*s));
        }
        for s in LeaveStatus::ALL {
            assert_eq!(LeaveStatus::from_code(s.code()), Some(*s));
        }
        for s in TickStatus::ALL {
            assert_eq!(TickStatus::from_code(s.code()), Some(*s));
        }
        for s in TrimStatus::ALL {
            assert_eq!(TrimStatus::from_code(s.code()), Some(*s));
        }
        for s in DrawStatus::ALL {
            assert_eq!(DrawStatus::from_code(s.code()), Some(*s));
        }
        for s in ScheduleStatus::ALL {
            assert_eq!(ScheduleStatus::from_code(s.code()), Some(*s));
        }
        for s in BeaconStatus::ALL {
            assert_eq!(BeaconStatus::from_code(s.code()), Some(*s));
        }
        for s in SessionStatus::ALL {
            assert_eq!(SessionStatus::from_code(s.code()), Some(*s));
        }
        for s in PreRestoreStatus::ALL {
            assert_eq!(PreRestoreStatus::from_code(s.code()), Some(*s));
        }
        let mut names: Vec<&str> = all().into_iter().map(|(n, _)| n).collect();
        let len = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), len, "a Lua status name is defined twice");
    }

    /// Every upper-case name a script uses (outside strings and comments) is a status defined
    /// here or one of Redis' own globals; and every status is used by some script.
    #[test]
    fn the_scripts_use_exactly_the_statuses_defined_here() {
        let defined: Vec<&str> = all().into_iter().map(|(n, _)| n).collect();
        let mut used = Vec::new();
        for (file, source) in scripts::SOURCES {
            for name in upper_case_names(source) {
                if name == "KEYS" || name == "ARGV" {
                    continue;
                }
                assert!(
                    defined.contains(&name.as_str()),
                    "{file} uses {name}, which reply.rs does not define"
                );
                used.push(name);
            }
        }
        for name in defined {
            assert!(used.iter().any(|u| u == name), "no script returns {name}");
        }
    }

    /// The upper-case identifiers in Lua source, skipping comments and string literals.
    fn upper_case_names(source: &str) -> Vec<String> {
        let mut names = Vec::new();
        for line in source.lines() {
            let mut chars = line.chars().peekable();
            let mut word = String::new();
            let mut quote: Option<char> = None;
            while let Some(c) = chars.next() {
                if let Some(q) = quote {
                    if c == '\\' {
                        chars.next();
                    } else if c == q {
                        quote = None;
                    }
                    continue;
                }
                if c == '-' && chars.peek() == Some(&'-') {
                    break;
                }
                if c.is_ascii_alphanumeric() || c == '_' {
                    word.push(c);
                    continue;
                }
                take_upper(&mut word, &mut names);
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
            }
            take_upper(&mut word, &mut names);
        }
        names
    }

    fn take_upper(word: &mut String, names: &mut Vec<String>) {
        let w = std::mem::take(word);
        if w.starts_with(|c: char| c.is_ascii_uppercase())
            && w.chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            names.push(w);
        }
    }
}
