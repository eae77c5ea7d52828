//! The per-gateway streams: the dispatcher appends messages for a gateway's browsers to that
//! gateway's stream, and the gateway reads them through its consumer group.

use std::time::Duration;

use redis::Value;

use super::decode::{array, int, text};
use super::{protocol, Result, Store};
use crate::ids::ServerId;
use crate::keys;
use crate::messages::{StreamMessage, STREAM_FIELD, TRACE_FIELD};

/// A message read from a gateway stream.
#[derive(Debug)]
pub struct StreamEntry {
    pub id: String,
    /// `None` when the entry could not be decoded (logged and acknowledged by the reader).
    pub message: Option<StreamMessage>,
    /// The W3C `traceparent` of the span that wrote the entry, when it carried one.
    pub traceparent: Option<String>,
}

/// How far behind a gateway's reading of its own stream is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamLag {
    /// Entries written and not yet read by the gateway.
    pub lag: u64,
    /// Entries read and not yet acknowledged.
    pub pending: u64,
}

/// Each gateway stream is capped (approximately) at this many entries.
pub const STREAM_MAXLEN: u64 = 100_000;

impl Store {
    /// Creates the gateway's stream and consumer group if missing, and sets the stream to
    /// expire after `ttl` unless touched again (so a dead gateway's stream disappears).
    pub async fn ensure_stream(&self, id: &ServerId, ttl: Duration) -> Result<()> {
        let key = keys::gateway_stream(id);
        let mut c = self.c();
        let r: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(&key)
            .arg(keys::STREAM_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut c)
            .await;
        match r {
            Ok(()) => {}
            Err(e) if e.code() == Some("BUSYGROUP") => {}
            Err(e) => return Err(e.into()),
        }
        self.touch_stream(id, ttl).await
    }

    async fn touch_stream(&self, id: &ServerId, ttl: Duration) -> Result<()> {
        let _: () = redis::cmd("PEXPIRE")
            .arg(keys::gateway_stream(id))
            .arg(ttl.as_millis() as u64)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// Reads new entries of the gateway's own stream (blocking up to `block`). Returns
    /// `Ok(None)` when the stream or group is missing (expired, or Redis restarted empty):
    /// call [`Store::ensure_stream`] and read again.
    pub async fn read_stream(
        &self,
        id: &ServerId,
        count: usize,
        block: Duration,
    ) -> Result<Option<Vec<StreamEntry>>> {
        self.read_stream_with(id, count, Some(block)).await
    }

    /// [`Store::read_stream`] without blocking: what is there now (a rehearsal reads its
    /// gateway's stream after each virtual tick; Redis times a short `BLOCK` out only at
    /// its own cron's pace, tens of milliseconds).
    pub async fn read_stream_now(
        &self,
        id: &ServerId,
        count: usize,
    ) -> Result<Option<Vec<StreamEntry>>> {
        self.read_stream_with(id, count, None).await
    }

    async fn read_stream_with(
        &self,
        id: &ServerId,
        count: usize,
        block: Option<Duration>,
    ) -> Result<Option<Vec<StreamEntry>>> {
        let key = keys::gateway_stream(id);
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(keys::STREAM_GROUP)
            .arg(id.as_str())
            .arg("COUNT")
            .arg(count);
        if let Some(block) = block {
            cmd.arg("BLOCK").arg(block.as_millis() as u64);
        }
        let r: redis::RedisResult<Value> = cmd
            .arg("STREAMS")
            .arg(&key)
            .arg(">")
            .query_async(&mut self.c())
            .await;
        let v = match r {
            Ok(v) => v,
            Err(e) if e.code() == Some("NOGROUP") => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let mut out = Vec::new();
        // RESP2: [[key, [[id, [field, value, ...]], ...]]]; RESP3 may use a map.
        let streams: Vec<Value> = match v {
            Value::Map(m) => m.into_iter().map(|(_, v)| v).collect(),
            Value::Array(a) => a
                .into_iter()
                .filter_map(|s| array(s).ok()?.into_iter().nth(1))
                .collect(),
            Value::Nil => Vec::new(),
            other => return Err(protocol(format!("XREADGROUP reply {other:?}"))),
        };
        for entries in streams {
            for e in array(entries)? {
                let mut e = array(e)?.into_iter();
                let id = e
                    .next()
                    .as_ref()
                    .and_then(text)
                    .ok_or_else(|| protocol("entry id"))?;
                let fields = e.next().map(array).transpose()?.unwrap_or_default();
                let field = |name: &str| {
                    fields
                        .chunks(2)
                        .find(|c| c.first().and_then(text).as_deref() == Some(name))
                        .and_then(|c| c.get(1))
                };
                let message = field(STREAM_FIELD).and_then(|v| match v {
                    Value::BulkString(b) => serde_json::from_slice(b).ok(),
                    _ => None,
                });
                let traceparent = field(TRACE_FIELD).and_then(text);
                out.push(StreamEntry {
                    id,
                    message,
                    traceparent,
                });
            }
        }
        Ok(Some(out))
    }

    /// Acknowledges and deletes processed entries of the gateway's stream.
    pub async fn ack(&self, id: &ServerId, entry_ids: &[String]) -> Result<()> {
        if entry_ids.is_empty() {
            return Ok(());
        }
        let key = keys::gateway_stream(id);
        let _: () = redis::pipe()
            .cmd("XACK")
            .arg(&key)
            .arg(keys::STREAM_GROUP)
            .arg(entry_ids)
            .ignore()
            .cmd("XDEL")
            .arg(&key)
            .arg(entry_ids)
            .ignore()
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// How far behind the gateway's reading of its own stream is: `XINFO GROUPS` for the
    /// group's lag and pending count, and `XLEN` for the lag when Redis cannot tell it (acked
    /// entries are deleted, so the stream holds only what is unread or unacknowledged).
    /// Zeros when the stream or group is missing.
    pub async fn stream_lag(&self, id: &ServerId) -> Result<StreamLag> {
        let key = keys::gateway_stream(id);
        let r: redis::RedisResult<(Value, u64)> = redis::pipe()
            .cmd("XINFO")
            .arg("GROUPS")
            .arg(&key)
            .cmd("XLEN")
            .arg(&key)
            .query_async(&mut self.c())
            .await;
        let (groups, len) = match r {
            Ok(v) => v,
            // "no such key": the stream expired or Redis restarted empty.
            Err(e) if e.code() == Some("ERR") => return Ok(StreamLag::default()),
            Err(e) => return Err(e.into()),
        };
        let field = |fields: &[(String, Value)], name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        };
        let group = array(groups)?.into_iter().find_map(|g| {
            let fields = group_fields(g)?;
            let name = field(&fields, "name")?;
            (text(&name).as_deref() == Some(keys::STREAM_GROUP)).then_some(fields)
        });
        let Some(fields) = group else {
            return Ok(StreamLag::default());
        };
        let count = |name: &str| {
            field(&fields, name)
                .as_ref()
                .and_then(int)
                .and_then(|n| u64::try_from(n).ok())
        };
        let pending = count("pending").unwrap_or(0);
        Ok(StreamLag {
            lag: count("lag").unwrap_or_else(|| len.saturating_sub(pending)),
            pending,
        })
    }

    /// Appends messages to gateways' streams (pipelined; `MAXLEN ~` bounds each stream). A
    /// stream that no longer exists (its gateway is gone) is not recreated.
    pub async fn send(&self, batches: &[(ServerId, Vec<StreamMessage>)]) -> Result<()> {
        self.send_traced(batches, None).await
    }

    /// [`Store::send`], each entry carrying `traceparent` (the sending span's W3C trace
    /// context) when there is one.
    pub async fn send_traced(
        &self,
        batches: &[(ServerId, Vec<StreamMessage>)],
        traceparent: Option<&str>,
    ) -> Result<()> {
        // One pipeline per stream, sent together: each stream is its own slot (`{gw:<id>}`),
        // so in a cluster each goes to the master holding it.
        let mut pipes = Vec::with_capacity(batches.len());
        for (gw, msgs) in batches {
            if msgs.is_empty() {
                continue;
            }
            let key = keys::gateway_stream(gw);
            let mut p = redis::pipe();
            for m in msgs {
                let json = serde_json::to_vec(m).map_err(|e| protocol(e.to_string()))?;
                p.cmd("XADD")
                    .arg(&key)
                    .arg("NOMKSTREAM")
                    .arg("MAXLEN")
                    .arg("~")
                    .arg(STREAM_MAXLEN)
                    .arg("*")
                    .arg(STREAM_FIELD)
                    .arg(json);
                if let Some(tp) = traceparent {
                    p.arg(TRACE_FIELD).arg(tp);
                }
                p.ignore();
            }
            pipes.push(p);
        }
        futures::future::try_join_all(pipes.iter().map(|p| {
            let mut c = self.c();
            async move { p.query_async::<()>(&mut c).await }
        }))
        .await?;
        Ok(())
    }
}

/// One `XINFO GROUPS` entry as (field, value) pairs: a flat array in RESP2, a map in RESP3.
fn group_fields(g: Value) -> Option<Vec<(String, Value)>> {
    match g {
        Value::Map(m) => Some(
            m.into_iter()
                .filter_map(|(k, v)| Some((text(&k)?, v)))
                .collect(),
        ),
        Value::Array(a) => {
            let mut out = Vec::new();
            let mut it = a.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                out.push((text(&k)?, v));
            }
            Some(out)
        }
        _ => None,
    }
}
