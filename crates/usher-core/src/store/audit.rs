//! The audit trail of admin changes: a capped Redis stream (`keys::AUDIT`), appended by the
//! dispatcher after every admin write and read back newest first.

use std::collections::HashMap;

use redis::Value;
use serde::{Deserialize, Serialize};

use super::{Result, Store};
use crate::keys;

/// The audit stream keeps about this many records (`XADD MAXLEN ~`): enough for months of
/// operator changes, a few MB at most.
pub const AUDIT_MAXLEN: u64 = 10_000;

/// One admin change: who made it, what it was, when, and how it was answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditRecord {
    /// Stream entry id (set when read back; empty when appending).
    #[serde(default)]
    pub id: String,
    /// When the change was answered (ms since the epoch).
    pub at_ms: u64,
    /// The label of the admin token used.
    pub who: String,
    pub method: String,
    /// Path and query string.
    pub path: String,
    /// The HTTP status answered.
    pub status: u16,
    /// The request body, shortened (admin bodies carry settings and notices, never tokens).
    pub summary: String,
}

impl Store {
    /// Appends an audit record, trimming the stream to about [`AUDIT_MAXLEN`] entries.
    pub async fn append_audit(&self, r: &AuditRecord) -> Result<()> {
        let _: Value = redis::cmd("XADD")
            .arg(keys::AUDIT)
            .arg("MAXLEN")
            .arg("~")
            .arg(AUDIT_MAXLEN)
            .arg("*")
            .arg("at_ms")
            .arg(r.at_ms)
            .arg("who")
            .arg(&r.who)
            .arg("method")
            .arg(&r.method)
            .arg("path")
            .arg(&r.path)
            .arg("status")
            .arg(r.status)
            .arg("summary")
            .arg(&r.summary)
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// The newest `limit` audit records, newest first.
    pub async fn audit_log(&self, limit: usize) -> Result<Vec<AuditRecord>> {
        let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XREVRANGE")
            .arg(keys::AUDIT)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(limit)
            .query_async(&mut self.c())
            .await?;
        Ok(entries
            .into_iter()
            .map(|(id, mut f)| {
                let mut take = |k: &str| f.remove(k).unwrap_or_default();
                AuditRecord {
                    at_ms: take("at_ms").parse().unwrap_or(0),
                    who: take("who"),
                    method: take("method"),
                    path: take("path"),
                    status: take("status").parse().unwrap_or(0),
                    summary: take("summary"),
                    id,
                }
            })
            .collect())
    }
}
