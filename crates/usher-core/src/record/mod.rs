//! The fairness report's record: what a queue with `"record": true` keeps of each place, so
//! that after the sale [`report`] can show the line was fair (docs/fairness-report.md).
//!
//! * this file — one place's entry as `lua/record.lua` writes it ([`Entry`], [`RECORD_WIDTH`]
//!   bytes, fixed width so a script writes a field with one `SETRANGE`), and the hashed client
//!   network a join brings ([`NetworkHash`]);
//! * `stats` — the statistics the report is made of (inversions, Kendall's tau, percentiles),
//!   each a pure function tested on hand-made data;
//! * `report` — [`report::FairnessReport`], what each part holds, and its CSV form;
//! * `builder` — [`builder::ReportBuilder`], which makes one from the entries in one pass of
//!   bounded memory (a few integers per admitted place).
//!
//! Only `usher-core` knows the record's key and layout: the store reads it
//! ([`crate::store::Store::fairness_report`]), the scripts write it.

pub mod builder;
pub mod report;
pub mod stats;

use std::net::IpAddr;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::ids::QueueId;

/// Bytes of one place's entry (`lua/record.lua` says what each byte holds).
pub const RECORD_WIDTH: usize = 36;

/// How long a record is kept after its queue closes when nothing else is set (7 days).
pub const DEFAULT_RETENTION_SECONDS: u64 = 7 * 86_400;
/// The accepted retention, in seconds: one hour to 90 days (a record is personal data,
/// however hashed: docs/security.md).
pub const RETENTION_SECONDS: std::ops::RangeInclusive<u64> = 3_600..=90 * 86_400;

/// How a place came into the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Joined the line.
    Joined,
    /// Joined a scheduled sale's pre-queue (not in line yet).
    PreQueue,
    /// A pre-queue place the draw put in line: its entry in line ([`Kind::Drawn`]) counts.
    Superseded,
    /// Put in line by the draw; its arrival is its pre-queue join ([`Entry::origin`]).
    Drawn,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Kind::Joined,
            2 => Kind::PreQueue,
            3 => Kind::Superseded,
            4 => Kind::Drawn,
            _ => return None,
        })
    }
}

/// Why a place left the line without admission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LeaveReason {
    /// Its browser left (`DELETE`, or the page's leave).
    Left,
    /// Its browser stayed away past the grace period.
    AwayExpired,
    /// Its gateway died and the browser did not resume elsewhere.
    GatewayGone,
    /// A binding queue's place without its browser key.
    Unbound,
    /// Let through a gateway's open door (`on_outage: "open"`, `lua/door.lua`): admitted
    /// outside the line, so never given an admission ordinal.
    Door,
}

impl LeaveReason {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => LeaveReason::Left,
            2 => LeaveReason::AwayExpired,
            3 => LeaveReason::GatewayGone,
            4 => LeaveReason::Unbound,
            5 => LeaveReason::Door,
            _ => return None,
        })
    }

    /// Its name in the report.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaveReason::Left => "left",
            LeaveReason::AwayExpired => "away_expired",
            LeaveReason::GatewayGone => "gateway_gone",
            LeaveReason::Unbound => "unbound",
            LeaveReason::Door => "door",
        }
    }
}

/// How an admitted place's session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The booking service consumed it (a sale).
    Booked,
    /// Released by the booking service or the browser.
    Released,
    /// Its TTL ran out.
    Expired,
    /// It never arrived at the booking service in time (`arrival_seconds`).
    NoShow,
}

impl Outcome {
    fn from_byte(b: u8) -> Option<Self> {
        Some(match b {
            1 => Outcome::Booked,
            2 => Outcome::Released,
            3 => Outcome::Expired,
            4 => Outcome::NoShow,
            _ => return None,
        })
    }
}

/// One place's entry. Times are ms since the record's origin (its first place's join).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its index in the record: the place id less the record's origin, less 1.
    pub index: u32,
    pub kind: Kind,
    /// Its lane's slot (0: the default lane).
    pub lane: u8,
    pub left: Option<LeaveReason>,
    pub outcome: Option<Outcome>,
    /// Its browser went away at least once while it waited.
    pub went_away: bool,
    /// The proof-of-work difficulty its join solved (0: none).
    pub pow_difficulty: u8,
    /// The ETA shown at join, in seconds (`None`: none was shown).
    pub eta_seconds: Option<u16>,
    pub joined_ms: u32,
    pub admitted_ms: Option<u32>,
    /// Its rank among the queue's admissions (1 = first).
    pub admission: Option<u32>,
    pub left_ms: Option<u32>,
    /// Its client network, hashed ([`NetworkHash`]); `None` when the join brought none.
    pub network: Option<u32>,
    /// A drawn place's pre-queue entry index: its arrival.
    pub origin: u32,
    /// Its proof of work's issue-to-join time: from the puzzle's issue to this join, in ms
    /// (100 ms resolution).
    pub issue_to_join_ms: Option<u32>,
    /// Admitted in the join itself (passthrough).
    pub passthrough: bool,
}

impl Entry {
    /// Decodes entry `index` from its bytes; `None` for a slot nothing was written to (a
    /// place taken before recording began, or a gap).
    pub fn decode(index: u32, b: &[u8]) -> Option<Entry> {
        if b.len() < RECORD_WIDTH {
            return None;
        }
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let plus_one = |v: u32| v.checked_sub(1);
        Some(Entry {
            index,
            kind: Kind::from_byte(b[0])?,
            lane: b[1],
            left: LeaveReason::from_byte(b[2]),
            outcome: Outcome::from_byte(b[3]),
            went_away: b[4] != 0,
            pow_difficulty: b[5],
            eta_seconds: Some(u16_at(6)).filter(|&e| e != u16::MAX),
            joined_ms: u32_at(8),
            admitted_ms: plus_one(u32_at(12)),
            admission: Some(u32_at(16)).filter(|&o| o > 0),
            left_ms: plus_one(u32_at(20)),
            network: Some(u32_at(24)).filter(|&n| n != 0),
            origin: u32_at(28),
            issue_to_join_ms: Some(u16_at(32))
                .filter(|&s| s != u16::MAX)
                .map(|s| u32::from(s) * 100),
            passthrough: b[34] != 0,
        })
    }

    /// Its place in arrival order: a drawn place arrived when it joined the pre-queue.
    pub fn arrival(&self) -> u32 {
        if self.kind == Kind::Drawn {
            self.origin
        } else {
            self.index
        }
    }

    /// Whether it counts as a place of the line (a pre-queue entry the draw superseded, or
    /// one the draw never placed, does not).
    pub fn in_line(&self) -> bool {
        matches!(self.kind, Kind::Joined | Kind::Drawn)
    }
}

/// A client network (IPv4 /24, IPv6 /48), hashed with a key the gateways share and Redis
/// never holds (their ticket key), per queue: 2^24 IPv4 networks are few enough to try every
/// one against an unkeyed hash, so without the key a record names no network; and one
/// network's hashes in two queues differ. 32 bits: two of 10,000 networks share a hash with
/// a chance of about 1 in 100 (docs/security.md, "The fairness record").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NetworkHash(pub u32);

impl NetworkHash {
    /// The hash of `ip`'s network in queue `q` under `key`.
    pub fn of(key: &[u8], q: &QueueId, ip: IpAddr) -> Self {
        let mut net = [0u8; 7];
        match ip.to_canonical() {
            IpAddr::V4(v4) => {
                net[0] = 4;
                net[1..4].copy_from_slice(&v4.octets()[..3]);
            }
            IpAddr::V6(v6) => {
                net[0] = 6;
                net[1..7].copy_from_slice(&v6.octets()[..6]);
            }
        }
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key)
            .unwrap_or_else(|_| <Hmac<Sha256> as Mac>::new_from_slice(&[0]).expect("any key"));
        mac.update(b"usher network v1\0");
        mac.update(q.as_str().as_bytes());
        mac.update(b"\0");
        mac.update(&net);
        let out = mac.finalize().into_bytes();
        // 0 means "no network" in the record.
        NetworkHash(u32::from_be_bytes([out[0], out[1], out[2], out[3]]).max(1))
    }
}

/// What a join brings for the record (`lua/join.lua` ARGV[8]): its client network, hashed,
/// and its proof of work's issue-to-join time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JoinNote {
    pub network: Option<NetworkHash>,
    /// From the puzzle's issue to this join, in ms (the solve time and whatever came
    /// before the join: the record's `issue_to_join`).
    pub issue_to_join_ms: Option<u64>,
}

impl JoinNote {
    /// As the join script reads it: `<network>:<solve ms>`, either part empty when unknown.
    pub fn wire(&self) -> String {
        format!(
            "{}:{}",
            self.network.map(|n| n.0.to_string()).unwrap_or_default(),
            self.issue_to_join_ms
                .map(|s| s.to_string())
                .unwrap_or_default()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_group_by_24_and_48_and_differ_by_queue() {
        let q = QueueId::new("q").expect("valid");
        let r = QueueId::new("r").expect("valid");
        let h = |q: &QueueId, ip: &str| NetworkHash::of(b"key", q, ip.parse().expect("ip"));
        assert_eq!(h(&q, "192.0.2.1"), h(&q, "192.0.2.254"));
        assert_eq!(h(&q, "192.0.2.1"), h(&q, "::ffff:192.0.2.9"));
        assert_ne!(h(&q, "192.0.2.1"), h(&q, "192.0.3.1"));
        assert_ne!(h(&q, "192.0.2.1"), h(&r, "192.0.2.1"));
        assert_eq!(h(&q, "2001:db8:1::1"), h(&q, "2001:db8:1:ffff::2"));
        assert_ne!(h(&q, "2001:db8:1::1"), h(&q, "2001:db8:2::1"));
        assert_ne!(
            NetworkHash::of(b"key", &q, "192.0.2.1".parse().expect("ip")),
            NetworkHash::of(b"other", &q, "192.0.2.1".parse().expect("ip"))
        );
    }

    /// `lua/record.lua` writes entries of the width this module reads.
    #[test]
    fn the_script_writes_this_width() {
        let lua = include_str!("../lua/record.lua");
        assert!(lua.contains(&format!("local record_width = {RECORD_WIDTH}\n")));
        assert!(lua.contains(
            "record_left, record_away_expired, record_gateway_gone, record_unbound = 1, 2, 3, 4\n\
             local record_door = 5\n"
        ));
        assert!(lua.contains(
            "record_booked, record_released, record_expired, record_no_show = 1, 2, 3, 4"
        ));
    }

    #[test]
    fn an_entry_decodes_as_written() {
        let mut b = vec![1u8, 2, 1, 3, 1, 19];
        b.extend(7u16.to_be_bytes());
        b.extend(1000u32.to_be_bytes());
        b.extend(5001u32.to_be_bytes());
        b.extend(4u32.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(99u32.to_be_bytes());
        b.extend(0u32.to_be_bytes());
        b.extend(25u16.to_be_bytes());
        b.extend([0, 0]);
        let e = Entry::decode(3, &b).expect("an entry");
        assert_eq!(e.kind, Kind::Joined);
        assert_eq!(e.lane, 2);
        assert_eq!(e.left, Some(LeaveReason::Left));
        assert_eq!(e.outcome, Some(Outcome::Expired));
        assert!(e.went_away);
        assert_eq!(e.eta_seconds, Some(7));
        assert_eq!(
            (e.joined_ms, e.admitted_ms, e.admission),
            (1000, Some(5000), Some(4))
        );
        assert_eq!(
            (e.left_ms, e.network, e.issue_to_join_ms),
            (None, Some(99), Some(2500))
        );
        assert_eq!(Entry::decode(0, &[0u8; RECORD_WIDTH]), None);
    }
}
