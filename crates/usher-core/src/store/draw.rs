//! A scheduled sale in Redis: its schedule (the admin API), its entrants' hashes (the
//! gateways, as they hand out pre-queue tickets), the draw (the dispatcher holding the
//! queue's lease) and the published result (the gateways' `GET /api/queues/{q}/draw`).

use redis::Value;

use super::decode::{array, status, text, u};
use super::dispatch::Lease;
use super::reply::{BeaconStatus, DrawStatus, ScheduleStatus};
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

/// A draw that is due: see [`Store::due_draw`].
#[derive(Debug)]
pub struct DueDraw {
    pub seed: Seed,
    /// The beacon's randomness, when the sale names one.
    pub beacon: Option<Vec<u8>>,
    /// Pre-queue places with their entrant hashes, in no particular order.
    pub entrants: Vec<(EntrantHash, PlaceId)>,
    /// The last entrant recorded when a draw was interrupted between its steps (a crash, a
    /// lost lease, a Redis error): the draw goes on after it ([`crate::draw::Seed::order_after`]).
    pub after: Option<EntrantHash>,
}

/// Most places one draw step places (one `lua/draw_step.lua` call): a few milliseconds of
/// Redis time, so a draw of any size never holds Redis for long (BENCHMARKS.md, "Scheduled
/// sale: the draw").
pub const DRAW_STEP: usize = 1_000;

/// What [`Store::run_draw`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawOutcome {
    /// Another replica holds the queue's lease.
    LeaseLost,
    /// No draw is pending (already done, unscheduled, or the queue is closed).
    NotPending,
    /// `drawn` places in drawn order, then `after` more FIFO, from place id `first` on.
    Done { drawn: u64, after: u64, first: u64 },
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
        let k = QueueKeys::new(q);
        let v: Value = SCRIPTS
            .schedule
            .key(&k.meta)
            .key(&k.pre)
            .key(&k.entrants)
            .key(&k.drawn)
            .key(&k.draw)
            .key(&k.drawing)
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
        Ok(self.schedule_fields(q).await?.map(|(mut s, _, _)| {
            if s.phase == DrawPhase::Pending {
                s.seed = None;
            }
            s
        }))
    }

    /// The schedule with its seed, secret or not (for the draw), and whether the queue is open.
    async fn schedule_fields(&self, q: &QueueId) -> Result<Option<(Schedule, Option<Seed>, bool)>> {
        let k = QueueKeys::new(q);
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
        );
        let (open, at, phase, seed, commitment, round, randomness, void, void_commitment): Fields =
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
        Ok(Some((
            Schedule {
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
            parsed,
            open.as_deref() == Some("1"),
        )))
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
        let k = QueueKeys::new(q);
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
        let k = QueueKeys::new(q);
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

    /// A pending draw of `q` that is due at `now_ms`: its seed, the beacon's randomness (when
    /// the sale names a round) and its entrants (pre-queue places with an entrant hash).
    /// `None` when no draw is pending, it is not yet time, or the named beacon's randomness
    /// is not recorded yet.
    pub async fn due_draw(&self, q: &QueueId, now_ms: u64) -> Result<Option<DueDraw>> {
        let Some((s, seed, open)) = self.schedule_fields(q).await? else {
            return Ok(None);
        };
        // A closed queue's draw waits until it reopens (draw.lua would refuse it).
        if s.phase != DrawPhase::Pending || now_ms < s.opens_at_ms || !open {
            return Ok(None);
        }
        let beacon = match s.beacon {
            None => None,
            Some(Beacon {
                randomness: None, ..
            }) => return Ok(None),
            Some(Beacon {
                randomness: Some(hex),
                ..
            }) => Some(
                hex::decode(&hex)
                    .map_err(|_| protocol(format!("queue {q}: draw_beacon is not hex")))?,
            ),
        };
        let seed =
            seed.ok_or_else(|| protocol(format!("queue {q}: draw_seed is not 32 bytes of hex")))?;
        let k = QueueKeys::new(q);
        let recorded: Vec<u8> = redis::cmd("GETRANGE")
            .arg(&k.drawing)
            .arg(-32)
            .arg(-1)
            .query_async(&mut self.c())
            .await?;
        let after = match recorded.len() {
            0 => None,
            _ => Some(EntrantHash::from_bytes(&recorded).ok_or_else(|| {
                protocol(format!(
                    "queue {q}: draw record ends in {} bytes",
                    recorded.len()
                ))
            })?),
        };
        let entrants = self.pre_queue_entrants(&k).await?;
        Ok(Some(DueDraw {
            seed,
            beacon,
            entrants,
            after,
        }))
    }

    /// The pre-queue places of `k`'s queue with an entrant hash, read in pages of
    /// [`DRAW_STEP`] (by place id, then their hashes), so no read holds Redis for long. The
    /// pages are not one snapshot: a place that joins meanwhile may be missed (the draw puts
    /// it FIFO behind the drawn ones) and one that leaves may be read (the draw skips it).
    async fn pre_queue_entrants(&self, k: &QueueKeys) -> Result<Vec<(EntrantHash, PlaceId)>> {
        let mut entrants = Vec::new();
        let mut from = "-inf".to_string();
        loop {
            let page: Vec<Value> = redis::cmd("ZRANGEBYSCORE")
                .arg(&k.pre)
                .arg(&from)
                .arg("+inf")
                .arg("WITHSCORES")
                .arg("LIMIT")
                .arg(0)
                .arg(DRAW_STEP)
                .query_async(&mut self.c())
                .await?;
            let places = page
                .iter()
                .skip(1)
                .step_by(2)
                .map(|score| {
                    text(score)
                        .and_then(|t| t.parse::<u64>().ok())
                        .ok_or_else(|| protocol(format!("pre-queue score {score:?}")))
                })
                .collect::<Result<Vec<u64>>>()?;
            let Some(last) = places.last() else {
                return Ok(entrants);
            };
            from = format!("({last}");
            let hashes: Vec<Option<Vec<u8>>> = redis::cmd("HMGET")
                .arg(&k.entrants)
                .arg(&places)
                .query_async(&mut self.c())
                .await?;
            for (place, hash) in places.iter().zip(hashes) {
                if let Some(h) = hash.as_deref().and_then(EntrantHash::from_bytes) {
                    entrants.push((h, PlaceId(*place)));
                }
            }
            if places.len() < DRAW_STEP {
                return Ok(entrants);
            }
        }
    }

    /// Runs the draw of `q`: `order` (entrant hashes and pre-queue places, in drawn order)
    /// takes new places at the tail of the line in steps of [`DRAW_STEP`]
    /// (`lua/draw_step.lua`), then the pre-queue places it does not name follow and the draw
    /// is published (`lua/draw.lua`). Every call checks the lease; an interrupted draw stays
    /// pending, and the next call (by this replica or another) goes on where it stopped.
    pub async fn run_draw(
        &self,
        q: &QueueId,
        lease: &Lease,
        now_ms: u64,
        order: &[(EntrantHash, PlaceId)],
    ) -> Result<DrawOutcome> {
        let k = QueueKeys::new(q);
        let (mut drawn, mut first) = (0, None);
        for step in order.chunks(DRAW_STEP) {
            match self.draw_step(q, lease, now_ms, step).await? {
                DrawStep::Placed { placed, first: f } => {
                    if placed > 0 {
                        first.get_or_insert(f);
                    }
                    drawn += placed;
                }
                DrawStep::LeaseLost => return Ok(DrawOutcome::LeaseLost),
                DrawStep::NotPending => return Ok(DrawOutcome::NotPending),
            }
        }
        let v: Value = SCRIPTS
            .draw
            .key(&k.meta)
            .key(&k.seq)
            .key(&k.pre)
            .key(&k.waiting)
            .key(&k.away)
            .key(&k.drawn)
            .key(&k.draw)
            .key(&k.entrants)
            .key(&k.lease)
            .key(&k.drawing)
            .arg(&lease.value)
            .arg(now_ms)
            .invoke_async(&mut self.c())
            .await?;
        match draw_reply(v)? {
            DrawStep::Placed { placed, first: f } => Ok(DrawOutcome::Done {
                drawn,
                after: placed,
                first: first.unwrap_or(f),
            }),
            DrawStep::LeaseLost => Ok(DrawOutcome::LeaseLost),
            DrawStep::NotPending => Ok(DrawOutcome::NotPending),
        }
    }

    /// One step of [`Store::run_draw`]: `step` (at most [`DRAW_STEP`] entrants, the next ones
    /// in drawn order) takes places at the tail of the line and is appended to the record so
    /// far (`lua/draw_step.lua`). The draw stays pending.
    pub async fn draw_step(
        &self,
        q: &QueueId,
        lease: &Lease,
        now_ms: u64,
        step: &[(EntrantHash, PlaceId)],
    ) -> Result<DrawStep> {
        if step.len() > DRAW_STEP {
            return Err(protocol(format!(
                "a draw step places at most {DRAW_STEP} entrants, not {}",
                step.len()
            )));
        }
        let k = QueueKeys::new(q);
        let ids = step
            .iter()
            .map(|(_, p)| p.0.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let blob: Vec<u8> = step.iter().flat_map(|(h, _)| h.0).collect();
        let v: Value = SCRIPTS
            .draw_step
            .key(&k.meta)
            .key(&k.seq)
            .key(&k.pre)
            .key(&k.waiting)
            .key(&k.away)
            .key(&k.drawn)
            .key(&k.drawing)
            .key(&k.lease)
            .arg(&lease.value)
            .arg(now_ms)
            .arg(ids)
            .arg(blob)
            .invoke_async(&mut self.c())
            .await?;
        draw_reply(v)
    }

    /// The entrant hashes of `q`'s last draw, in drawn order (empty before any draw).
    pub async fn drawn_entrants(&self, q: &QueueId) -> Result<Vec<EntrantHash>> {
        let k = QueueKeys::new(q);
        let blob: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&k.draw)
            .query_async(&mut self.c())
            .await?;
        let blob = blob.unwrap_or_default();
        if !blob.len().is_multiple_of(32) {
            return Err(protocol(format!("draw record of {} bytes", blob.len())));
        }
        Ok(blob
            .chunks_exact(32)
            .filter_map(EntrantHash::from_bytes)
            .collect())
    }
}

/// What one draw script call ([`Store::draw_step`], or the draw's end) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawStep {
    /// Another replica holds the queue's lease: nothing was placed.
    LeaseLost,
    /// No draw is pending (already done, unscheduled, or the queue is closed).
    NotPending,
    /// `placed` places (those of the step still in the pre-queue) from place id `first` on.
    Placed { placed: u64, first: u64 },
}

fn draw_reply(v: Value) -> Result<DrawStep> {
    let a = array(v)?;
    match status(&a, DrawStatus::from_code) {
        Some(DrawStatus::LeaseLost) => Ok(DrawStep::LeaseLost),
        Some(DrawStatus::NotPending) => Ok(DrawStep::NotPending),
        Some(DrawStatus::Done) if a.len() >= 3 => Ok(DrawStep::Placed {
            placed: u(&a[1])?,
            first: u(&a[2])?,
        }),
        _ => Err(protocol(format!("draw reply {a:?}"))),
    }
}
