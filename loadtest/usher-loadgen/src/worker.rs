//! A worker process: opens its share of the connections at its share of the join rate,
//! reports progress every second on stdout, and its result when the run ends.
//!
//! It stops when the run's duration is over, when all its connections have finished, when
//! the coordinator writes `stop` on its stdin (or it gets SIGINT/SIGTERM) — and it exits at
//! once when its stdin reaches EOF or its stdout breaks, i.e. when the coordinator is gone.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::sync::watch;

use crate::conn::{self, Ctx, Recorder};
use crate::limits;
use crate::plan::Plan;
use crate::proto::WorkerMsg;

/// Writes one message line; exits the process when the coordinator no longer listens.
fn emit(msg: &WorkerMsg) {
    let Ok(line) = serde_json::to_string(msg) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        // The coordinator is gone.
        std::process::exit(2);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    conn::now_us() / 1000
}

/// The `Instant` matching the epoch-ms timestamp `at_ms` (in the past or the future).
pub fn instant_at(at_ms: u64) -> Instant {
    let now_i = Instant::now();
    let now = now_ms();
    if at_ms >= now {
        now_i + Duration::from_millis(at_ms - now)
    } else {
        now_i
            .checked_sub(Duration::from_millis(now - at_ms))
            .unwrap_or(now_i)
    }
}

/// Resolves once `stop` was written on stdin (never, if the stdin watch is not running).
async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Runs worker `index` of `count`; never returns on success (exits the process).
pub fn run(plan: Plan, index: u32, epoch_ms: u64) -> anyhow::Result<()> {
    anyhow::ensure!(
        index < plan.workers,
        "--worker-index {index} is out of range for {} workers",
        plan.workers
    );
    let assigned = plan.assigned(index);
    let soft = limits::raise_nofile();
    anyhow::ensure!(
        assigned + limits::HEADROOM <= soft,
        "worker {index}: {assigned} connections do not fit the open-files limit of {soft}; \
         use more --workers"
    );
    // Before any other thread exists (see `reserve_descriptors`).
    limits::reserve_descriptors(assigned + limits::HEADROOM);
    // One thread per worker process: several workers share the machine's cores, and a
    // single-threaded runtime does no cross-thread wake-ups.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the tokio runtime")?;
    // stdin: `stop` ends the run gracefully (or, once this worker reported, lets it exit);
    // EOF means the coordinator died.
    let (stop_tx, mut stop_rx) = watch::channel(false);
    std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            let stdin = std::io::stdin();
            let mut line = String::new();
            loop {
                line.clear();
                match stdin.lock().read_line(&mut line) {
                    Ok(0) | Err(_) => std::process::exit(2),
                    Ok(_) if line.trim() == "stop" => {
                        let _ = stop_tx.send(true);
                    }
                    Ok(_) => {}
                }
            }
        })
        .ok();
    let linger = Duration::from_millis(plan.linger_ms);
    let result = rt.block_on(work(plan, index, epoch_ms, assigned, &mut stop_rx));
    emit(&WorkerMsg::Done(Box::new(result)));
    // Finished connections still lingering stay open until every worker has reported (the
    // coordinator then says `stop`), so one worker's exit does not close thousands of
    // connections while others still measure. Bounded by the longest linger.
    rt.block_on(async {
        tokio::select! {
            () = stop_requested(&mut stop_rx) => {}
            () = tokio::time::sleep(linger * 2) => {}
        }
    });
    // Connection tasks are cut off by exiting; nothing else needs to run.
    std::process::exit(0)
}

async fn work(
    plan: Plan,
    index: u32,
    epoch_ms: u64,
    assigned: u64,
    stop_rx: &mut watch::Receiver<bool>,
) -> crate::proto::WorkerResult {
    let rec = Arc::new(Recorder::new(assigned));
    if assigned == 0 {
        // More workers than connections: nothing to do here.
        rec.all_finished.notify_one();
    }
    let ctx = Arc::new(Ctx::new(&plan, rec.clone()));
    // Not one of the connections' tasks: it outlives them (`crate::linger`).
    tokio::spawn(ctx.lingering.clone().close_when_due());
    let epoch = instant_at(epoch_ms);
    let deadline = epoch + plan.duration();

    // Join schedule: global connection j = k * W + index starts at epoch + j / rate.
    let launcher = {
        let ctx = ctx.clone();
        let (w, rate) = (u64::from(plan.workers), plan.join_rate);
        let arrivals = plan.arrivals.clone();
        tokio::spawn(async move {
            for k in 0..assigned {
                let j = k * w + u64::from(index);
                if let Some(curve) = &arrivals {
                    // --arrivals: connection j starts when the curve says.
                    tokio::time::sleep_until((epoch + curve.offset(j)).into()).await;
                } else if rate > 0.0 {
                    let at = epoch + Duration::from_secs_f64(j as f64 / rate);
                    tokio::time::sleep_until(at.into()).await;
                } else {
                    if k == 0 {
                        tokio::time::sleep_until(epoch.into()).await;
                    }
                    if k % 128 == 127 {
                        tokio::task::yield_now().await;
                    }
                }
                // Detached: a connection reports through the recorder, and nothing joins
                // it. (In a `JoinSet`, each connection's end also woke this task to collect
                // it, inside the admission bursts being measured.) Those still open when the
                // run ends close when the worker exits, as lingering ones do.
                drop(tokio::spawn(conn::run(ctx.clone(), j)));
            }
        })
    };

    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let mut tick = tokio::time::interval_at(
        (epoch + Duration::from_secs(1)).into(),
        Duration::from_secs(1),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let elapsed = || now_ms().saturating_sub(epoch_ms);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(deadline.into()) => break,
            _ = rec.all_finished.notified() => break,
            _ = stop_requested(stop_rx) => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = async {
                match sigterm.as_mut() {
                    Some(s) => s.recv().await,
                    None => std::future::pending().await,
                }
            } => break,
            _ = tick.tick() => emit(&WorkerMsg::Progress {
                worker: index,
                elapsed_ms: elapsed(),
                counters: rec.counters(),
            }),
        }
    }
    let result = rec.result(index, elapsed());
    launcher.abort();
    result
}
