//! The reply of `lua/tick.lua` as it comes back from Redis: the JSON it encodes, mirrored
//! field by field ([`TickReply`]), and its decoding into a [`TickOutcome`].

use serde::Deserialize;

use crate::lanes::LaneName;
use crate::store::{protocol, Result};

use super::outbox::OutboxEntry;
use super::tick_outcome::{LaneOutcome, TickOutcome};

/// The outcome of a tick call as `lua/tick.lua` encodes it: a JSON object whose field names
/// are these (a missing or unknown field is an error, so the two cannot drift apart).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TickReply {
    admitted: u64,
    waiting: u64,
    active: u64,
    #[serde(deserialize_with = "lua_list")]
    runs: Vec<u64>,
    #[serde(deserialize_with = "lua_list")]
    samples: Vec<u64>,
    last_place: u64,
    #[serde(deserialize_with = "lua_list")]
    gateways: Vec<String>,
    outbox_len: u64,
    admit_per_second: f64,
    dropped: u64,
    carry: f64,
    session_ttl_ms: u64,
    token_ttl_ms: u64,
    paused: bool,
    #[serde(deserialize_with = "lua_list")]
    fresh: Vec<String>,
    more: bool,
    no_shows: u64,
    #[serde(default)]
    inventory: Option<crate::inventory::InventoryState>,
    #[serde(default)]
    sold_out: bool,
    #[serde(deserialize_with = "lua_list")]
    lanes: Vec<LaneReply>,
}

/// One lane of a tick reply (`lane_snapshots` in `lua/tick.lua`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LaneReply {
    name: LaneName,
    slot: u8,
    share: u8,
    waiting: u64,
    present: u64,
    admitted: u64,
    #[serde(deserialize_with = "lua_list")]
    runs: Vec<u64>,
    #[serde(deserialize_with = "lua_list")]
    samples: Vec<u64>,
}

impl TickReply {
    pub(super) fn into_outcome(self) -> Result<TickOutcome> {
        Ok(TickOutcome {
            admitted: self.admitted,
            waiting: self.waiting,
            active: self.active,
            runs: pairs(&self.runs)?,
            samples: pairs(&self.samples)?,
            last_place: self.last_place,
            gateways: self
                .gateways
                .iter()
                .filter_map(|g| g.parse().ok())
                .collect(),
            outbox_len: self.outbox_len,
            admit_per_second: self.admit_per_second,
            dropped: self.dropped,
            no_shows: self.no_shows,
            carry: self.carry,
            session_ttl_ms: self.session_ttl_ms,
            token_ttl_ms: self.token_ttl_ms,
            paused: self.paused,
            fresh: OutboxEntry::parse_all(&self.fresh)?,
            fresh_entries: self.fresh.len() as u64,
            more: self.more,
            inventory: self.inventory,
            sold_out: self.sold_out,
            lanes: self
                .lanes
                .into_iter()
                .map(|l| {
                    Ok(LaneOutcome {
                        name: l.name,
                        default: l.slot == 0,
                        share: l.share,
                        waiting: l.waiting,
                        present: l.present,
                        admitted: l.admitted,
                        runs: pairs(&l.runs)?,
                        samples: pairs(&l.samples)?,
                    })
                })
                .collect::<Result<_>>()?,
        })
    }
}

/// `[a, b, c, d, ...]` as `[(a, b), (c, d), ...]`.
fn pairs(flat: &[u64]) -> Result<Vec<(u64, u64)>> {
    if !flat.len().is_multiple_of(2) {
        return Err(protocol("odd-length pair list"));
    }
    Ok(flat.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

/// A list from a Lua table: Redis' `cjson` encodes an empty table as the object `{}`, so an
/// empty object counts as an empty list.
fn lua_list<'de, D, T>(d: D) -> std::result::Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct ListVisitor<T>(std::marker::PhantomData<T>);

    impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ListVisitor<T> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a list, or {} for an empty one")
        }

        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> std::result::Result<Vec<T>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(item) = seq.next_element()? {
                out.push(item);
            }
            Ok(out)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> std::result::Result<Vec<T>, A::Error> {
            match map.next_key::<serde::de::IgnoredAny>()? {
                None => Ok(Vec::new()),
                Some(_) => Err(serde::de::Error::custom("a non-empty object is not a list")),
            }
        }
    }

    d.deserialize_any(ListVisitor(std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_outcomes_decode_by_name_with_empty_tables_as_objects() {
        let json = r#"{"admitted":2,"waiting":5,"active":2,"runs":[10,5],"samples":{},
            "last_place":14,"gateways":["3","x"],"outbox_len":1,"admit_per_second":10,"dropped":0,
            "carry":0.5,"session_ttl_ms":600000,"token_ttl_ms":600000,"paused":false,
            "fresh":["1000|2000|8:3,9:3"],"more":false,"no_shows":0,"lanes":{}}"#;
        let reply: TickReply = serde_json::from_str(json).expect("decodes");
        let o = reply.into_outcome().expect("valid");
        assert_eq!(o.runs, vec![(10, 5)]);
        assert!(o.samples.is_empty());
        assert_eq!(o.last_place, 14);
        assert_eq!(o.gateways, vec![3]);
        assert_eq!((o.admit_per_second, o.carry), (10.0, 0.5));
        assert_eq!(o.fresh.len(), 2);
        assert_eq!(o.fresh_entries, 1);
        let missing = json.replace(r#""more":false"#, r#""moar":false"#);
        assert!(serde_json::from_str::<TickReply>(&missing).is_err());
    }
}
