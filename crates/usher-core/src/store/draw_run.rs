//! Running a scheduled sale's draw, by the dispatcher holding the queue's lease: begin it
//! (`lua/draw_begin.lua`: from then on its time and beacon round are fixed), read the
//! pre-queue in pages, then apply the drawn order in steps of [`DRAW_STEP`] places
//! (`lua/draw_step.lua`) and end it (`lua/draw.lua`). No call holds Redis for long, whatever
//! the pre-queue's size.
//!
//! Every call checks (and renews) the lease, and every step appends to the record so far only
//! if it is as long as the caller expects, so a draw interrupted anywhere (a crash, a lost
//! lease, a Redis error, a request re-sent by the client) stays pending and is taken up again
//! from what Redis holds: the places still in the pre-queue and the last hash recorded
//! ([`crate::draw::Seed::order_after`]).
//!
//! The entrants come in two groups ([`Presence`]): those whose browsers were there when the
//! draw began, then those recorded away (`pre_away`, fixed as `absent` by
//! `lua/draw_begin.lua`). Each step tells how many of its hashes are absent, so the record
//! knows where the second group starts (meta `draw_absent`), and a draw taken up again knows
//! which group its last recorded entrant was in.

use redis::Value;

use super::decode::{array, status, text, u};
use super::dispatch::Lease;
use super::draw::{Beacon, DrawPhase};
use super::invocation::{Invocation, LuaScript};
use super::reply::DrawStatus;
use super::scripts::SCRIPTS;
use super::{protocol, Result, Store};
use crate::draw::{DrawnOrder, EntrantHash, Presence, Seed};
use crate::ids::{PlaceId, QueueId};
use crate::keys::QueueKeys;

/// Most places one draw step places (one `lua/draw_step.lua` call), and the pre-queue page
/// size: a few milliseconds of Redis time each, so a draw of any size never holds Redis for
/// long (BENCHMARKS.md, "Scheduled sale: the draw").
pub const DRAW_STEP: usize = 1_000;

/// Pre-queue entrants, present and absent.
type Entrants = (Vec<(EntrantHash, PlaceId)>, Vec<(EntrantHash, PlaceId)>);

/// A draw ready to run: see [`Store::prepare_draw`].
#[derive(Debug)]
pub struct DueDraw {
    pub seed: Seed,
    /// The beacon's randomness, when the sale names one.
    pub beacon: Option<Vec<u8>>,
    /// Pre-queue places with their entrant hashes whose browsers were there when the draw
    /// began, in no particular order.
    pub entrants: Vec<(EntrantHash, PlaceId)>,
    /// Those whose browsers had gone away (`pre_away`), in no particular order: drawn after
    /// every present one.
    pub absent: Vec<(EntrantHash, PlaceId)>,
    /// The last entrant recorded when the draw was interrupted between its steps: it goes on
    /// after it ([`crate::draw::Seed::order_after`]).
    pub after: Option<EntrantHash>,
    /// The group of `after`.
    pub after_group: Presence,
    /// The record's length so far, in bytes (32 per entrant recorded).
    pub recorded: u64,
}

impl DueDraw {
    /// The rest of the draw's order (all of it unless taken up again): see [`Seed::draw`].
    pub fn order(self) -> DrawnOrder<PlaceId> {
        let after = self.after.as_ref().map(|h| (self.after_group, h));
        self.seed
            .draw(self.beacon.as_deref(), self.entrants, self.absent, after)
    }
}

/// What [`Store::prepare_draw`] found.
#[derive(Debug)]
pub enum DrawPrep {
    /// No draw is pending: drawn, voided, or no sale.
    NotPending,
    /// A draw is pending but not to run now: not yet time, the named beacon's randomness
    /// not recorded yet, or the queue is closed (its draw waits until it reopens).
    NotDue,
    /// Another replica holds the queue's lease.
    LeaseLost,
    /// The schedule changed between its read and the draw's start: read it again next tick.
    Stale,
    /// Begun (now or before): run it with [`Store::run_draw`].
    Ready(DueDraw),
}

/// What [`Store::run_draw`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawOutcome {
    /// Another replica holds the queue's lease.
    LeaseLost,
    /// No draw is pending (already done, unscheduled, or the queue is closed).
    NotPending,
    /// The record is not as long as expected (a step was applied twice, or lost with a
    /// failed-over master): the draw stays pending; prepare it again.
    Stale,
    /// `drawn` places in drawn order (by this call's steps), then `after` more FIFO, from
    /// place id `first` on.
    Done { drawn: u64, after: u64, first: u64 },
}

/// What one draw script call ([`Store::draw_step`], the start or the end) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawStep {
    /// Another replica holds the queue's lease: nothing was placed.
    LeaseLost,
    /// No draw is pending (already done, unscheduled, or the queue is closed).
    NotPending,
    /// The record is not as long as the caller said, or the schedule changed: nothing was
    /// placed.
    Stale,
    /// `placed` places (those of the step still in the pre-queue) from place id `first` on.
    Placed { placed: u64, first: u64 },
}

impl Store {
    /// Gets `q`'s draw ready to run at `now_ms` under `lease` (renewed for `lease_ttl_ms`):
    /// a pending draw that is due (and whose named beacon's randomness is recorded) is begun,
    /// then its pre-queue is read. A draw begun before (by this replica or another) is
    /// always ready, whatever this replica's clock says, so a draw never stops half way.
    pub async fn prepare_draw(
        &self,
        q: &QueueId,
        lease: &Lease,
        lease_ttl_ms: u64,
        now_ms: u64,
    ) -> Result<DrawPrep> {
        let Some(fields) = self.schedule_fields(q).await? else {
            return Ok(DrawPrep::NotPending);
        };
        let (s, seed, open) = (fields.schedule, fields.seed, fields.open);
        let begun = fields.cutoff.is_some();
        if s.phase != DrawPhase::Pending {
            return Ok(DrawPrep::NotPending);
        }
        if !open {
            return Ok(DrawPrep::NotDue);
        }
        let k = QueueKeys::of(q);
        let beacon_hex = match &s.beacon {
            None => None,
            Some(Beacon {
                randomness: None, ..
            }) if !begun => return Ok(DrawPrep::NotDue),
            Some(b) => b.randomness.clone(),
        };
        if !begun && now_ms < s.opens_at_ms {
            return Ok(DrawPrep::NotDue);
        }
        let beacon = beacon_hex
            .as_deref()
            .map(|h| {
                hex::decode(h).map_err(|_| protocol(format!("queue {q}: draw_beacon is not hex")))
            })
            .transpose()?;
        let seed =
            seed.ok_or_else(|| protocol(format!("queue {q}: draw_seed is not 32 bytes of hex")))?;
        if !begun {
            let v: Value = SCRIPTS
                .draw_begin
                .key(&k.meta)
                .key(&k.drawing)
                .key(&k.lease)
                .key(&k.seq)
                .key(&k.pre_away)
                .key(&k.absent)
                .arg(&lease.value)
                .arg(lease_ttl_ms)
                .arg(now_ms)
                .arg(s.opens_at_ms)
                .arg(beacon_hex.unwrap_or_default())
                .invoke_async(&mut self.c())
                .await?;
            match draw_reply(v)? {
                DrawStep::Placed { .. } => {}
                DrawStep::LeaseLost => return Ok(DrawPrep::LeaseLost),
                DrawStep::NotPending => return Ok(DrawPrep::NotPending),
                DrawStep::Stale => return Ok(DrawPrep::Stale),
            }
        }
        let (recorded, tail, cutoff, absent_recorded): (u64, Vec<u8>, Option<u64>, Option<u64>) =
            redis::pipe()
                .cmd("STRLEN")
                .arg(&k.drawing)
                .cmd("GETRANGE")
                .arg(&k.drawing)
                .arg(-32)
                .arg(-1)
                .cmd("HGET")
                .arg(&k.meta)
                .arg("draw_cutoff")
                .cmd("HGET")
                .arg(&k.meta)
                .arg("draw_absent")
                .query_async(&mut self.c())
                .await?;
        // No cutoff: the queue was closed since the draw began (a close mid-draw drops it with
        // the record); the draw waits for the queue to reopen.
        let Some(cutoff) = cutoff else {
            return Ok(DrawPrep::NotDue);
        };
        let after = match tail.len() {
            0 => None,
            _ => Some(EntrantHash::from_bytes(&tail).ok_or_else(|| {
                protocol(format!(
                    "queue {q}: draw record ends in {} bytes",
                    tail.len()
                ))
            })?),
        };
        // Absent entrants are recorded after every present one: once any is, the last
        // recorded entrant is absent.
        let after_group = match absent_recorded {
            Some(1..) => Presence::Absent,
            _ => Presence::Present,
        };
        let (entrants, absent) = self.pre_queue_entrants(&k, cutoff).await?;
        Ok(DrawPrep::Ready(DueDraw {
            seed,
            beacon,
            entrants,
            absent,
            after,
            after_group,
            recorded,
        }))
    }

    /// The pre-queue places of `k`'s queue up to place id `cutoff` (those taken before the
    /// draw began) with an entrant hash, present and absent (in `absent`), read in pages of
    /// [`DRAW_STEP`] (by place id, then their hashes and absence), so no read holds Redis
    /// for long. The pages are not one snapshot: a
    /// place that leaves meanwhile may be read (the draw skips it); later places go FIFO
    /// behind the drawn ones.
    async fn pre_queue_entrants(&self, k: &QueueKeys, cutoff: u64) -> Result<Entrants> {
        let (mut entrants, mut absent) = (Vec::new(), Vec::new());
        let mut from = "-inf".to_string();
        loop {
            let page: Vec<Value> = redis::cmd("ZRANGEBYSCORE")
                .arg(&k.pre)
                .arg(&from)
                .arg(cutoff)
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
                return Ok((entrants, absent));
            };
            from = format!("({last}");
            let (hashes, away): (Vec<Option<Vec<u8>>>, Vec<bool>) = redis::pipe()
                .cmd("HMGET")
                .arg(&k.entrants)
                .arg(&places)
                .cmd("SMISMEMBER")
                .arg(&k.absent)
                .arg(&places)
                .query_async(&mut self.c())
                .await?;
            for ((place, hash), away) in places.iter().zip(hashes).zip(away) {
                if let Some(h) = hash.as_deref().and_then(EntrantHash::from_bytes) {
                    let group = if away { &mut absent } else { &mut entrants };
                    group.push((h, PlaceId(*place)));
                }
            }
            if places.len() < DRAW_STEP {
                return Ok((entrants, absent));
            }
        }
    }

    /// Runs a prepared draw of `q`: `order` (the rest of the drawn order, from
    /// [`DueDraw::order`]; its last `absent` entrants are absent ones) takes new places at
    /// the tail of the line in steps of [`DRAW_STEP`], each appended to the record, which
    /// holds `recorded` bytes before them;
    /// then the pre-queue places the order does not name follow, FIFO, and the draw is
    /// published. Every call checks and renews the lease (`lease_ttl_ms`).
    #[allow(clippy::too_many_arguments)]
    pub async fn run_draw(
        &self,
        q: &QueueId,
        lease: &Lease,
        lease_ttl_ms: u64,
        now_ms: u64,
        recorded: u64,
        order: &[(EntrantHash, PlaceId)],
        absent: usize,
    ) -> Result<DrawOutcome> {
        let k = QueueKeys::of(q);
        let (mut drawn, mut first, mut recorded) = (0, None, recorded);
        let absent_from = order.len().saturating_sub(absent);
        for (i, step) in order.chunks(DRAW_STEP).enumerate() {
            let end = i * DRAW_STEP + step.len();
            let step_absent = end - absent_from.clamp(i * DRAW_STEP, end);
            match self
                .draw_step_with_absent(q, lease, lease_ttl_ms, now_ms, recorded, step, step_absent)
                .await?
            {
                DrawStep::Placed { placed, first: f } => {
                    if placed > 0 {
                        first.get_or_insert(f);
                    }
                    drawn += placed;
                    recorded += 32 * step.len() as u64;
                }
                DrawStep::LeaseLost => return Ok(DrawOutcome::LeaseLost),
                DrawStep::NotPending => return Ok(DrawOutcome::NotPending),
                DrawStep::Stale => return Ok(DrawOutcome::Stale),
            }
        }
        // The end, in calls of a bounded size: see `lua/draw.lua`.
        let (mut after, mut cursor) = (0, "0".to_string());
        loop {
            let v: Value = placing(&SCRIPTS.draw, &k, lease, lease_ttl_ms, now_ms, recorded)
                .key(&k.draw)
                .key(&k.entrants)
                .key(&k.pre_away)
                .key(&k.absent)
                .key(&k.bound)
                .key(&k.record)
                .arg(&cursor)
                .invoke_async(&mut self.c())
                .await?;
            let a = array(v)?;
            let bad = || protocol(format!("draw end reply {a:?}"));
            match status(&a, DrawStatus::from_code) {
                Some(DrawStatus::More) if a.len() >= 4 => {
                    cursor = text(&a[1]).ok_or_else(bad)?;
                    let placed = u(&a[2])?;
                    if placed > 0 {
                        first.get_or_insert(u(&a[3])?);
                    }
                    after += placed;
                }
                Some(DrawStatus::Done) if a.len() >= 3 => {
                    let placed = u(&a[1])?;
                    after += placed;
                    return Ok(DrawOutcome::Done {
                        drawn,
                        after,
                        first: first.unwrap_or(u(&a[2])?),
                    });
                }
                Some(DrawStatus::LeaseLost) => return Ok(DrawOutcome::LeaseLost),
                Some(DrawStatus::NotPending) => return Ok(DrawOutcome::NotPending),
                Some(DrawStatus::Stale) => return Ok(DrawOutcome::Stale),
                _ => return Err(bad()),
            }
        }
    }

    /// One step of [`Store::run_draw`]: `step` (at most [`DRAW_STEP`] entrants, the next ones
    /// in drawn order, all present) takes places at the tail of the line and is appended to
    /// the record, if the record holds `recorded` bytes (`lua/draw_step.lua`). The draw
    /// stays pending.
    pub async fn draw_step(
        &self,
        q: &QueueId,
        lease: &Lease,
        lease_ttl_ms: u64,
        now_ms: u64,
        recorded: u64,
        step: &[(EntrantHash, PlaceId)],
    ) -> Result<DrawStep> {
        self.draw_step_with_absent(q, lease, lease_ttl_ms, now_ms, recorded, step, 0)
            .await
    }

    /// [`Store::draw_step`] whose last `absent` entrants are absent ones (counted in meta
    /// `draw_absent`, so the record knows where its absent group starts).
    #[allow(clippy::too_many_arguments)]
    pub async fn draw_step_with_absent(
        &self,
        q: &QueueId,
        lease: &Lease,
        lease_ttl_ms: u64,
        now_ms: u64,
        recorded: u64,
        step: &[(EntrantHash, PlaceId)],
        absent: usize,
    ) -> Result<DrawStep> {
        if step.len() > DRAW_STEP {
            return Err(protocol(format!(
                "a draw step places at most {DRAW_STEP} entrants, not {}",
                step.len()
            )));
        }
        let k = QueueKeys::of(q);
        let ids = step
            .iter()
            .map(|(_, p)| p.0.to_string())
            .collect::<Vec<_>>()
            .join(",");
        let blob: Vec<u8> = step.iter().flat_map(|(h, _)| h.0).collect();
        let v: Value = placing(
            &SCRIPTS.draw_step,
            &k,
            lease,
            lease_ttl_ms,
            now_ms,
            recorded,
        )
        .key(&k.bound)
        .key(&k.record)
        .arg(ids)
        .arg(blob)
        .arg(absent)
        .invoke_async(&mut self.c())
        .await?;
        draw_reply(v)
    }
}

/// A call of `script` (`draw_step.lua` or `draw.lua`) with what both take first: the keys
/// `place_drawn` (prelude.lua) and the record need, the lease (checked and renewed for
/// `lease_ttl_ms`), the time and the record's expected length.
fn placing<'a>(
    script: &'a LuaScript,
    k: &QueueKeys,
    lease: &Lease,
    lease_ttl_ms: u64,
    now_ms: u64,
    recorded: u64,
) -> Invocation<'a> {
    let mut inv = script.key(&k.meta);
    inv.key(&k.seq)
        .key(&k.pre)
        .key(&k.waiting)
        .key(&k.away)
        .key(&k.drawn)
        .key(&k.drawing)
        .key(&k.lease)
        .arg(&lease.value)
        .arg(lease_ttl_ms)
        .arg(now_ms)
        .arg(recorded);
    inv
}

fn draw_reply(v: Value) -> Result<DrawStep> {
    let a = array(v)?;
    match status(&a, DrawStatus::from_code) {
        Some(DrawStatus::LeaseLost) => Ok(DrawStep::LeaseLost),
        Some(DrawStatus::NotPending) => Ok(DrawStep::NotPending),
        Some(DrawStatus::Stale) => Ok(DrawStep::Stale),
        Some(DrawStatus::Done) if a.len() >= 3 => Ok(DrawStep::Placed {
            placed: u(&a[1])?,
            first: u(&a[2])?,
        }),
        _ => Err(protocol(format!("draw reply {a:?}"))),
    }
}
