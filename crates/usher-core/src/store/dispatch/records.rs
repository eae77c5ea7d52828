//! Token records: the stored state of an admitted place, written by the dispatcher once its
//! entry token is minted and read back when the browser resumes or polls.

use std::collections::HashSet;

use redis::Value;

use super::Lease;
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;
use crate::store::decode::{array, u};
use crate::store::scripts::SCRIPTS;
use crate::store::{Result, Store};

/// The stored state of an admitted place.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRecord {
    pub admitted_at_ms: u64,
    pub expires_at_ms: u64,
    pub token: String,
}

impl TokenRecord {
    /// `<admitted at ms>|<expires ms>|<token>`, as the tokens hash stores it.
    pub fn encode(&self) -> String {
        format!(
            "{}|{}|{}",
            self.admitted_at_ms, self.expires_at_ms, self.token
        )
    }

    /// Parses [`TokenRecord::encode`]'s text.
    pub(in crate::store) fn parse(s: &str) -> Option<Self> {
        let mut it = s.splitn(3, '|');
        Some(Self {
            admitted_at_ms: it.next()?.parse().ok()?,
            expires_at_ms: it.next()?.parse().ok()?,
            token: it.next()?.to_owned(),
        })
    }
}

impl Store {
    /// Stores minted tokens, only for sessions that still exist; returns those places.
    /// `None` when the lease was lost (nothing stored).
    pub async fn store_tokens(
        &self,
        q: &QueueId,
        lease: &Lease,
        records: &[(PlaceId, TokenRecord)],
    ) -> Result<Option<HashSet<PlaceId>>> {
        let k = QueueKeys::of(q);
        let mut stored = HashSet::with_capacity(records.len());
        // In calls of 500: each blocks Redis for a few milliseconds only, so gateways and
        // browsers are served in between.
        for chunk in records.chunks(500) {
            let mut inv = SCRIPTS.complete.key(&k.tokens);
            inv.key(&k.lease).key(&k.active).arg(&lease.value);
            for (p, r) in chunk {
                inv.arg(p.0).arg(r.encode());
            }
            let v: Value = inv.invoke_async(&mut self.c()).await?;
            match v {
                Value::Nil => return Ok(None),
                v => {
                    for p in array(v)? {
                        stored.insert(PlaceId(u(&p)?));
                    }
                }
            }
        }
        Ok(Some(stored))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_records_round_trip() {
        let r = TokenRecord {
            admitted_at_ms: 5,
            expires_at_ms: 9,
            token: "a.b.c".into(),
        };
        assert_eq!(TokenRecord::parse(&r.encode()), Some(r));
    }
}
