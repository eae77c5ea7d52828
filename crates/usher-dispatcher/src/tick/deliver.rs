//! Outbox delivery: a tick's admissions go to the gateways holding their browsers, then their
//! token records are stored and their outbox entries removed.
//!
//! Entries leave the outbox only after their messages were written, so a crash in between
//! re-sends them with the very same (deterministic) tokens; gateways ignore admissions for
//! places they no longer hold.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use usher_core::ids::{PlaceId, QueueId, ServerId};
use usher_core::messages::{Admission, StreamMessage};
use usher_core::store::{
    GatewayInfo, Lease, OutboxEntry, OutboxList, Store, StoreError, Tick, TickArgs, TickOutcome,
    TokenRecord,
};
use usher_mint::token::SigningKey;

use super::gateways::{in_messages, live_at};
use super::timing::{records_delay, sleep_until_ms};
use super::tokens::TickTokens;

/// How a delivery ended.
pub(super) enum Delivery {
    /// This many admissions were sent and recorded.
    Done(u64),
    /// As `Done`, but the queue was closed between two calls of the tick.
    Closed(u64),
    /// The lease was lost: stop driving the queue. What was admitted is sent (at its
    /// admission time) and stays in the outbox, for the next holder to deliver again with the
    /// same tokens (a gateway ignores an admission for a place it admitted already).
    LeaseLost,
}

/// Delivers one queue's admissions at one tick.
pub(super) struct Courier<'a> {
    pub(super) store: &'a Store,
    pub(super) key: &'a Arc<SigningKey>,
    /// The gateway registry as this tick read it.
    pub(super) gateways: &'a [GatewayInfo],
    pub(super) q: &'a QueueId,
    pub(super) lease: &'a Lease,
    /// The tick's admission time (for a passthrough delivery: now).
    pub(super) now: u64,
    /// Which list the admissions come from.
    pub(super) list: OutboxList,
    /// The clock the token records' delay is timed on (the admitter's).
    pub(super) clock: &'a dyn usher_core::time::Clock,
    /// The longest the token records wait after `now` (`timing::records_delay` says how long
    /// for a given burst): `timing::token_store_delay` for a tick, nothing for the few
    /// admissions of passthrough joins.
    pub(super) store_delay: Duration,
    /// Admissions over every queue at the last tick: the delay fits the larger of that burst
    /// and this queue's own, so a small queue's state does not land in a big queue's burst.
    pub(super) burst: u64,
    /// The longest admissions made ahead of their admission time wait for it
    /// (`timing::admit_lead_cap`): a wall clock stepped back must not hold them.
    pub(super) ahead_cap: Duration,
}

/// Places the tick's first script call admits at most; the next calls admit
/// [`usher_core::store::ADMIT_PER_CALL`] each. It matters when the calls outrun the lead
/// (`timing::admit_lead`: a queue just taken over, a burst past the cap): then each call's
/// admissions go as it returns, and until the first call's reach the gateways nothing is
/// delivered; the gateways' writes (with the browsers' reads) are what bounds a burst, so a
/// short first call sets them working a few milliseconds sooner, and by the time they are
/// through it the next call's thousand are on their way. Short enough for that, long enough
/// that a small tick (most ticks) stays one call.
pub(super) const FIRST_CALL: u64 = 250;

/// Outbox entries (of up to 1,000 admissions each) read back and delivered per round.
const OUTBOX_BATCH: usize = 10;
/// Places per `admitted_staged` stream entry (place ids only).
const STAGED_PLACES_PER_MESSAGE: usize = 5_000;

/// The admissions one tick call returned.
#[derive(Default)]
struct Fresh {
    admissions: Vec<OutboxEntry>,
    /// Outbox entries they fill (the last ones).
    entries: u64,
}

impl Fresh {
    /// Appends `later`'s admissions (the tick's next call) to these.
    fn absorb(&mut self, later: Fresh) {
        self.admissions.extend(later.admissions);
        self.entries += later.entries;
    }
}

/// Admissions ready to send: stream messages by gateway stream, and the token records to
/// store once they are sent.
struct Ready {
    batches: Vec<(ServerId, Vec<StreamMessage>)>,
    records: Vec<(PlaceId, TokenRecord)>,
}

/// Admissions sent whose outbox entries are not removed yet.
#[derive(Default)]
struct Unrecorded {
    records: Vec<(PlaceId, TokenRecord)>,
    /// Outbox entries they fill.
    entries: u64,
}

impl Courier<'_> {
    /// Delivers a tick's admissions, starting from its first call's outcome `out`, and admits
    /// the rest of the tick's budget on the way. On return `out` is the last call's outcome
    /// with the whole tick's admitted and dropped counts.
    pub(super) async fn deliver_tick(
        &self,
        tokens: &mut TickTokens,
        args: &TickArgs<'_>,
        out: &mut TickOutcome,
    ) -> Result<Delivery, StoreError> {
        self.drain(tokens, Some((args, out)), 0).await
    }

    /// Delivers the first `outbox_len` entries of the courier's list without admitting (a
    /// closed queue's outbox, or the admissions of passthrough joins).
    pub(super) async fn deliver_outbox(&self, outbox_len: u64) -> Result<Delivery, StoreError> {
        self.drain(&mut TickTokens::default(), None, outbox_len)
            .await
    }

    /// The drain loop. Each round sends one batch of admissions, from one of two places:
    ///
    /// * Entries older than the tick's (left by a crash or a failed delivery), read back
    ///   from the outbox, oldest first. A read starts at the outbox's head, so each round
    ///   is recorded (and so removed) before the next read.
    /// * The admissions a tick call returned (when nothing older is waiting). While the
    ///   tick's budget has more, the next [`usher_core::store::ADMIT_PER_CALL`] places are
    ///   admitted (the same admission time). Ahead of the admission time the admissions are
    ///   held and the next call made; at the admission time everything held goes at once, and
    ///   past it each call's admissions go as it returns, so the first browsers hear of their
    ///   admission while Redis admits the next ones. These are at the outbox's tail: recorded
    ///   together once everything is sent. Read-back entries, too, reach no gateway before
    ///   their admission time (this tick's first call may be among them).
    ///   The next call is made only once the XADDs are answered, not pipelined behind them:
    ///   Redis writes the gateways' blocked `XREADGROUP` replies between two turns of its
    ///   event loop, so a script call read in the same turn as the XADDs would hold their
    ///   delivery for its whole run.
    ///
    /// `calls`: the tick (its arguments and its last call's outcome); `None` for a closed
    /// queue, which admits no more. `read_back`: how many outbox entries to read back first.
    async fn drain(
        &self,
        tokens: &mut TickTokens,
        mut calls: Option<(&TickArgs<'_>, &mut TickOutcome)>,
        mut read_back: u64,
    ) -> Result<Delivery, StoreError> {
        let mut delivered = 0;
        let mut unrecorded = Unrecorded::default();
        let mut fresh = Fresh::default();
        // Admissions made ahead of the admission time, held until it (not sent, not recorded).
        let mut ahead = Fresh::default();
        if let Some((_, out)) = calls.as_mut() {
            (read_back, fresh) = arrivals(out, unrecorded.entries);
        }
        let mut closed = false;
        loop {
            if read_back > 0 {
                let (entries, batch) = self.store.outbox(self.q, self.list, OUTBOX_BATCH).await?;
                if entries == 0 {
                    read_back = 0;
                    continue;
                }
                // (This tick's own entries may be among them, stamped ahead.)
                let records = self.send_when_due(&batch, tokens).await?;
                if !self.record(&records, entries).await? {
                    return Ok(Delivery::LeaseLost);
                }
                delivered += batch.len() as u64;
                read_back = read_back.saturating_sub(entries);
                continue;
            }
            ahead.absorb(std::mem::take(&mut fresh));
            let more = calls.as_ref().is_some_and(|(_, out)| out.more);
            // Ahead of the admission time, the tick's next call comes first; the admissions
            // go at the admission time, all at once (`timing::admit_lead`).
            let early = more && self.clock.now_ms() < self.now;
            if !early {
                self.send_at_admission(std::mem::take(&mut ahead), tokens, &mut unrecorded)
                    .await?;
            }
            let Some((args, out)) = calls.as_mut() else {
                break;
            };
            if !out.more {
                break;
            }
            let began = std::time::Instant::now();
            let called = match self.store.tick(self.q, args).await {
                Ok(c) => c,
                Err(e) => {
                    // What the calls before admitted still goes (the outbox keeps it, and its
                    // record, for the next tick to store).
                    let _ = self.send_at_admission(ahead, tokens, &mut unrecorded).await;
                    return Err(e);
                }
            };
            tracing::debug!(
                call_us = began.elapsed().as_micros() as u64,
                since_admission_ms = self.since_admission_ms(),
                "tick call"
            );
            match called {
                Tick::Ticked(mut next) => {
                    next.admitted += out.admitted;
                    next.dropped += out.dropped;
                    // lanes: each lane's admissions over the tick's calls.
                    for l in &mut next.lanes {
                        let before = out.lanes.iter().find(|p| p.name == l.name);
                        l.admitted += before.map_or(0, |p| p.admitted);
                    }
                    **out = next;
                    (read_back, fresh) = arrivals(out, unrecorded.entries + ahead.entries);
                }
                Tick::Closed { .. } => {
                    // What was admitted is still sent and recorded below.
                    closed = true;
                    break;
                }
                Tick::LeaseLost => {
                    // Admitted before the lease was lost: sent with the tokens the next holder
                    // would send again (the outbox keeps the entries; their records are its).
                    self.send_at_admission(ahead, tokens, &mut unrecorded)
                        .await?;
                    return Ok(Delivery::LeaseLost);
                }
            }
        }
        // Closed between two calls made ahead: what they admitted still goes.
        self.send_at_admission(ahead, tokens, &mut unrecorded)
            .await?;
        tokens.stop_minting();
        if unrecorded.entries > 0 && !self.record(&unrecorded.records, unrecorded.entries).await? {
            return Ok(Delivery::LeaseLost);
        }
        delivered += unrecorded.records.len() as u64;
        Ok(if closed {
            Delivery::Closed(delivered)
        } else {
            Delivery::Done(delivered)
        })
    }

    /// Sends `batch` (admissions of the tick's calls, stamped with its admission time) when
    /// due; their records join `unrecorded`.
    async fn send_at_admission(
        &self,
        batch: Fresh,
        tokens: &mut TickTokens,
        unrecorded: &mut Unrecorded,
    ) -> Result<(), StoreError> {
        if batch.admissions.is_empty() {
            return Ok(());
        }
        unrecorded.entries += batch.entries;
        let sent = self.send_when_due(&batch.admissions, tokens).await?;
        unrecorded.records.extend(sent);
        Ok(())
    }

    /// Sends `entries` to the gateways holding their browsers when they are due: none before
    /// its admission time (a token is valid from then on), waiting at most
    /// [`Courier::ahead_cap`]. Tokens and messages are made first, so that at the admission
    /// time only the writes remain. Returns the token records to store.
    async fn send_when_due(
        &self,
        entries: &[OutboxEntry],
        tokens: &mut TickTokens,
    ) -> Result<Vec<(PlaceId, TokenRecord)>, StoreError> {
        let due = entries.iter().map(|e| e.admitted_at_ms).max().unwrap_or(0);
        let ready = self.prepare(entries, tokens).await?;
        sleep_until_ms(self.clock, due, self.ahead_cap.as_millis() as u64).await;
        let began = std::time::Instant::now();
        let sent = self.transmit(ready).await?;
        // Where a burst's time goes (`RUST_LOG=usher_dispatcher=debug`).
        tracing::debug!(
            places = entries.len(),
            send_us = began.elapsed().as_micros() as u64,
            since_admission_ms = self.since_admission_ms(),
            "admissions sent"
        );
        Ok(sent)
    }

    /// Milliseconds since the admission time (negative ahead of it), for the debug events.
    fn since_admission_ms(&self) -> i64 {
        self.clock.now_ms() as i64 - self.now as i64
    }

    /// The stream messages that send `entries` (their tokens taken from the pre-mint or
    /// minted now), and the token records to store once they are sent.
    async fn prepare(
        &self,
        entries: &[OutboxEntry],
        tokens: &mut TickTokens,
    ) -> Result<Ready, StoreError> {
        let q = self.q;
        // Alive by the wall clock, as the tick script judges them, not at an admission time
        // still ahead.
        let live = live_at(self.gateways, self.clock.now_ms().min(self.now));
        let mut minted = tokens.take_for(self.store, self.key, q, entries).await?;
        let mut records = Vec::with_capacity(entries.len());
        let mut by_gateway: HashMap<u16, Vec<Admission>> = HashMap::new();
        // Places whose tokens the gateway already has: by gateway and (admitted, expires).
        let mut staged: HashMap<u16, HashMap<(u64, u64), Vec<PlaceId>>> = HashMap::new();
        for e in entries {
            let Some(pre) = minted.remove(&e.place) else {
                continue;
            };
            if pre.staged_on == Some(e.gateway) {
                staged
                    .entry(e.gateway)
                    .or_default()
                    .entry((e.admitted_at_ms, e.expires_at_ms))
                    .or_default()
                    .push(e.place);
            } else {
                by_gateway.entry(e.gateway).or_default().push(Admission {
                    place: e.place,
                    token: pre.token.clone(),
                    admitted_at_ms: e.admitted_at_ms,
                    expires_at_ms: e.expires_at_ms,
                });
            }
            records.push((
                e.place,
                TokenRecord {
                    admitted_at_ms: e.admitted_at_ms,
                    expires_at_ms: e.expires_at_ms,
                    token: pre.token,
                },
            ));
        }
        let mut messages: HashMap<u16, Vec<StreamMessage>> = HashMap::new();
        for (gw, groups) in staged {
            let msgs = messages.entry(gw).or_default();
            for ((at, exp), places) in groups {
                msgs.extend(places.chunks(STAGED_PLACES_PER_MESSAGE).map(|c| {
                    StreamMessage::AdmittedStaged {
                        queue: q.clone(),
                        admitted_at_ms: at,
                        expires_at_ms: exp,
                        places: c.to_vec(),
                    }
                }));
            }
        }
        for (gw, items) in by_gateway {
            messages
                .entry(gw)
                .or_default()
                .extend(in_messages(&items, |items| StreamMessage::Admitted {
                    queue: q.clone(),
                    items,
                }));
        }
        let mut batches = Vec::new();
        for (gw, msgs) in messages {
            let Some(id) = live.get(&gw) else {
                // The gateway is gone; its browsers reconnect elsewhere and find their
                // token in Redis.
                tracing::debug!(queue = %q, gateway = gw, "admissions for a gateway that is gone");
                continue;
            };
            batches.push(((*id).clone(), msgs));
        }
        Ok(Ready { batches, records })
    }

    /// Writes prepared messages to the gateways' streams; returns their token records.
    async fn transmit(&self, ready: Ready) -> Result<Vec<(PlaceId, TokenRecord)>, StoreError> {
        // Within the tick's span: the entries carry its trace context to the gateways.
        let traceparent = usher_runtime::traces::traceparent(&tracing::Span::current());
        self.store
            .send_traced(&ready.batches, traceparent.as_deref())
            .await?;
        Ok(ready.records)
    }

    /// After the browsers were sent their admissions: stores the token records (for resumes)
    /// and removes the first `entries` outbox entries. `false` when the lease was lost.
    async fn record(
        &self,
        records: &[(PlaceId, TokenRecord)],
        entries: u64,
    ) -> Result<bool, StoreError> {
        // Tokens are stored only for sessions that still exist; a place that left meanwhile
        // has no open stream, so its message reaches nobody, and its ticket no longer resumes.
        // The records serve resumes only: written a moment later, so Redis is not busy storing
        // a large tick's records (megabytes) while gateways deliver the admissions (a resume
        // meanwhile waits for them). The moment is fixed from the tick's admission time, not
        // from this call: the queues of a tick handled after others (and the later rounds of
        // a backlog) do not wait again, so the wait holds no queue slot beyond it. Never longer
        // than the delay itself: a wall clock stepped back must not hold the tick. The delay
        // fits the burst (this queue's, or every queue's at the last tick, the larger): a few
        // admissions wait (and hold the state back) for next to nothing.
        let burst = records
            .len()
            .max(usize::try_from(self.burst).unwrap_or(usize::MAX));
        let delay = records_delay(self.store_delay, burst).as_millis() as u64;
        sleep_until_ms(self.clock, self.now + delay, delay).await;
        if self
            .store
            .store_tokens(self.q, self.lease, records)
            .await?
            .is_none()
        {
            return Ok(false);
        }
        self.store
            .trim_outbox(self.q, self.list, self.lease, entries)
            .await
    }
}

/// What one tick call's reply `out` leaves to deliver: outbox entries to read back, when
/// older ones wait ahead of the reply's own (these are read back with them), or else the
/// reply's admissions. `unrecorded`: entries this tick already sent, not yet removed (the
/// outbox holds them ahead of the reply's, but they are not older than the tick).
fn arrivals(out: &mut TickOutcome, unrecorded: u64) -> (u64, Fresh) {
    let admissions = std::mem::take(&mut out.fresh);
    if unrecorded == 0 && out.outbox_len > out.fresh_entries {
        (out.outbox_len, Fresh::default())
    } else {
        let entries = out.fresh_entries;
        (
            0,
            Fresh {
                admissions,
                entries,
            },
        )
    }
}
