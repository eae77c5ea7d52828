//! Joins, batched per queue (and lane: a join call takes places in one lane).
//!
//! While a join call for a queue is under way, the joins that arrive for that queue wait, and
//! then go to Redis together as one call that takes all their places, in arrival order
//! ([`usher_core::store::Store::join_many`]). The calls are made by a task per queue, spawned
//! by the join that finds none under way: it runs after the connections already runnable on
//! this thread, so a burst read in one wake-up goes in its first call. Nothing waits for a
//! timer: at low load every join is its own call, and under a burst (or behind a slow Redis,
//! or after the machine stalled) the batches grow by themselves, so the cost per join, in
//! Redis and here, falls exactly when the gateway is busiest. A hot queue's joins all land in
//! one Redis slot, so this is also what lifts one queue's ceiling, which a cluster cannot.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::ticket::Ticket;
use crate::ticket::TicketKey;
use tokio::sync::oneshot;
use usher_core::binding::Thumbprint;
use usher_core::challenge::{Proof, Refusal};
use usher_core::draw::EntrantHash;
use usher_core::ids::{PlaceId, QueueId};
use usher_core::lanes::LaneName;
use usher_core::record::JoinNote;
use usher_core::store::{JoinBatch, Joined, PlaceState, Store, StoreError, JOIN_BATCH_MAX};
use usher_core::time::now_ms;

use crate::away::Away;
use crate::errors::logged;

/// Joins this gateway takes places for, batched per queue. Cheap to clone (one shared state).
#[derive(Clone)]
pub(crate) struct Joiner {
    shared: Arc<Shared>,
}

/// Why a join got no answer from Redis; the browser is told to try later.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum JoinError {
    /// Redis failed the join call. Every join waiting for the queue gets this same error.
    #[error(transparent)]
    Store(Arc<StoreError>),
    /// The call this join waited for will not come (the process is stopping).
    #[error("the join call was abandoned")]
    Abandoned,
    /// The queue asks a proof of work, and this join's was missing, too easy or spent: it
    /// took no place.
    #[error("the proof of work was refused: {0:?}")]
    Refused(Refusal),
}

/// A join's answer.
type Reply = Result<PlaceState, JoinError>;

/// A join waiting for the next call: its proof of work, its browser key (in a queue that
/// binds places to it), and where its answer goes.
type Waiter = (Join, oneshot::Sender<Reply>);

/// What one join brings: its checked proof of work and browser key, when it has them, and
/// the lane it joins.
#[derive(Debug, Clone, Default)]
pub(crate) struct Join {
    pub(crate) pow: Option<Proof>,
    pub(crate) key: Option<Thumbprint>,
    /// The lane (`None`: the queue's default lane; `crate::lanes` says where it comes from).
    pub(crate) lane: Option<LaneName>,
    /// What a recording queue's record keeps of it (its hashed network, its proof's solve
    /// time); the default for other queues.
    pub(crate) note: JoinNote,
}

/// What joins are batched by: their queue and lane.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Line {
    q: QueueId,
    lane: Option<LaneName>,
}

struct Shared {
    store: Store,
    /// This gateway's index: the places taken are held here.
    index: Arc<AtomicU16>,
    /// Signs tickets: a pre-queue place's entrant hash is that of its ticket.
    ticket_key: TicketKey,
    /// Where a place goes whose request vanished before it came back.
    away: Arc<Away>,
    /// The queues (and lanes) with a join call under way, and the joins waiting for the next.
    queues: Mutex<HashMap<Line, Vec<Waiter>>>,
}

impl Joiner {
    pub(crate) fn new(
        store: Store,
        index: Arc<AtomicU16>,
        away: Arc<Away>,
        ticket_key: TicketKey,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                store,
                index,
                ticket_key,
                away,
                queues: Mutex::default(),
            }),
        }
    }

    /// Takes a new place in `q` for a browser held here; in a proof-of-work queue only with
    /// a proof that is good and not spent yet. A browser key is recorded with the place.
    ///
    /// Every join waits for its answer from the task that drives its queue's calls. The join
    /// that finds no call under way spawns that task. On a one-thread runtime
    /// (`USHER_WORKER_THREADS=1`, as `make bench` runs its gateways) the task runs after the
    /// connections already runnable, so the joins they carry (a burst read in one wake-up) go
    /// in its first call, not one call for the first join and another for the rest (a third to
    /// a half fewer Redis calls under load; BENCHMARKS.md, "Where the time goes"); the price is
    /// that the first join waits that one pass of the run queue. A multi-thread runtime runs a
    /// task spawned on a worker next (tokio's LIFO slot), so there the batches grow as before.
    /// Either way the call runs in a task of its own, which marks away the place of a request
    /// that went away meanwhile.
    pub(crate) async fn join(&self, q: &QueueId, proof: Join) -> Reply {
        let line = Line {
            q: q.clone(),
            lane: proof.lane.clone(),
        };
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut queues = self.shared.lock();
            match queues.get_mut(&line) {
                Some(waiters) => {
                    waiters.push((proof, tx));
                    None
                }
                None => {
                    queues.insert(line.clone(), vec![(proof, tx)]);
                    Some(line)
                }
            }
        };
        if let Some(line) = start {
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => {
                    // The guard goes in with the task, so a task dropped before it first runs
                    // (the runtime stopping) still answers its joins "try later".
                    let clear = Clear {
                        shared: self.shared.clone(),
                        q: line,
                        armed: true,
                    };
                    rt.spawn(drive(clear));
                }
                // No runtime (the process is stopping): the join's request ends with it.
                Err(_) => {
                    self.shared.lock().remove(&line);
                }
            }
        }
        rx.await.unwrap_or(Err(JoinError::Abandoned))
    }
}

/// The `i`-th join's answer from its batch's call.
fn answer(b: &JoinBatch, i: usize) -> Reply {
    b.outcome(i).map_err(JoinError::Refused)
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<Line, Vec<Waiter>>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One join call taking a place in `q` for each join of a batch (with its proof of
    /// work). When Redis fails it, every join waiting for `q` is answered "try later" now,
    /// instead of one batch after another each waiting for its own failure (up to the
    /// response timeout each, behind a Redis that hangs).
    async fn call(&self, line: &Line, joins: Vec<Join>) -> Result<JoinBatch, JoinError> {
        let q = &line.q;
        match self.take(line, joins).await {
            Ok(j) => {
                if let Some(Joined::Places {
                    admitted_now: 1.., ..
                }) = j.joined
                {
                    // Passthrough: the dispatcher mints and delivers these at once when woken
                    // (a lost wake costs one tick: it also drains them every tick).
                    let (store, q) = (self.store.clone(), q.clone());
                    tokio::spawn(async move {
                        if let Err(e) = store.wake(&q).await {
                            logged(e);
                        }
                    });
                }
                Ok(j)
            }
            Err(e) => {
                let e = JoinError::Store(Arc::new(logged(e)));
                let waiters = self
                    .lock()
                    .get_mut(line)
                    .map(std::mem::take)
                    .unwrap_or_default();
                for (_, tx) in waiters {
                    let _ = tx.send(Err(e.clone()));
                }
                Err(e)
            }
        }
    }
}

impl Shared {
    /// Takes `n` places; in a scheduled sale's pre-queue, also records their entrant hashes
    /// before any ticket goes out, so every ticket a browser holds takes part in the draw (a
    /// place whose hashes failed to record goes in line after the drawn ones, and its browser
    /// is told to try again).
    async fn take(&self, line: &Line, joins: Vec<Join>) -> Result<JoinBatch, StoreError> {
        let q = &line.q;
        let index = self.index.load(Ordering::Relaxed);
        // A queue that does not record sends no notes (the join script's arguments as before).
        let notes: Vec<JoinNote> = if joins.iter().any(|j| j.note != JoinNote::default()) {
            joins.iter().map(|j| j.note).collect()
        } else {
            Vec::new()
        };
        let (proofs, keys): (Vec<_>, Vec<_>) = joins.into_iter().map(|j| (j.pow, j.key)).unzip();
        let joined = self
            .store
            .join_recorded(
                q,
                index,
                now_ms(),
                &proofs,
                &keys,
                line.lane.as_ref(),
                &notes,
            )
            .await?;
        if let Some(Joined::Scheduled { last, count, .. }) = joined.joined {
            let entrants: Vec<_> = (last + 1 - count..=last)
                .map(|p| {
                    let ticket = Ticket::issue(&self.ticket_key, q, PlaceId(p));
                    (PlaceId(p), EntrantHash::of_ticket(&ticket))
                })
                .collect();
            self.store.record_entrants(q, &entrants).await?;
        }
        Ok(joined)
    }
}

/// Sends the waiting joins of its line (`clear.q`), up to [`JOIN_BATCH_MAX`] per call, until
/// none wait.
/// Should this task end any other way (the runtime stopping, even before it first ran),
/// `clear` answers the joins still waiting "try later" instead of leaving them waiting for a
/// call that will not come.
async fn drive(mut clear: Clear) {
    let shared = clear.shared.clone();
    let line = clear.q.clone();
    let q = line.q.clone();
    loop {
        let batch: Vec<_> = {
            let mut queues = shared.lock();
            let Some(waiters) = queues.get_mut(&line) else {
                clear.armed = false;
                return;
            };
            if waiters.is_empty() {
                queues.remove(&line);
                clear.armed = false;
                return;
            }
            let n = waiters.len().min(JOIN_BATCH_MAX);
            waiters.drain(..n).collect()
        };
        let (proofs, txs): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let joined = shared.call(&line, proofs).await;
        for (i, tx) in txs.into_iter().enumerate() {
            let reply = joined
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|j| answer(j, i));
            match tx.send(reply) {
                // The request went away before its place came back: let the place lapse after
                // the grace period instead of waiting in line for nobody.
                Err(Ok(
                    PlaceState::Waiting { place, .. } | PlaceState::Scheduled { place, .. },
                )) => shared.away.mark(q.clone(), place),
                // ... or give back the session its join admitted, so its slot frees.
                Err(Ok(PlaceState::AdmittedNow { place })) => {
                    let (store, q) = (shared.store.clone(), q.clone());
                    tokio::spawn(async move {
                        if let Err(e) = store.leave(&q, place).await {
                            logged(e);
                        }
                    });
                }
                _ => {}
            }
        }
    }
}

/// Forgets `q`'s waiting joins (their requests end with "try later") when the task driving
/// them ends before sending them; disarmed by a normal end, after which the queue's entry may
/// already belong to the next join's call.
struct Clear {
    shared: Arc<Shared>,
    q: Line,
    armed: bool,
}

impl Drop for Clear {
    fn drop(&mut self) {
        if self.armed {
            self.shared.lock().remove(&self.q);
        }
    }
}
