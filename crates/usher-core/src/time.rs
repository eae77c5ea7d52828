//! Wall-clock helpers. Admission timestamps are milliseconds since the Unix epoch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::format_description::well_known::Rfc3339;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use time::OffsetDateTime;

/// RFC 3339 in UTC with exactly three fraction digits. Fixed width, so these strings sort as
/// the times they name: the `time` crate's own RFC 3339 output drops trailing zeros, and
/// `…:12Z` (12.000 s) would sort after `…:12.1Z`.
const RFC3339_MS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    since_epoch().as_millis() as u64
}

/// The wall clock's time since the Unix epoch (zero for a clock set before it).
fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
}

/// Where the admission path takes the time from: the wall clock in the running binaries, a
/// [`VirtualClock`] in a rehearsal (`usher-rehearse`), where a day of a sale runs in minutes.
/// Code that decides by the time (the dispatcher's tick, rate and pre-mint; the store calls
/// that take `now_ms`) asks its clock, never [`now_ms`] directly, so both run the same code.
pub trait Clock: std::fmt::Debug + Send + Sync {
    /// Milliseconds since the Unix epoch, as this clock has it.
    fn now_ms(&self) -> u64;

    /// How long to really wait for this clock to reach `at_ms`. The wall clock waits the
    /// difference; a virtual clock never waits, because whoever drives it moves it forward.
    fn wait_for(&self, at_ms: u64) -> Duration {
        Duration::from_millis(at_ms.saturating_sub(self.now_ms()))
    }
}

/// A clock shared by the tasks that read it.
pub type SharedClock = Arc<dyn Clock>;

/// The real time: [`now_ms`].
#[derive(Debug, Clone, Copy, Default)]
pub struct WallClock;

impl Clock for WallClock {
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    /// To the microsecond: `now_ms` truncates, and a wait computed from it would end up to a
    /// millisecond early or late, which is what an admission released "at" its time must not.
    fn wait_for(&self, at_ms: u64) -> Duration {
        Duration::from_millis(at_ms).saturating_sub(since_epoch())
    }
}

/// The wall clock, shared: what every binary runs with.
pub fn wall_clock() -> SharedClock {
    Arc::new(WallClock)
}

/// A clock that moves only when told to ([`VirtualClock::set_ms`]), and never backwards:
/// a rehearsal's time, or a test's.
#[derive(Debug, Default)]
pub struct VirtualClock {
    ms: AtomicU64,
}

impl VirtualClock {
    /// A clock that reads `start_ms` until it is moved.
    pub fn starting_at(start_ms: u64) -> Arc<Self> {
        Arc::new(Self {
            ms: AtomicU64::new(start_ms),
        })
    }

    /// Moves the clock to `ms` (a time before the current one leaves it where it is).
    pub fn set_ms(&self, ms: u64) {
        self.ms.fetch_max(ms, Ordering::SeqCst);
    }
}

impl Clock for VirtualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }

    fn wait_for(&self, _at_ms: u64) -> Duration {
        Duration::ZERO
    }
}

/// RFC 3339 (UTC, always three fraction digits) for a millisecond timestamp.
pub fn rfc3339_ms(ms: u64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos)
        .ok()
        .and_then(|t| t.format(RFC3339_MS).ok())
        .unwrap_or_else(|| "1970-01-01T00:00:00.000Z".to_owned())
}

/// Milliseconds since the epoch of an RFC 3339 time (any offset); `None` for anything else,
/// or a time before 1970.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn parses_rfc3339() {
        assert_eq!(
            super::parse_rfc3339_ms("2023-11-14T22:13:20.123Z"),
            Some(1_700_000_000_123)
        );
        assert_eq!(
            super::parse_rfc3339_ms("2023-11-14T23:13:20.123+01:00"),
            Some(1_700_000_000_123)
        );
        assert_eq!(super::parse_rfc3339_ms("tomorrow"), None);
        assert_eq!(super::parse_rfc3339_ms("2023-11-14 22:13:20"), None);
        assert_eq!(super::parse_rfc3339_ms("1969-12-31T23:59:59Z"), None);
    }

    #[test]
    fn a_virtual_clock_moves_only_forward_and_never_waits() {
        use super::Clock;
        let clock = super::VirtualClock::starting_at(1_000);
        assert_eq!(clock.now_ms(), 1_000);
        clock.set_ms(61_000);
        clock.set_ms(5_000);
        assert_eq!(clock.now_ms(), 61_000, "a virtual clock never goes back");
        assert_eq!(clock.wait_for(120_000), std::time::Duration::ZERO);
        // The wall clock waits for a time ahead, and not for one passed.
        let wall = super::WallClock;
        assert!(wall.wait_for(wall.now_ms() + 60_000) > std::time::Duration::from_secs(50));
        assert_eq!(wall.wait_for(0), std::time::Duration::ZERO);
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(
            super::rfc3339_ms(1_700_000_000_123),
            "2023-11-14T22:13:20.123Z"
        );
        // Whole seconds keep their digits, so the strings sort as the times do.
        let whole = super::rfc3339_ms(1_700_000_000_000);
        let later = super::rfc3339_ms(1_700_000_000_100);
        assert_eq!(whole, "2023-11-14T22:13:20.000Z");
        assert_eq!(later, "2023-11-14T22:13:20.100Z");
        assert!(whole < later);
        assert_eq!(super::parse_rfc3339_ms(&whole), Some(1_700_000_000_000));
    }
}
