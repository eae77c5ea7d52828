//! Wall-clock helpers. Admission timestamps are milliseconds since the Unix epoch.

use std::time::{SystemTime, UNIX_EPOCH};

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
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
