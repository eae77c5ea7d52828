//! What a gateway reads of a queue's settings, each from the queue's `meta` hash in one
//! `HMGET`: its waiting-room page settings (the dispatcher's admin API writes them; gateways
//! read them to serve `GET /q/{queue}`) and its proof-of-work setting (gateways read it to
//! issue and check puzzles; the join script reads it again, and is the authority), with its
//! `bind` setting (gateways read it to ask every stream request for a proof of the browser's key).

use super::{QueueConfig, Result, Store};
use crate::binding::Bind;
use crate::challenge::{Challenge, DEFAULT_POW_DIFFICULTY};
use crate::ids::QueueId;
use crate::keys::QueueKeys;
use crate::messages::CloseReason;
use crate::page_settings::PageSettings;

/// The `meta` fields of [`PageSettings`], in field order.
const FIELDS: [&str; 4] = [
    "page_booking_url",
    "page_embed_origin",
    "page_title",
    "page_logo_url",
];

/// What a gateway needs to serve a queue's page.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePage {
    pub settings: PageSettings,
    /// Why the queue is closed, when it is.
    pub closed: Option<CloseReason>,
    /// The operator's text while the queue is in maintenance.
    pub maintenance: Option<String>,
    /// The operator's text when the sale was ended.
    pub ended: Option<String>,
}

impl Store {
    /// A queue's page settings; `None` when the queue was never configured.
    pub async fn queue_page(&self, q: &QueueId) -> Result<Option<QueuePage>> {
        let k = QueueKeys::of(q);
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(&k.meta)
            .arg("open")
            .arg("close_reason")
            .arg(&FIELDS)
            .arg("maintenance")
            .arg("ended");
        let v: Vec<Option<String>> = cmd.query_async(&mut self.c()).await?;
        let mut v = v.into_iter();
        let (Some(open), close_reason) = (v.next().flatten(), v.next().flatten()) else {
            return Ok(None);
        };
        let mut next = || v.next().flatten().filter(|s| !s.is_empty());
        let settings = PageSettings {
            booking_url: next(),
            embed_origin: next(),
            title: next(),
            logo_url: next(),
        };
        let (maintenance, ended) = (next(), next());
        let closed = (open != "1").then(|| {
            close_reason
                .and_then(|r| r.parse().ok())
                .unwrap_or(CloseReason::QueueClosed)
        });
        Ok(Some(QueuePage {
            settings,
            closed,
            maintenance,
            ended,
        }))
    }

    /// A queue's page settings as the admin API shows them (no queue: all unset).
    pub async fn page_settings(&self, q: &QueueId) -> Result<PageSettings> {
        Ok(self
            .queue_page(q)
            .await?
            .map(|p| p.settings)
            .unwrap_or_default())
    }

    /// Stores a queue's page settings: fields set are written, fields unset are removed.
    pub async fn put_page_settings(&self, q: &QueueId, s: &PageSettings) -> Result<()> {
        let k = QueueKeys::of(q);
        let values = [&s.booking_url, &s.embed_origin, &s.title, &s.logo_url];
        let set: Vec<(&str, &str)> = FIELDS
            .iter()
            .zip(values)
            .filter_map(|(f, v)| v.as_deref().map(|v| (*f, v)))
            .collect();
        let unset: Vec<&str> = FIELDS
            .iter()
            .zip(values)
            .filter(|(_, v)| v.is_none())
            .map(|(f, _)| *f)
            .collect();
        let mut pipe = redis::pipe();
        if !set.is_empty() {
            pipe.hset_multiple(&k.meta, &set).ignore();
        }
        if !unset.is_empty() {
            pipe.hdel(&k.meta, unset).ignore();
        }
        let _: () = pipe.query_async(&mut self.c()).await?;
        Ok(())
    }
}

/// What a queue asks of a join, how long it keeps an away place, and whether it is in
/// maintenance (read together, so a gateway learns them in one `HMGET`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeSetting {
    pub challenge: Challenge,
    /// Leading zero bits (meaningful with [`Challenge::Pow`]).
    pub difficulty: u8,
    /// The queue's grace period (`grace_seconds`): how long an away place stays in line. A
    /// gateway keeps counting such a place for the address that held it as long.
    pub grace_seconds: u64,
    /// Whether every stream request and status poll must prove the browser's key (read in
    /// the same `HMGET`: the gateway caches both together).
    pub bind: Bind,
    /// The operator's text while the queue is in maintenance: a stream that opens meanwhile
    /// hears `status` first (it may have missed the push while it reconnected).
    pub maintenance: Option<std::sync::Arc<str>>,
    /// Whether the queue records (crate::record): a join then brings its client network,
    /// hashed, and its proof's solve time.
    pub record: bool,
}

impl Store {
    /// `q`'s challenge setting; `None` for a queue never configured (one `HMGET`).
    pub async fn challenge_setting(&self, q: &QueueId) -> Result<Option<ChallengeSetting>> {
        let k = QueueKeys::of(q);
        type Fields = (
            Option<String>,
            Option<String>,
            Option<u8>,
            Option<u64>,
            Option<String>,
            Option<String>,
            Option<String>,
        );
        let (open, challenge, difficulty, grace, bind, maintenance, record): Fields =
            redis::cmd("HMGET")
                .arg(&k.meta)
                .arg("open")
                .arg("challenge")
                .arg("pow_difficulty")
                .arg("grace_seconds")
                .arg("bind")
                .arg("maintenance")
                .arg("record")
                .query_async(&mut self.c())
                .await?;
        Ok(open.map(|_| ChallengeSetting {
            challenge: challenge.and_then(|c| c.parse().ok()).unwrap_or_default(),
            difficulty: difficulty.unwrap_or(DEFAULT_POW_DIFFICULTY),
            grace_seconds: grace.unwrap_or(QueueConfig::default().grace_seconds),
            bind: bind.and_then(|b| b.parse().ok()).unwrap_or_default(),
            maintenance: maintenance.map(Into::into),
            record: record.is_some_and(|r| r == "1"),
        }))
    }
}
