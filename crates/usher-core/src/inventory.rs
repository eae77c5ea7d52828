//! Admission that knows the inventory: what the booking service says is left, what the line
//! is told about it, and the limits of a report.
//!
//! The booking service reports what is left (`PUT /api/queues/{q}/inventory`). The store keeps
//! the report, and counts the sessions consumed since it (each counts as a sold basket). The
//! admission scripts (`lua/prelude.lua` `inventory_slots`) admit only while
//!
//! ```text
//! remaining − consumed_since_report × basket_size − active × basket_size > 0
//! ```
//!
//! and each admission takes `basket_size` more. A queue without a report admits as before.
//!
//! Each tick's `state` carries an [`InventoryState`]; gateways turn it into each browser's
//! [`InventoryOutlook`] from its position ([`InventoryState::outlook`]), so nobody waits an
//! hour for nothing.

use serde::{Deserialize, Serialize};

/// The largest `remaining` a report may state: far above any venue, far below the 2^53 a
/// Lua number holds exactly.
pub const MAX_REMAINING: u64 = 1_000_000_000;
/// The largest `basket_size`: the most items one admitted buyer may take.
pub const MAX_BASKET_SIZE: u64 = 1_000;
/// Default `sold_out_grace_seconds`: how long a queue whose inventory is gone waits with no
/// active session before it closes with `sold_out` (carts abandoned meanwhile can return
/// items, and a report above 0 resumes admission).
pub const DEFAULT_SOLD_OUT_GRACE_SECONDS: u64 = 120;
/// Default `inventory_stale_after_seconds`: a report older than this tells browsers
/// `unknown` (admission still follows it: without a newer word, it is the best there is).
pub const DEFAULT_STALE_AFTER_SECONDS: u64 = 300;
/// The longest `sold_out_grace_seconds` and `inventory_stale_after_seconds` (one day).
pub const MAX_INVENTORY_SECONDS: u64 = 86_400;

/// A queue's inventory as a tick saw it, sent to gateways in `state` (and at once after a
/// report, in an `inventory` stream message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InventoryState {
    /// What is left to sell: the last report less a basket for each session consumed since
    /// (never below 0).
    pub remaining: u64,
    /// Items the active sessions may still take: active sessions × `basket_size`.
    pub held: u64,
    /// Items one admission may take.
    pub basket_size: u64,
    /// The report is older than `inventory_stale_after_seconds`.
    pub stale: bool,
}

/// Whether a waiting place is likely to get an item. A closed set, so the page can word each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Chance {
    /// Enough is left for every place ahead and this one, even if every active session buys
    /// a full basket.
    Likely,
    /// Not enough is left for this place even if every active session leaves empty-handed:
    /// only items coming back (abandoned carts, a new report) can reach it.
    Unlikely,
    /// It depends on what the active sessions buy, or the report is stale.
    Unknown,
}

/// What a waiting browser is told of the inventory, in its `waiting` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InventoryOutlook {
    /// Items left to sell (the last report less what was consumed since).
    pub remaining: u64,
    /// Whether this place is likely to get one.
    pub chance: Chance,
}

impl InventoryState {
    /// Whether the report lets the queue admit anyone now: something is left beyond the
    /// baskets the active sessions hold (`tick.lua`/`join.lua` apply the same rule through
    /// prelude.lua's `inventory_slots`).
    pub fn admits(&self) -> bool {
        self.remaining > self.held
    }

    /// What the browser at `position` (1 = next) is told. The admission rule admits while
    /// anything is left beyond the active sessions' baskets, so the place at `position` is
    /// admitted once the `position − 1` places ahead have taken a basket each: it is
    /// `likely` while those baskets fit in what the active sessions leave, `unlikely` when
    /// they do not fit even in everything left, and `unknown` in between or when stale.
    pub fn outlook(&self, position: u64) -> InventoryOutlook {
        let ahead = position.saturating_sub(1).saturating_mul(self.basket_size);
        let chance = if self.stale {
            Chance::Unknown
        } else if ahead < self.remaining.saturating_sub(self.held) {
            Chance::Likely
        } else if ahead >= self.remaining {
            Chance::Unlikely
        } else {
            Chance::Unknown
        };
        InventoryOutlook {
            remaining: self.remaining,
            chance,
        }
    }
}

/// Why a report or an inventory setting is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadInventory {
    #[error("remaining must be an integer between 0 and {MAX_REMAINING}")]
    Remaining,
    #[error("basket_size must be between 1 and {MAX_BASKET_SIZE}")]
    BasketSize,
    #[error("{0} must be between 1 and {MAX_INVENTORY_SECONDS}")]
    Seconds(&'static str),
}

/// Checks a reported `remaining`.
pub fn check_remaining(remaining: u64) -> Result<(), BadInventory> {
    if remaining > MAX_REMAINING {
        return Err(BadInventory::Remaining);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(remaining: u64, held: u64, basket_size: u64) -> InventoryState {
        InventoryState {
            remaining,
            held,
            basket_size,
            stale: false,
        }
    }

    #[test]
    fn a_place_is_likely_while_the_baskets_ahead_fit_beside_the_active_ones() {
        // 10 left, 4 held by active sessions, baskets of 2: places 1..=3 fit in the 6 free.
        let s = state(10, 4, 2);
        let chances: Vec<Chance> = (1..=7).map(|p| s.outlook(p).chance).collect();
        use Chance::*;
        assert_eq!(
            chances,
            [Likely, Likely, Likely, Unknown, Unknown, Unlikely, Unlikely]
        );
        assert_eq!(s.outlook(1).remaining, 10);
    }

    #[test]
    fn nothing_left_is_unlikely_for_everyone_and_a_stale_report_says_unknown() {
        assert_eq!(state(0, 0, 1).outlook(1).chance, Chance::Unlikely);
        let stale = InventoryState {
            stale: true,
            ..state(100, 0, 1)
        };
        assert_eq!(stale.outlook(1).chance, Chance::Unknown);
    }

    #[test]
    fn huge_numbers_are_refused() {
        assert!(check_remaining(MAX_REMAINING).is_ok());
        assert_eq!(
            check_remaining(MAX_REMAINING + 1),
            Err(BadInventory::Remaining)
        );
    }
}
