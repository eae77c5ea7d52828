//! The rehearsal's two SVG plots, drawn with the load generator's primitives
//! (`usher_loadgen::svg`): waits by arrival minute, and the sale over time.

use std::fmt::Write as _;

use usher_loadgen::svg::{esc, fmt_num, frame, grid_x, grid_y, legend, nice_step, polyline, Frame};

use crate::results::Report;

const W: f64 = 1000.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 250.0;

fn document(h: f64, title: &str, body: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="24" font-size="14">{}</text>"#,
        esc(title)
    );
    s.push_str(body);
    s.push_str("</svg>\n");
    s
}

/// A named, coloured line of `(x, y)` points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// Lines of `(x, y)` series in a frame, with axes from 0 to their maxima (y from `y_min`).
struct Panel<'a> {
    f: Frame,
    title: &'a str,
    xlabel: &'a str,
    ylabel: &'a str,
    series: Vec<Series<'a>>,
    /// A dashed horizontal line at 0 when y goes below it.
    y_min: f64,
}

impl Panel<'_> {
    fn draw(&self, s: &mut String) {
        let f = self.f;
        frame(s, f, self.title, self.xlabel, self.ylabel);
        let all = || self.series.iter().flat_map(|(_, _, pts)| pts.iter());
        let x_max = all().map(|p| p.0).fold(1.0, f64::max);
        let y_max = all().map(|p| p.1).fold(1.0, f64::max);
        let y_min = self.y_min.min(all().map(|p| p.1).fold(0.0, f64::min));
        let sx = |x: f64| f.x + x / x_max * f.w;
        let sy = |y: f64| f.y + f.h - (y - y_min) / (y_max - y_min) * f.h;
        let step = nice_step(x_max, 8.0);
        let mut x = 0.0;
        while x <= x_max {
            grid_x(s, f, sx(x), &fmt_num(x));
            x += step;
        }
        let step = nice_step(y_max - y_min, 6.0);
        let mut y = (y_min / step).floor() * step;
        while y <= y_max {
            if y >= y_min {
                grid_y(s, f, sy(y), &fmt_num(y));
            }
            y += step;
        }
        if y_min < 0.0 {
            let _ = writeln!(
                s,
                r##"<line x1="{}" y1="{:.1}" x2="{}" y2="{:.1}" stroke="#444" stroke-dasharray="4 3"/>"##,
                f.x,
                sy(0.0),
                f.x + f.w,
                sy(0.0)
            );
        }
        for (row, (name, color, pts)) in self.series.iter().enumerate() {
            let scaled: Vec<(f64, f64)> = pts.iter().map(|&(x, y)| (sx(x), sy(y))).collect();
            polyline(s, &scaled, color);
            legend(s, f, row, color, &[name]);
        }
    }
}

fn title(r: &Report) -> String {
    format!(
        "usher-rehearse — queue {}, {} people over {} s, tick {} ms, seed {}",
        r.inputs.queue, r.inputs.crowd, r.inputs.arrival_seconds, r.inputs.tick_ms, r.inputs.seed
    )
}

/// waits.svg: wait percentiles by arrival minute, and the ETA shown at join against it.
pub fn waits(r: &Report) -> String {
    let pw = W - LEFT - RIGHT;
    let by = |f: &dyn Fn(&crate::results::Minute) -> Option<f64>| -> Vec<(f64, f64)> {
        r.by_arrival_minute
            .iter()
            .filter_map(|m| f(m).map(|v| (m.minute as f64, v)))
            .collect()
    };
    let mut body = String::new();
    Panel {
        f: Frame {
            x: LEFT,
            y: 64.0,
            w: pw,
            h: 250.0,
        },
        title: "(a) wait by arrival minute",
        xlabel: "arrival minute",
        ylabel: "wait (s)",
        series: vec![
            ("p50", "#1f77b4", by(&|m| m.wait_s.p50)),
            ("p90", "#ff7f0e", by(&|m| m.wait_s.p90)),
            ("p99", "#d62728", by(&|m| m.wait_s.p99)),
        ],
        y_min: 0.0,
    }
    .draw(&mut body);
    Panel {
        f: Frame {
            x: LEFT,
            y: 400.0,
            w: pw,
            h: 250.0,
        },
        title: "(b) actual wait − ETA shown at join",
        xlabel: "arrival minute",
        ylabel: "error (s)",
        series: vec![
            ("p50", "#1f77b4", by(&|m| m.eta_error_s.p50)),
            ("p90", "#ff7f0e", by(&|m| m.eta_error_s.p90)),
        ],
        y_min: 0.0,
    }
    .draw(&mut body);
    document(720.0, &title(r), &body)
}

/// timeline.svg: admissions per second, active sessions and the line, over the run.
pub fn timeline(r: &Report) -> String {
    let pw = W - LEFT - RIGHT;
    let series = |f: fn(&crate::sim::Second) -> u64| -> Vec<(f64, f64)> {
        r.seconds
            .iter()
            .map(|s| (s.second as f64, f(s) as f64))
            .collect()
    };
    let mut body = String::new();
    Panel {
        f: Frame {
            x: LEFT,
            y: 64.0,
            w: pw,
            h: 250.0,
        },
        title: "(a) admissions per second (what the booking service receives)",
        xlabel: "second",
        ylabel: "admitted",
        series: vec![("admitted", "#2ca02c", series(|s| s.admitted))],
        y_min: 0.0,
    }
    .draw(&mut body);
    Panel {
        f: Frame {
            x: LEFT,
            y: 400.0,
            w: pw,
            h: 250.0,
        },
        title: "(b) the line and the active sessions",
        xlabel: "second",
        ylabel: "people",
        series: vec![
            ("waiting", "#1f77b4", series(|s| s.waiting)),
            ("active sessions", "#9467bd", series(|s| s.active)),
        ],
        y_min: 0.0,
    }
    .draw(&mut body);
    document(720.0, &title(r), &body)
}
