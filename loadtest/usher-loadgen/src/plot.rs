//! A hand-written SVG of a report: (a) connections over time, (b) latency distributions.

use std::fmt::Write as _;

use crate::report::{Report, TimelinePoint};
use crate::svg::{
    esc, fmt_num, frame, grid_x, grid_y, legend, nice_step, polyline, polyline_w, Frame,
};

const W: f64 = 1000.0;
const H: f64 = 780.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 260.0;

/// Connections over time.
fn timeline(s: &mut String, r: &Report, f: Frame) {
    frame(
        s,
        f,
        "(a) connections over time",
        "seconds since start",
        "connections",
    );
    let tl = &r.timeline;
    let t_max = tl.iter().map(|p| p.t).fold(1.0, f64::max);
    let v_max = tl
        .iter()
        .map(|p| p.connected.max(p.admitted).max(p.waiting).max(p.joined) as f64)
        .fold(1.0, f64::max);
    let (xs, ys) = (nice_step(t_max, 10.0), nice_step(v_max, 6.0));
    let (t_top, v_top) = ((t_max / xs).ceil() * xs, (v_max / ys).ceil() * ys);
    let px = |t: f64| f.x + t / t_top * f.w;
    let py = |v: f64| f.y + f.h - v / v_top * f.h;
    let mut t = 0.0;
    while t <= t_top + 1e-9 {
        grid_x(s, f, px(t), &fmt_num(t));
        t += xs;
    }
    let mut v = 0.0;
    while v <= v_top + 1e-9 {
        grid_y(s, f, py(v), &fmt_num(v));
        v += ys;
    }
    // CPU stalls as red bands: slow joins or admissions in one are the machine's doing.
    let cs = &r.cpu_stalls;
    for st in cs
        .stalls
        .iter()
        .filter(|st| (0.0..=t_top).contains(&st.t_s))
    {
        let x0 = px(st.t_s);
        let w = (px(st.t_s + st.ms / 1000.0) - x0).max(2.0);
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{}" width="{w:.1}" height="{}" fill="#d62728" fill-opacity="0.35"><title>CPU {} ran nothing for {:.0} ms</title></rect>"##,
            f.y, f.h, st.cpu, st.ms
        );
    }
    if cs.count > 0 {
        let longest = cs.longest_ms.unwrap_or(0.0);
        legend(
            s,
            f,
            4,
            "#d62728",
            &[
                &format!("CPU stalls ≥ {:.0} ms: {}", cs.threshold_ms, cs.count),
                &format!("(longest {longest:.0} ms)"),
            ],
        );
    }
    type Get = fn(&TimelinePoint) -> u64;
    let series: [(&str, &str, Get); 4] = [
        ("connected (open streams)", "#1f77b4", |p| p.connected),
        ("waiting (holding a place)", "#ff7f0e", |p| p.waiting),
        ("admitted (cumulative)", "#2ca02c", |p| p.admitted),
        ("joined (cumulative)", "#9467bd", |p| p.joined),
    ];
    for (row, (name, color, get)) in series.iter().enumerate() {
        let mut pts = vec![(px(0.0), py(0.0))];
        pts.extend(tl.iter().map(|p| (px(p.t), py(get(p) as f64))));
        if row == 0 {
            // Drawn wide and light: `waiting` often lies right on top of it.
            polyline_w(s, &pts, color, 5.0, 0.45);
        } else {
            polyline(s, &pts, color);
        }
        let last = tl.last().map_or(0, get);
        legend(s, f, row, color, &[&format!("{name}: {last}")]);
    }
}

/// x position of quantile `q` on a "1 / (1 - q)" log axis (0 = p0, 4 = p99.99).
fn qx(q: f64) -> f64 {
    (1.0 / (1.0 - q.min(0.9999))).log10()
}

/// Latency percentile curves, log-scale latency axis.
fn latencies(s: &mut String, r: &Report, f: Frame) {
    frame(
        s,
        f,
        "(b) latency distributions",
        "percentile",
        "latency (ms, log scale)",
    );
    let d = &r.distributions_ms;
    let l = &r.latency_ms;
    let series = [
        ("join", "#1f77b4", &d.join, &l.join),
        (
            "position update",
            "#ff7f0e",
            &d.position_update,
            &l.position_update,
        ),
        ("admission", "#2ca02c", &d.admission, &l.admission),
    ];
    let values = series
        .iter()
        .flat_map(|(_, _, pts, _)| pts.iter().map(|&(_, ms)| ms.max(0.01)));
    let (lo, hi) = values.fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let (lo, hi) = if lo > hi {
        (0.1, 1000.0)
    } else {
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil().max(lo.log10().floor() + 1.0)),
        )
    };
    let (llo, lhi) = (lo.log10(), hi.log10());
    let px = |q: f64| f.x + qx(q) / 4.0 * f.w;
    let py = |ms: f64| f.y + f.h - (ms.max(lo).log10() - llo) / (lhi - llo) * f.h;
    for (q, label) in [
        (0.0, "0%"),
        (0.9, "90%"),
        (0.99, "99%"),
        (0.999, "99.9%"),
        (0.9999, "99.99%"),
    ] {
        grid_x(s, f, px(q), label);
    }
    let mut e = llo.round() as i32;
    while f64::from(e) <= lhi + 1e-9 {
        let ms = 10f64.powi(e);
        let label = if ms >= 1.0 {
            format!("{ms:.0}")
        } else {
            format!("{ms}")
        };
        grid_y(s, f, py(ms), &label);
        e += 1;
    }
    for (row, (name, color, pts, sum)) in series.iter().enumerate() {
        let line: Vec<(f64, f64)> = pts
            .iter()
            .filter(|(q, _)| *q <= 0.9999)
            .map(|&(q, ms)| (px(q), py(ms)))
            .collect();
        polyline(s, &line, color);
        let head = format!("{name} (n={})", sum.count);
        let stats = if sum.count == 0 {
            "no samples".to_owned()
        } else {
            format!(
                "p50 {} · p99 {} · max {}",
                short_ms(sum.p50_ms),
                short_ms(sum.p99_ms),
                short_ms(sum.max_ms)
            )
        };
        legend(s, f, row * 2, color, &[&head, &stats]);
    }
}

fn short_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2}s", ms / 1000.0)
    } else if ms >= 10.0 {
        format!("{ms:.0}ms")
    } else {
        format!("{ms:.1}ms")
    }
}

/// The whole SVG document.
pub fn svg(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let c = &r.config;
    let title = format!(
        "usher-loadgen — queue {}, {} connections, {} worker(s), {} gateway(s), started {}",
        c.queue,
        c.connections,
        c.workers,
        c.gateways.len(),
        r.started_at
    );
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="14">{}</text>"#,
        esc(&title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="{}" font-size="11" fill="#555">{}</text>"##,
        H - 8.0,
        esc(&format!(
            "duplicates {}, FIFO violations {}, missing {}, errors {}, reconnects {}",
            r.correctness.checks.duplicate_admissions,
            r.correctness.checks.fifo_violations,
            r.correctness
                .missing_admissions
                .map_or_else(|| "n/a".to_owned(), |m| m.to_string()),
            r.totals.errors,
            r.totals.reconnects
        ))
    );
    let pw = W - LEFT - RIGHT;
    timeline(
        &mut s,
        r,
        Frame {
            x: LEFT,
            y: 64.0,
            w: pw,
            h: 270.0,
        },
    );
    latencies(
        &mut s,
        r,
        Frame {
            x: LEFT,
            y: 420.0,
            w: pw,
            h: 290.0,
        },
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_nice() {
        assert_eq!(nice_step(100.0, 10.0), 10.0);
        assert_eq!(nice_step(7.0, 10.0), 1.0);
        assert_eq!(nice_step(45_000.0, 6.0), 10_000.0);
        assert!((qx(0.99) - 2.0).abs() < 1e-9);
    }
}
