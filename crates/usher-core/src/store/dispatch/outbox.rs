//! The outbox: each tick appends its admissions to the queue's outbox list, and the
//! dispatcher delivers them to the gateways' streams, then trims what it delivered. An
//! admission stays in the outbox until delivered, so a replica that takes over a queue
//! delivers what its predecessor could not.

use super::Lease;
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;
use crate::store::reply::TrimStatus;
use crate::store::scripts::SCRIPTS;
use crate::store::{protocol, Result, Store};

/// One admission waiting in a queue's outbox to be delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxEntry {
    pub place: PlaceId,
    /// Index of the gateway that held the browser at admission.
    pub gateway: u16,
    pub admitted_at_ms: u64,
    /// The session's expiry at admission.
    pub expires_at_ms: u64,
    /// The entry token's `exp` (ms): `expires_at_ms`, or the cap of a sliding session.
    pub token_exp_ms: u64,
}

impl OutboxEntry {
    /// Parses one outbox list entry: `<admitted at>|<expires>|<place>:<gateway>,...`, with
    /// `|<token exp>` after the places for a sliding session.
    pub fn parse_batch(s: &str) -> Option<Vec<Self>> {
        let mut it = s.splitn(4, '|');
        let admitted_at_ms = it.next()?.parse().ok()?;
        let expires_at_ms = it.next()?.parse().ok()?;
        let items = it.next()?;
        let token_exp_ms = match it.next() {
            Some(t) => t.parse().ok()?,
            None => expires_at_ms,
        };
        items
            .split(',')
            .map(|item| {
                let (p, g) = item.split_once(':')?;
                Some(Self {
                    place: PlaceId(p.parse().ok()?),
                    gateway: g.parse().ok()?,
                    admitted_at_ms,
                    expires_at_ms,
                    token_exp_ms,
                })
            })
            .collect()
    }

    /// Every admission in a list of outbox entries.
    pub(in crate::store) fn parse_all(raw: &[String]) -> Result<Vec<Self>> {
        let mut out = Vec::new();
        for s in raw {
            out.extend(
                Self::parse_batch(s).ok_or_else(|| protocol(format!("outbox entry {s:?}")))?,
            );
        }
        Ok(out)
    }
}

/// Which of a queue's two lists of undelivered admissions: the tick's, or the joins' own
/// (passthrough). Each has one courier, so neither trims entries the other is delivering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxList {
    /// `outbox`: what ticks admitted.
    Ticks,
    /// `passed`: what joins admitted at once.
    Passed,
}

impl OutboxList {
    fn key(self, k: &QueueKeys) -> &str {
        match self {
            Self::Ticks => &k.outbox,
            Self::Passed => &k.passed,
        }
    }
}

impl Store {
    /// The undelivered admissions in the oldest `max` entries of a queue's `list`, and how
    /// many entries that was (each holds up to 1,000 admissions).
    pub async fn outbox(
        &self,
        q: &QueueId,
        list: OutboxList,
        max: usize,
    ) -> Result<(u64, Vec<OutboxEntry>)> {
        let k = QueueKeys::of(q);
        let raw: Vec<String> = redis::cmd("LRANGE")
            .arg(list.key(&k))
            .arg(0)
            .arg(max.saturating_sub(1))
            .query_async(&mut self.c())
            .await?;
        Ok((raw.len() as u64, OutboxEntry::parse_all(&raw)?))
    }

    /// Drops the first `n` entries of `list` (after they were delivered). `false` when the
    /// lease was lost (nothing dropped).
    pub async fn trim_outbox(
        &self,
        q: &QueueId,
        list: OutboxList,
        lease: &Lease,
        n: u64,
    ) -> Result<bool> {
        let k = QueueKeys::of(q);
        let r: i64 = SCRIPTS
            .trim_outbox
            .key(list.key(&k))
            .key(&k.lease)
            .arg(&lease.value)
            .arg(n)
            .invoke_async(&mut self.c())
            .await?;
        Ok(TrimStatus::from_code(r) == Some(TrimStatus::Trimmed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outbox_entries_parse() {
        let e = OutboxEntry::parse_batch("1000|2000|17:2,18:3").expect("parses");
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].place, PlaceId(17));
        assert_eq!(e[0].gateway, 2);
        assert_eq!(e[1].gateway, 3);
        assert_eq!((e[1].admitted_at_ms, e[1].expires_at_ms), (1000, 2000));
        assert_eq!(
            e[1].token_exp_ms, 2000,
            "without a cap the token expires with the session"
        );
        let sliding = OutboxEntry::parse_batch("1000|2000|17:2|7000").expect("parses");
        assert_eq!(sliding[0].token_exp_ms, 7000);
        assert!(OutboxEntry::parse_batch("1000|2000|17:2|x").is_none());
        assert!(OutboxEntry::parse_batch("1000|2000|17:x").is_none());
        assert!(OutboxEntry::parse_batch("17|2").is_none());
    }
}
