//! The fairness report's record (`lua/record.lua` writes it): read in slices and turned into
//! a [`FairnessReport`] (crate::record::report).

use std::collections::HashMap;

use crate::ids::QueueId;
use crate::keys::QueueKeys;
use crate::record::builder::{RecordMeta, ReportBuilder};
use crate::record::report::{DrawProof, FairnessReport};
use crate::record::{Entry, DEFAULT_RETENTION_SECONDS, RECORD_WIDTH};

use super::{protocol, Result, Store};

/// Entries read per `GETRANGE` (144 KB): the report never holds the record whole.
pub const REPORT_SLICE: usize = 4096;

impl Store {
    /// Writes `q`'s record whole: `entries` ([`RECORD_WIDTH`] bytes each, from place 1 on),
    /// times counted from `start_ms`. For benchmarks and tests of the report, which need
    /// records of a size no sale in a test could make; a sale's record is written by its
    /// scripts alone.
    pub async fn put_record(&self, q: &QueueId, entries: &[u8], start_ms: u64) -> Result<()> {
        let k = QueueKeys::of(q);
        let _: () = redis::pipe()
            .atomic()
            .cmd("SET")
            .arg(&k.record)
            .arg(entries)
            .ignore()
            .cmd("HSET")
            .arg(&k.meta)
            .arg("record_seq0")
            .arg(0)
            .arg("record_ms0")
            .arg(start_ms)
            .ignore()
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// `q`'s fairness report; `None` for a queue never configured. A queue that never
    /// recorded gets [`FairnessReport::not_recorded`].
    ///
    /// The CPU part (decoding the entries, then [`ReportBuilder::finish`]'s sorts and
    /// counts: about a second for a million places, BENCHMARKS.md) runs on a blocking
    /// thread (`spawn_blocking`), fed slice by slice, so a report never stalls the async
    /// workers that tick the queues; at most two slices wait between the two sides.
    pub async fn fairness_report(&self, q: &QueueId) -> Result<Option<FairnessReport>> {
        let k = QueueKeys::of(q);
        let fields = [
            "open",
            "record",
            "record_seq0",
            "record_ms0",
            "record_overflow",
            "record_retention_seconds",
            "draw",
            "draw_commitment",
            "draw_seed",
            "draw_beacon_round",
            "draw_beacon",
        ];
        let values: Vec<Option<String>> = redis::cmd("HMGET")
            .arg(&k.meta)
            .arg(&fields[..])
            .query_async(&mut self.c())
            .await?;
        let m: HashMap<&str, String> = fields
            .iter()
            .zip(values)
            .filter_map(|(f, v)| v.map(|v| (*f, v)))
            .collect();
        if !m.contains_key("open") {
            return Ok(None);
        }
        let (len, ttl): (u64, i64) = redis::pipe()
            .cmd("STRLEN")
            .arg(&k.record)
            .cmd("PTTL")
            .arg(&k.record)
            .query_async(&mut self.c())
            .await?;
        let num = |f: &str| m.get(f).and_then(|v| v.parse::<u64>().ok());
        let recording = m.get("record").is_some_and(|v| v == "1");
        if !recording && len == 0 {
            return Ok(Some(FairnessReport::not_recorded(q.as_str())));
        }
        let draw = m.get("draw").map(|status| {
            let done = status == "done";
            DrawProof {
                status: status.clone(),
                commitment: m.get("draw_commitment").cloned(),
                // The seed is secret until the draw ran.
                seed: m.get("draw_seed").filter(|_| done).cloned(),
                beacon_round: num("draw_beacon_round"),
                beacon: m.get("draw_beacon").cloned(),
                record_url: format!("/api/queues/{q}/draw"),
                verify: format!(
                    "curl -s \"$GATEWAY/api/queues/{q}/draw\" | python3 verify_draw.py  \
                     # the script of docs/policies.md, \"Scheduled sale and the draw\""
                ),
            }
        });
        let mut b = ReportBuilder::new(RecordMeta {
            queue: q.as_str().to_owned(),
            seq0: num("record_seq0").unwrap_or(0),
            since_ms: num("record_ms0").unwrap_or(0),
            overflow: num("record_overflow").unwrap_or(0),
            retention_seconds: num("record_retention_seconds").unwrap_or(DEFAULT_RETENTION_SECONDS),
            expires_in_seconds: u64::try_from(ttl).ok().map(|ms| ms.div_ceil(1000)),
            closed: m.get("open").is_some_and(|v| v == "0"),
            draw,
        });
        let width = RECORD_WIDTH as u64;
        let slice = REPORT_SLICE as u64 * width;
        let (tx, mut rx) = tokio::sync::mpsc::channel::<(u64, Vec<u8>)>(2);
        let builder = tokio::task::spawn_blocking(move || {
            while let Some((first, bytes)) = rx.blocking_recv() {
                for (i, chunk) in bytes.chunks(RECORD_WIDTH).enumerate() {
                    let index = u32::try_from(first + i as u64).unwrap_or(u32::MAX);
                    if let Some(e) = Entry::decode(index, chunk) {
                        b.add(&e);
                    }
                }
            }
            b.finish()
        });
        let mut at = 0u64;
        while at < len {
            let bytes: Vec<u8> = redis::cmd("GETRANGE")
                .arg(&k.record)
                .arg(at)
                .arg(at + slice - 1)
                .query_async(&mut self.c())
                .await?;
            if bytes.is_empty() {
                break;
            }
            let read = bytes.len() as u64;
            if tx.send((at / width, bytes)).await.is_err() {
                break;
            }
            at += read;
        }
        // Closing the channel lets the builder finish (dropped early by an error above, it
        // finishes on its own and its report is dropped).
        drop(tx);
        let report = builder
            .await
            .map_err(|e| protocol(format!("the report's builder failed: {e}")))?;
        Ok(Some(report))
    }
}
