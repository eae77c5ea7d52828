//! The Redis key schema. Nothing outside `usher-core` builds key names.
//!
//! Per queue (all under the hash tag `{q:<id>}`, so every per-queue script runs in one slot):
//!
//! | key | type | content |
//! |---|---|---|
//! | `usher:{q:<id>}:meta` | hash | `open`, `admit_per_second`, `session_ttl_seconds`, `admitted_total`, `rate` |
//! | `usher:{q:<id>}:seq` | string | last place id handed out (`INCR`); never reset |
//! | `usher:{q:<id>}:waiting` | zset | member `<place b36>@<gateway index b36>`, score = place id |
//! | `usher:{q:<id>}:active` | zset | member = place id of an admitted place, score = session expiry (ms) |
//! | `usher:{q:<id>}:tokens` | hash | place id → `<admitted_at ms>\|<expires ms>\|<token>` (token empty until minted) |
//! | `usher:{q:<id>}:outbox` | list | admissions not yet delivered to gateways |
//! | `usher:{q:<id>}:gws` | zset | gateway index → expiry (ms): gateways holding browsers of this queue |
//!
//! Global:
//!
//! | key | type | content |
//! |---|---|---|
//! | `usher:queues` | set | every configured queue id (the dispatcher's registry; no `SCAN`) |
//! | `usher:{gw}:live` | zset | gateway id → heartbeat expiry (ms) |
//! | `usher:{gw}:index` / `usher:{gw}:ids` | hash | gateway id ↔ small index (base 36) used in members |
//! | `usher:{gw}:next` | string | last gateway index handed out |
//! | `usher:{gw:<id>}:stream` | stream | messages for one gateway (consumer group `usher`) |
//! | `usher:dev:jwt-key`, `usher:dev:ticket-key` | string | development keys shared when none are configured |

use crate::ids::{QueueId, ServerId};

/// Every key of one queue.
#[derive(Debug, Clone)]
pub struct QueueKeys {
    pub meta: String,
    pub seq: String,
    pub waiting: String,
    pub active: String,
    pub tokens: String,
    pub outbox: String,
    pub gws: String,
}

impl QueueKeys {
    pub fn new(q: &QueueId) -> Self {
        let k = |suffix: &str| format!("usher:{{q:{q}}}:{suffix}");
        Self {
            meta: k("meta"),
            seq: k("seq"),
            waiting: k("waiting"),
            active: k("active"),
            tokens: k("tokens"),
            outbox: k("outbox"),
            gws: k("gws"),
        }
    }
}

pub const QUEUES: &str = "usher:queues";
pub const GW_LIVE: &str = "usher:{gw}:live";
pub const GW_INDEX: &str = "usher:{gw}:index";
pub const GW_IDS: &str = "usher:{gw}:ids";
pub const GW_NEXT: &str = "usher:{gw}:next";
pub const DEV_JWT_KEY: &str = "usher:dev:jwt-key";
pub const DEV_TICKET_KEY: &str = "usher:dev:ticket-key";
/// Consumer group every gateway uses on its own stream.
pub const STREAM_GROUP: &str = "usher";

pub fn gateway_stream(id: &ServerId) -> String {
    format!("usher:{{gw:{id}}}:stream")
}

/// Waiting-set member for a place held by the gateway with index `gw` (both base 36).
pub fn member(place: u64, gw: &str) -> String {
    format!("{}@{gw}", base36(place))
}

/// Splits a waiting-set member into (place id, gateway index).
pub fn parse_member(m: &str) -> Option<(u64, &str)> {
    let (p, g) = m.split_once('@')?;
    Some((u64::from_str_radix(p, 36).ok()?, g))
}

pub fn base36(mut n: u64) -> String {
    const D: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut buf = [0u8; 13];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = D[(n % 36) as usize];
        n /= 36;
        if n == 0 {
            break;
        }
    }
    String::from_utf8_lossy(&buf[i..]).into_owned()
}

/// Redis Cluster hash slot of a key (CRC16/XMODEM of its hash tag, mod 16384).
pub fn hash_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|s| {
        b[s + 1..]
            .iter()
            .position(|&c| c == b'}')
            .filter(|&len| len > 0)
            .map(|len| &b[s + 1..s + 1 + len])
    });
    let data = tagged.unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_queue_keys_share_one_slot() {
        for name in ["a", "concert-2026", "Z_9"] {
            let k = QueueKeys::new(&QueueId::new(name).expect("valid"));
            let slot = hash_slot(&k.meta);
            for key in [&k.seq, &k.waiting, &k.active, &k.tokens, &k.outbox, &k.gws] {
                assert_eq!(hash_slot(key), slot, "{key}");
            }
        }
        for key in [GW_LIVE, GW_INDEX, GW_IDS, GW_NEXT] {
            assert_eq!(hash_slot(key), hash_slot(GW_LIVE));
        }
        // Known value from the Redis Cluster specification.
        assert_eq!(hash_slot("123456789"), 12739);
        assert_eq!(hash_slot("{user1000}.following"), hash_slot("user1000"));
    }

    #[test]
    fn members_round_trip() {
        for p in [1u64, 35, 36, 1_000_000, u64::MAX >> 11] {
            let m = member(p, "2k");
            assert_eq!(parse_member(&m), Some((p, "2k")));
        }
        assert_eq!(base36(0), "0");
        assert_eq!(base36(36), "10");
        assert_eq!(parse_member("nope"), None);
    }
}
