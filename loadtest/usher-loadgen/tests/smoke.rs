//! Smoke test: a real redis-server, dispatcher and two gateways as child processes, and the
//! `usher-loadgen` binary putting 300 connections through them with 2 workers and 2 source
//! addresses. Everyone must join and be admitted, in order, exactly once.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::run_bounded;
use usher_testkit::procs::Proc;
use usher_testkit::RedisServer;

const TICKET_KEY: &str = "loadgen-smoke-ticket-key-0123456789abcdef";
const CONNECTIONS: u64 = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_browsers_are_admitted_in_order() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let env = |extra: &[(&'static str, String)]| {
        let mut env = vec![
            ("USHER_REDIS_URL", redis.url()),
            ("USHER_TICK_MS", "100".to_owned()),
            ("USHER_HEARTBEAT_MS", "200".to_owned()),
            ("USHER_RETRY_MS", "300".to_owned()),
            ("USHER_TICKET_KEY", TICKET_KEY.to_owned()),
        ];
        env.extend(extra.iter().cloned());
        env
    };
    let dispatcher = Proc::start("usher-dispatcher", &env(&[])).await?;
    let g0 = Proc::start("usher-gateway", &env(&[("USHER_SERVER_ID", "g0".into())])).await?;
    let g1 = Proc::start("usher-gateway", &env(&[("USHER_SERVER_ID", "g1".into())])).await?;

    let http = usher_testkit::config::admin_client();
    let r = http
        .put(format!("{}/admin/queues/smoke", dispatcher.url()))
        .json(&json!({"admit_per_second": 200, "passthrough": false}))
        .timeout(Duration::from_secs(5))
        .send()
        .await?;
    anyhow::ensure!(r.status().is_success(), "PUT queue: {}", r.status());

    let dir = tempfile::tempdir()?;
    let report = dir.path().join("r.json");
    let plot = dir.path().join("p.svg");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_usher-loadgen"));
    cmd.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .args(["--gateways", &format!("{},{}", g0.url(), g1.url())])
        .args(["--queue", "smoke"])
        .args(["--connections", &CONNECTIONS.to_string()])
        .args(["--join-rate", "600"])
        .args(["--workers", "2"])
        .args(["--source-ips", "127.0.0.2,127.0.0.3"])
        .args(["--duration", "60"])
        .arg("--until-admitted")
        .arg("--report")
        .arg(&report)
        .arg("--plot")
        .arg(&plot)
        .arg("--quiet");
    let started = Instant::now();
    let out =
        tokio::task::spawn_blocking(move || run_bounded(cmd, Duration::from_secs(120))).await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    println!("SMOKE loadgen run took {:?}", started.elapsed());
    anyhow::ensure!(
        out.status.success(),
        "usher-loadgen failed ({}):\n{stdout}\n{stderr}\ngateway g0:\n{}\ndispatcher:\n{}",
        out.status,
        g0.log_tail(),
        dispatcher.log_tail()
    );

    let r: Value = serde_json::from_str(&std::fs::read_to_string(&report)?)?;
    let t = &r["totals"];
    assert_eq!(t["joined"], CONNECTIONS, "joined: {t}");
    assert_eq!(t["admitted"], CONNECTIONS, "admitted: {t}");
    let c = &r["correctness"];
    assert_eq!(c["duplicate_admissions"], 0, "{c}");
    assert_eq!(c["fifo_violations"], 0, "{c}");
    assert_eq!(c["missing_admissions"], 0, "{c}");
    assert_eq!(c["ok"], true, "{c}");
    assert_eq!(r["latency_ms"]["join"]["count"], CONNECTIONS);
    assert_eq!(r["latency_ms"]["admission"]["count"], CONNECTIONS);
    assert!(r["latency_ms"]["position_update"]["count"].as_u64() > Some(0));
    assert!(r["timeline"].as_array().is_some_and(|t| !t.is_empty()));
    // Each browser's whole wait (arrival to admitted_at) and when the line emptied: what
    // `make bench` compares a rehearsal with (usher_loadgen::waits).
    let w = &r["wait"];
    assert_eq!(w["count"], CONNECTIONS, "{w}");
    let (p50, max, empty) = (
        w["p50_s"].as_f64().unwrap_or(-1.0),
        w["max_s"].as_f64().unwrap_or(-1.0),
        w["line_empty_at_s"].as_f64().unwrap_or(-1.0),
    );
    assert!(0.0 <= p50 && p50 <= max && max < 60.0, "{w}");
    assert!(empty > 0.0 && empty < 60.0, "{w}");
    // 300 joins offered at 600/s: the measured rate is that pace (generous bounds: a loaded
    // CI machine may start some late).
    let rate = t["join_rate_per_s"]
        .as_f64()
        .expect("join_rate_per_s in the totals");
    assert!(
        (200.0..=700.0).contains(&rate),
        "join rate {rate}/s at 600/s offered"
    );
    // Joins over the target: counted in the totals and, cumulatively, in the timeline.
    let slow = t["slow_joins"].as_u64().expect("slow_joins in the totals");
    assert!(slow <= CONNECTIONS, "{slow} slow joins of {CONNECTIONS}");
    let last = r["timeline"].as_array().and_then(|t| t.last()).cloned();
    assert_eq!(
        last.map(|p| p["slow_joins"].clone()),
        Some(t["slow_joins"].clone())
    );
    assert!(r["command_line"]
        .as_str()
        .is_some_and(|c| c.contains("--until-admitted")));
    assert_eq!(r["exit_code"], 0);
    // The load generator's own CPU, beside the run: every join and event counted, each with
    // its cost, and the line in the summary.
    let cpu = &r["load_generator_cpu"];
    let events = cpu["events"].as_u64().unwrap_or(0);
    assert!(
        events >= 3 * CONNECTIONS,
        "joins, first waiting, admitted: {cpu}"
    );
    assert!(cpu["cpu_s"].as_f64().is_some_and(|s| s > 0.0), "{cpu}");
    assert!(
        cpu["us_per_event"].as_f64().is_some_and(|us| us > 0.0),
        "{cpu}"
    );
    assert!(cpu["short_of_cpu"].is_boolean(), "{cpu}");
    assert!(stdout.contains("load gen cpu "), "{stdout}");
    // How busy the whole machine was: each second of the timeline, and the mean of the
    // seconds in which joins were answered, weighted by their measured length
    // (`machine_busy_secs`), in the summary too. The last point, taken when the run ends, may
    // follow the one before by milliseconds, too few for `/proc/stat` (10 ms ticks) to say
    // anything: it may have none.
    let share = |v: &Value| v.as_f64().filter(|b| (0.0..=1.0).contains(b));
    let points = r["timeline"].as_array().cloned().unwrap_or_default();
    let busy: Vec<Option<f64>> = points.iter().map(|p| share(&p["machine_busy"])).collect();
    assert!(busy.iter().rev().skip(1).all(Option::is_some), "{points:?}");
    let joined: Vec<u64> = points
        .iter()
        .map(|p| p["joined"].as_u64().unwrap_or(0))
        .collect();
    let secs: Vec<Option<f64>> = points
        .iter()
        .map(|p| p["machine_busy_secs"].as_f64())
        .collect();
    // Each span's length as measured: the first one also covers the workers' start, so it is
    // longer than the second its `t` says.
    assert!(
        busy.iter()
            .zip(&secs)
            .all(|(b, s)| b.is_some() == s.is_some()),
        "{points:?}"
    );
    assert!(secs[0].is_some_and(|s| s > 1.0), "{points:?}");
    let weighted = |shares: &[(f64, f64)]| {
        let secs: f64 = shares.iter().map(|(_, dt)| dt).sum();
        shares.iter().map(|(b, dt)| b * dt).sum::<f64>() / secs
    };
    let joining: Vec<(f64, f64)> = (0..points.len())
        .filter(|&i| joined[i] > joined[..i].iter().copied().max().unwrap_or(0))
        .filter_map(|i| busy[i].zip(secs[i]))
        .collect();
    let reported = share(&r["machine_busy_while_joining"]).expect("a share");
    assert!(
        (reported - weighted(&joining)).abs() < 0.001,
        "{reported} vs {joining:?}"
    );
    assert!(stdout.contains("% while joins were answered"), "{stdout}");
    // And over the hold: the intervals with no new join while browsers waited for admission
    // (here, until the line emptied), weighted by their length, reported when there were any.
    let waiting: Vec<u64> = points
        .iter()
        .map(|p| p["waiting"].as_u64().unwrap_or(0))
        .collect();
    let holding: Vec<(f64, f64)> = (0..points.len())
        .filter(|&i| joined[i] <= joined[..i].iter().copied().max().unwrap_or(0))
        .filter(|&i| waiting[i] > 0)
        .filter_map(|i| busy[i].zip(secs[i]))
        .collect();
    match share(&r["machine_busy_while_holding"]) {
        Some(h) => {
            assert!((h - weighted(&holding)).abs() < 0.001, "{h} vs {holding:?}");
            assert!(stdout.contains("% while the line was held"), "{stdout}");
        }
        None => assert!(holding.is_empty(), "{holding:?} not reported"),
    }

    let svg = std::fs::read_to_string(&plot)?;
    assert!(
        svg.starts_with("<svg") || svg.starts_with("<?xml"),
        "{}",
        &svg[..svg.len().min(200)]
    );
    assert!(svg.trim_end().ends_with("</svg>"));
    drop((g0, g1, dispatcher, redis));
    Ok(())
}
