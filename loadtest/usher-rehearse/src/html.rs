//! index.html: the one-page summary, with both plots inlined.

use std::fmt::Write as _;

use usher_loadgen::svg::esc;

use crate::results::Report;

fn s(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{v:.1} s"))
}

/// The page; `waits` and `timeline` are the SVG documents.
pub fn page(r: &Report, waits: &str, timeline: &str) -> String {
    let m = &r.summary;
    let mut rows = String::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(rows, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    };
    row(
        "people joined (refused)",
        format!("{} ({})", m.joined, m.refused),
    );
    row(
        "admitted / left / still waiting",
        format!("{} / {} / {}", m.admitted, m.left, m.still_waiting),
    );
    row(
        "no-shows / booked",
        format!("{} / {}", m.no_shows, m.booked),
    );
    row(
        "wait p50 / p90 / p99 / max",
        format!(
            "{} / {} / {} / {}",
            s(m.wait_s.p50),
            s(m.wait_s.p90),
            s(m.wait_s.p99),
            s(m.wait_s.max)
        ),
    );
    row(
        "actual wait − ETA shown, p50 / p90",
        format!("{} / {}", s(m.eta_error_s.p50), s(m.eta_error_s.p90)),
    );
    row("the line empties at", s(m.line_empty_at_s));
    row(
        "peak line / active sessions / admissions a second",
        format!(
            "{} / {} / {}",
            m.peak_waiting, m.peak_active, m.peak_admitted_per_second
        ),
    );
    row(
        "peak Redis memory / commands",
        format!("{} B / {}", m.peak_redis_memory_bytes, m.redis_commands),
    );
    match &m.sold_out {
        Some(so) => {
            let by_minute: Vec<String> = so
                .waiting_by_arrival_minute
                .iter()
                .map(|(m, n)| format!("{n} of minute {m}"))
                .collect();
            row(
                "inventory ran out",
                format!(
                    "at {} s, with {} still waiting ({})",
                    so.second,
                    so.waiting,
                    by_minute.join(", ")
                ),
            )
        }
        None => row("inventory ran out", "no".to_owned()),
    }
    row(
        "queue closed at",
        m.closed_at_s
            .map_or_else(|| "—".to_owned(), |c| format!("{c} s")),
    );
    row(
        "simulated / wall time",
        format!("{:.0} s / {:.1} s", m.simulated_s, m.wall_s),
    );
    let mut minutes = String::new();
    for x in &r.by_arrival_minute {
        let _ = writeln!(
            minutes,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            x.minute, x.joined, x.admitted, x.left, s(x.wait_s.p50), s(x.wait_s.p90), s(x.eta_error_s.p50)
        );
    }
    let settings = serde_json::to_string_pretty(&r.inputs.settings).unwrap_or_default();
    format!(
        r#"<!DOCTYPE html>
<html lang="en">
<head><meta charset="utf-8"><title>usher rehearsal — {queue}</title>
<style>body{{font-family:sans-serif;max-width:1000px;margin:1em auto}}table{{border-collapse:collapse}}th,td{{border:1px solid #ccc;padding:2px 8px;text-align:left}}</style>
</head>
<body>
<h1>Rehearsal of queue {queue}</h1>
<p>{crowd} people over {secs} s of arrivals, tick {tick} ms, seed {seed}, virtual start {start}.</p>
<table>
{rows}</table>
<h2>Waits by arrival minute</h2>
{waits}
<h2>The sale over time</h2>
{timeline}
<h2>By arrival minute</h2>
<table>
<tr><th>minute</th><th>joined</th><th>admitted</th><th>left</th><th>wait p50</th><th>wait p90</th><th>ETA error p50</th></tr>
{minutes}</table>
<h2>Settings (PUT /admin/queues/{{queue}})</h2>
<pre>{settings}</pre>
</body>
</html>
"#,
        queue = esc(&r.inputs.queue),
        crowd = r.inputs.crowd,
        secs = r.inputs.arrival_seconds,
        tick = r.inputs.tick_ms,
        seed = r.inputs.seed,
        start = esc(&r.inputs.start),
        waits = waits.trim_start_matches(|c| c != '<'),
        timeline = timeline,
        settings = esc(&settings),
    )
}
