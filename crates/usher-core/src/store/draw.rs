//! A scheduled sale in Redis: its schedule (the admin API), its entrants' hashes (the
//! gateways, as they hand out pre-queue tickets), the draw (the dispatcher holding the
//! queue's lease) and the published result (the gateways' `GET /api/queues/{q}/draw`).

use redis::Value;

use super::decode::{array, status};
use super::reply::{BeaconStatus, ScheduleStatus};
use super::scripts::SCRIPTS;
use super::{protocol, Result, Store};
use crate::draw::{EntrantHash, Seed, VoidReason};
use crate::ids::{PlaceId, QueueId};
use crate::keys::{self, QueueKeys};

/// Where a scheduled sale stands (the draw record's `status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DrawPhase {
    /// Before the draw: joins go to the pre-queue, the seed is secret.
    Pending,
    /// The draw ran: the seed and the entrants are published.
    Done,
    /// The draw was voided and none is held: Redis lost the queue before its draw, and it
    /// was configured again without a sale; its pre-queue went into the line in join order
    /// (`lua/restore_pre.lua`).
    Void,
}

/// A published draw that was voided before it ran (see [`VoidReason`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoidedDraw {
    pub reason: VoidReason,
    /// The voided commitment, when a gateway saw it before the loss.
    pub commitment: Option<String>,
}

/// A scheduled sale as the dispatcher's draw reads it: one `HMGET` of the queue's `meta`.
pub(super) struct SaleFields {
    /// What the public record shows (with the seed, secret until the draw).
    pub(super) schedule: Schedule,
    /// The seed, parsed (`None` if missing or malformed).
    pub(super) seed: Option<Seed>,
    /// Whether the queue is open.
    pub(super) open: bool,
    /// The draw's cutoff: set exactly while a draw is under way (`lua/draw_begin.lua` sets it
    /// with the record `drawing`; the draw's end, a close and a new sale remove both).
    pub(super) cutoff: Option<u64>,
}

/// A queue's scheduled sale, as the public draw record shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub opens_at_ms: u64,
    pub phase: DrawPhase,
    /// Lowercase hex SHA-256 of the seed of the draw held (`None` only when [`DrawPhase::Void`]).
    pub commitment: Option<String>,
    /// The seed (hex): `None` until the draw ran.
    pub seed: Option<String>,
    /// The public randomness mixed into the order, when the sale names one.
    pub beacon: Option<Beacon>,
    /// A draw published earlier and voided: with [`DrawPhase::Void`], or before the draw held
    /// now (then `commitment` is a new one, published after the loss).
    pub voided: Option<VoidedDraw>,
}

/// A public randomness beacon named in advance: a drand round, and its randomness (hex)
/// once the operator recorded it. The draw waits for the randomness.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Beacon {
    pub drand_round: u64,
    pub randomness: Option<String>,
}

/// What [`Store::set_beacon`] is asked to do.
#[derive(Debug, Clone, Copy)]
pub enum BeaconChange<'a> {
    /// Name a drand round (`None`: no beacon).
    Round(Option<u64>),
    /// Record the named round's randomness (hex).
    Randomness(&'a str),
}

/// What [`Store::set_beacon`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeaconOutcome {
    Set,
    /// No draw is pending.
    NotPending,
    /// Randomness for a sale that names no round.
    NoRound,
    /// Other randomness is already recorded.
    Conflict,
}

impl Store {
    /// Schedules the sale of `q` to open at `opens_at_ms` (with `seed` if this starts a new
    /// sale), or unschedules it (`None`). `false` when refused: a pending draw cannot be
    /// unscheduled, nor moved once its steps began. See `lua/schedule.lua` for when the seed is kept.
    pub async fn schedule(
        &self,
        q: &QueueId,
        opens_at_ms: Option<u64>,
        seed: &Seed,
    ) -> Result<bool> {
        let k = QueueKeys::of(q);
        let v: Value = SCRIPTS
            .schedule
            .key(&k.meta)
            .key(&k.pre)
            .key(&k.entrants)
            .key(&k.drawn)
            .key(&k.draw)
            .key(&k.drawing)
            .key(&k.pre_away)
            .key(&k.absent)
            .arg(opens_at_ms.map(|t| t.to_string()).unwrap_or_default())
            .arg(seed.to_hex())
            .arg(seed.commitment())
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match status(&a, ScheduleStatus::from_code) {
            Some(ScheduleStatus::Set) => {
                // Outside the script: another slot. Removed by the dispatcher after the draw.
                if opens_at_ms.is_some() {
                    self.mark_sale(q, true).await?;
                }
                Ok(true)
            }
            Some(ScheduleStatus::DrawPending) => Ok(false),
            None => Err(protocol(format!("schedule reply {a:?}"))),
        }
    }

    /// Queues whose draw may be pending (`usher:draws`): the dispatcher reads their schedule
    /// before a tick, and no other queue's.
    pub async fn sale_queues(&self) -> Result<Vec<QueueId>> {
        let names: Vec<String> = redis::cmd("SMEMBERS")
            .arg(keys::DRAWS)
            .query_async(&mut self.c())
            .await?;
        Ok(names
            .into_iter()
            .filter_map(|n| QueueId::new(n).ok())
            .collect())
    }

    /// Adds `q` to (or, `false`, removes it from) the queues whose draw may be pending.
    pub async fn mark_sale(&self, q: &QueueId, pending: bool) -> Result<()> {
        let cmd = if pending { "SADD" } else { "SREM" };
        let _: () = redis::cmd(cmd)
            .arg(keys::DRAWS)
            .arg(q.as_str())
            .query_async(&mut self.c())
            .await?;
        Ok(())
    }

    /// The scheduled sale of `q`, if any (the seed only once drawn).
    pub async fn schedule_of(&self, q: &QueueId) -> Result<Option<Schedule>> {
        Ok(self.schedule_fields(q).await?.map(|f| {
            let mut s = f.schedule;
            if s.phase == DrawPhase::Pending {
                s.seed = None;
            }
            s
        }))
    }

    /// The schedule with what only the draw may see (see [`SaleFields`]).
    pub(super) async fn schedule_fields(&self, q: &QueueId) -> Result<Option<SaleFields>> {
        let k = QueueKeys::of(q);
        type Fields = (
            Option<String>,
            Option<u64>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<u64>,
            Option<String>,
            Option<String>,
            Option<String>,
            Option<u64>,
        );
        let (open, at, phase, seed, commitment, round, randomness, void, void_commitment, cutoff): Fields =
            redis::cmd("HMGET")
                .arg(&k.meta)
                .arg("open")
                .arg("opens_at_ms")
                .arg("draw")
                .arg("draw_seed")
                .arg("draw_commitment")
                .arg("draw_beacon_round")
                .arg("draw_beacon")
                .arg("draw_void")
                .arg("draw_void_commitment")
                .arg("draw_cutoff")
                .query_async(&mut self.c())
                .await?;
        let phase = match phase.as_deref() {
            Some("pending") => DrawPhase::Pending,
            Some("done") => DrawPhase::Done,
            Some("void") => DrawPhase::Void,
            _ => return Ok(None),
        };
        let Some(opens_at_ms) = at else {
            return Ok(None);
        };
        if commitment.is_none() && phase != DrawPhase::Void {
            return Ok(None);
        }
        let voided = void.map(|r| VoidedDraw {
            // Written by restore_pre.lua from VoidReason::as_str; an unknown name (a newer
            // version's) still reads as a void draw.
            reason: VoidReason::parse(&r).unwrap_or(VoidReason::RedisDataLost),
            commitment: void_commitment,
        });
        let commitment = commitment.filter(|_| phase != DrawPhase::Void);
        let parsed = seed.as_deref().and_then(Seed::from_hex);
        Ok(Some(SaleFields {
            schedule: Schedule {
                opens_at_ms,
                phase,
                commitment,
                seed,
                beacon: round.map(|drand_round| Beacon {
                    drand_round,
                    randomness,
                }),
                voided,
            },
            seed: parsed,
            open: open.as_deref() == Some("1"),
            cutoff,
        }))
    }

    /// Records the entrant hashes of pre-queue places, before their tickets go out: the draw
    /// orders the places that have one.
    pub async fn record_entrants(
        &self,
        q: &QueueId,
        entrants: &[(PlaceId, EntrantHash)],
    ) -> Result<()> {
        if entrants.is_empty() {
            return Ok(());
        }
        let k = QueueKeys::of(q);
        let mut cmd = redis::cmd("HSET");
        cmd.arg(&k.entrants);
        for (p, h) in entrants {
            cmd.arg(p.0).arg(&h.0[..]);
        }
        let _: () = cmd.query_async(&mut self.c()).await?;
        Ok(())
    }

    /// Names a pending sale's beacon round, or records its randomness (see `lua/beacon.lua`).
    pub async fn set_beacon(&self, q: &QueueId, change: BeaconChange<'_>) -> Result<BeaconOutcome> {
        let k = QueueKeys::of(q);
        let (what, value) = match change {
            BeaconChange::Round(r) => ("round", r.map(|r| r.to_string()).unwrap_or_default()),
            BeaconChange::Randomness(hex) => ("randomness", hex.to_ascii_lowercase()),
        };
        let v: Value = SCRIPTS
            .beacon
            .key(&k.meta)
            .key(&k.drawing)
            .arg(what)
            .arg(value)
            .invoke_async(&mut self.c())
            .await?;
        let a = array(v)?;
        match status(&a, BeaconStatus::from_code) {
            Some(BeaconStatus::Set) => Ok(BeaconOutcome::Set),
            Some(BeaconStatus::NotPending) => Ok(BeaconOutcome::NotPending),
            Some(BeaconStatus::NoRound) => Ok(BeaconOutcome::NoRound),
            Some(BeaconStatus::Conflict) => Ok(BeaconOutcome::Conflict),
            None => Err(protocol(format!("beacon reply {a:?}"))),
        }
    }

    /// The entrant hashes of `q`'s last draw, in drawn order (empty before any draw): the
    /// present entrants, then the absent ones (see [`Store::drawn_groups`]).
    pub async fn drawn_entrants(&self, q: &QueueId) -> Result<Vec<EntrantHash>> {
        let (mut present, absent) = self.drawn_groups(q).await?;
        present.extend(absent);
        Ok(present)
    }

    /// The entrant hashes of `q`'s last draw in its two groups, each in drawn order: those
    /// whose browsers were there when the draw began, and those whose browsers had gone away
    /// (placed after all of them). A draw of the previous version has no absent group.
    pub async fn drawn_groups(&self, q: &QueueId) -> Result<(Vec<EntrantHash>, Vec<EntrantHash>)> {
        let k = QueueKeys::of(q);
        let (blob, absent): (Option<Vec<u8>>, Option<usize>) = redis::pipe()
            .cmd("GET")
            .arg(&k.draw)
            .cmd("HGET")
            .arg(&k.meta)
            .arg("draw_absent")
            .query_async(&mut self.c())
            .await?;
        let blob = blob.unwrap_or_default();
        if !blob.len().is_multiple_of(32) {
            return Err(protocol(format!("draw record of {} bytes", blob.len())));
        }
        let mut present: Vec<EntrantHash> = blob
            .chunks_exact(32)
            .filter_map(EntrantHash::from_bytes)
            .collect();
        let absent = absent.unwrap_or(0);
        if absent > present.len() {
            return Err(protocol(format!(
                "draw record of {} entrants with {absent} absent",
                present.len()
            )));
        }
        let absent = present.split_off(present.len() - absent);
        Ok((present, absent))
    }
}
