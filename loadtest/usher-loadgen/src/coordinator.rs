//! The coordinator: starts the worker processes, merges their reports, prints progress and
//! the summary, writes the JSON report and the SVG plot.

use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::limits;
use crate::machine::BusySampler;
use crate::plan::Plan;
use crate::plot;
use crate::proto::{Counters, WorkerMsg, WorkerResult};
use crate::report::{self, RunInfo, TimelinePoint, WorkerInfo};
use crate::stalls;
use crate::worker::{instant_at, now_ms};

/// Time given to workers after the run's duration to send their results.
const GRACE: Duration = Duration::from_secs(15);
/// Time between scheduling the start and the first connection (workers start up).
const STARTUP: Duration = Duration::from_millis(500);
/// mimalloc's setting for how long freed memory is kept before it goes back to the kernel
/// (milliseconds; -1: kept). The workers keep theirs (see `run`).
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

pub struct Outputs {
    pub report: Option<std::path::PathBuf>,
    pub plot: Option<std::path::PathBuf>,
    pub quiet: bool,
}

enum Event {
    Msg(u32, WorkerMsg),
    Eof(u32),
}

struct Worker {
    child: Child,
    stdin: Option<ChildStdin>,
    latest: Counters,
    result: Option<WorkerResult>,
    eof: bool,
}

/// Says `stop` to every worker: end the run now, or (once it has reported) exit.
async fn stop_all(workers: &mut [Worker]) {
    for w in workers {
        if let Some(s) = w.stdin.as_mut() {
            let _ = s.write_all(b"stop\n").await;
            let _ = s.flush().await;
        }
    }
}

/// Runs the whole load test; returns the process exit code.
pub async fn run(plan: Plan, argv: Vec<String>, out: Outputs) -> anyhow::Result<i32> {
    let soft = limits::raise_nofile();
    let per_worker = plan.connections.div_ceil(u64::from(plan.workers));
    anyhow::ensure!(
        per_worker + limits::HEADROOM <= soft,
        "{per_worker} connections per worker do not fit the open-files limit of {soft}; use more --workers"
    );
    let ports = limits::ephemeral_ports();
    let sources = plan.source_ips.len().max(1) as u64;
    let per_source = plan.connections.div_ceil(sources);
    // Bound sockets share the address's port range over all destinations; unbound ones get
    // it per gateway.
    let ports_available = if plan.source_ips.is_empty() {
        ports * plan.gateways.len() as u64
    } else {
        ports
    };
    if per_source > ports_available * 9 / 10 {
        eprintln!(
            "usher-loadgen: warning: about {per_source} connections per source address but only \
             {ports} ephemeral ports each; add --source-ips"
        );
    }

    let epoch_ms = now_ms() + STARTUP.as_millis() as u64;
    // Before the workers, so that their start-up is watched too. (Only the probe threads
    // pin themselves; the workers are started from this unpinned thread.)
    let probe = stalls::Probe::start();
    let exe = std::env::current_exe().context("cannot find this program's own executable")?;
    let (tx, mut rx) = mpsc::channel::<Event>(1024);
    let mut workers = Vec::new();
    for i in 0..plan.workers {
        let mut cmd = Command::new(&exe);
        // mimalloc gives freed memory back to the kernel a second after it is freed
        // (`madvise`), and faults it back in when it is used again: with a tick a second, in
        // the middle of the next admission burst (0.1–0.3 µs an admission there). A worker
        // keeps its memory instead, unless the environment says otherwise.
        if std::env::var_os(PURGE_DELAY).is_none() {
            cmd.env(PURGE_DELAY, "-1");
        }
        let mut child = cmd
            .args(argv.iter().skip(1))
            .args([
                "--worker-index",
                &i.to_string(),
                "--worker-count",
                &plan.workers.to_string(),
                "--epoch-ms",
                &epoch_ms.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start worker {i} ({})", exe.display()))?;
        let stdout = child.stdout.take().context("worker stdout")?;
        let stdin = child.stdin.take();
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                match serde_json::from_str::<WorkerMsg>(&line) {
                    Ok(m) => {
                        if tx.send(Event::Msg(i, m)).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => eprintln!("usher-loadgen: worker {i}: unreadable line ({e})"),
                }
            }
            let _ = tx.send(Event::Eof(i)).await;
        });
        workers.push(Worker {
            child,
            stdin,
            latest: Counters::default(),
            result: None,
            eof: false,
        });
    }
    drop(tx);

    let epoch = instant_at(epoch_ms);
    let hard_stop = epoch + plan.duration() + GRACE;
    // Workers report at whole seconds after the start; sample a quarter second later so
    // each point holds that second's reports.
    let mut tick = tokio::time::interval_at(
        (epoch + Duration::from_millis(1250)).into(),
        Duration::from_secs(1),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut timeline = Vec::new();
    // The whole machine's CPU at the previous point (each point says how busy it was since).
    let mut machine = BusySampler::start();
    let mut last_joined = 0u64;
    let mut interrupted = 0;
    let mut sigterm =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        if workers.iter().all(|w| w.eof) {
            break;
        }
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Event::Msg(i, WorkerMsg::Progress { counters, .. })) => {
                    if let Some(w) = workers.get_mut(i as usize) {
                        w.latest = counters;
                    }
                }
                Some(Event::Msg(i, WorkerMsg::Done(r))) => {
                    if let Some(w) = workers.get_mut(i as usize) {
                        w.latest = r.counters;
                        w.result = Some(*r);
                    }
                    // Everyone has reported: let the workers exit (they keep their finished
                    // connections open until then).
                    if workers.iter().all(|w| w.result.is_some() || w.eof) {
                        stop_all(&mut workers).await;
                    }
                }
                Some(Event::Eof(i)) => {
                    if let Some(w) = workers.get_mut(i as usize) {
                        w.eof = true;
                    }
                }
                None => break,
            },
            _ = tick.tick() => {
                let t = (now_ms().saturating_sub(epoch_ms + 250)) as f64 / 1000.0;
                let total = sum(&workers);
                timeline.push(TimelinePoint::new(t.round(), &total).with_machine(machine.sample()));
                if !out.quiet {
                    eprintln!(
                        "[{t:>6.0}s] connected {:>7}  waiting {:>7}  admitted {:>7}  joins/s {:>6}  errors {:>5}  reconnects {:>5}",
                        total.connected,
                        total.waiting,
                        total.admitted,
                        total.joined.saturating_sub(last_joined),
                        total.errors,
                        total.reconnects,
                    );
                }
                last_joined = total.joined;
            }
            _ = interrupt(&mut sigterm) => {
                interrupted += 1;
                if interrupted == 1 {
                    eprintln!("usher-loadgen: interrupted; stopping the workers (interrupt again to abort)");
                    stop_all(&mut workers).await;
                } else {
                    for w in &mut workers {
                        let _ = w.child.start_kill();
                    }
                    anyhow::bail!("aborted");
                }
            }
            _ = tokio::time::sleep_until(hard_stop.into()) => {
                eprintln!("usher-loadgen: workers did not finish in time; killing them");
                for w in &mut workers {
                    if !w.eof {
                        let _ = w.child.start_kill();
                    }
                }
                break;
            }
        }
    }
    let elapsed_s = now_ms().saturating_sub(epoch_ms) as f64 / 1000.0;
    let (stalls, stall_cpus) = probe.finish();
    let total = sum(&workers);
    timeline.push(
        TimelinePoint::new(crate::stats::round_to(elapsed_s, 3), &total)
            .with_machine(machine.sample()),
    );

    let mut infos = Vec::new();
    let mut results = Vec::new();
    for (i, w) in workers.iter_mut().enumerate() {
        // Closing stdin tells a still-running worker that the coordinator is done.
        w.stdin = None;
        let status = match tokio::time::timeout(Duration::from_secs(5), w.child.wait()).await {
            Ok(Ok(s)) => Some(s.to_string()),
            _ => {
                let _ = w.child.start_kill();
                let _ = w.child.wait().await;
                Some("killed".to_owned())
            }
        };
        infos.push(WorkerInfo {
            index: i as u32,
            pid: w.result.as_ref().map(|r| r.pid),
            assigned: plan.assigned(i as u32),
            reported: w.result.is_some(),
            exit_status: status,
        });
        if let Some(r) = w.result.take() {
            results.push(r);
        }
    }

    let report = report::build(
        &plan,
        RunInfo {
            coordinator_cpu_s: crate::cpu::own_cpu_s(),
            argv,
            started_at_ms: epoch_ms,
            elapsed_s,
            workers: infos,
            timeline,
            stalls,
            stall_cpus,
        },
        &results,
    );
    let text = report::summary(&report);
    {
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "\n{text}");
        let _ = stdout.flush();
    }
    if let Some(path) = &out.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n")
            .with_context(|| format!("cannot write the report to {}", path.display()))?;
        eprintln!("usher-loadgen: report written to {}", path.display());
    }
    if let Some(path) = &out.plot {
        std::fs::write(path, plot::svg(&report))
            .with_context(|| format!("cannot write the plot to {}", path.display()))?;
        eprintln!("usher-loadgen: plot written to {}", path.display());
    }
    Ok(report.exit_code)
}

/// Ctrl-C or SIGTERM.
async fn interrupt(sigterm: &mut Option<tokio::signal::unix::Signal>) {
    match sigterm.as_mut() {
        Some(s) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = s.recv() => {}
            }
        }
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

fn sum(workers: &[Worker]) -> Counters {
    let mut c = Counters::default();
    for w in workers {
        c.add(&w.latest);
    }
    c
}
