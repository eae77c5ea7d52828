//! SVG drawing primitives shared by the load generator's plot (`plot`) and the rehearsal's
//! (`usher-rehearse`): framed panels with titles and axis labels, grid lines, polylines and
//! legends, written by hand as text (no plotting crate).

use std::fmt::Write as _;

/// Panel geometry: x0, y0 (top), width, height.
#[derive(Clone, Copy)]
pub struct Frame {
    pub x: f64,
    pub y: f64,
    pub w: f64,
    pub h: f64,
}

pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" tick step for an axis from 0 to `max` with about `n` ticks.
pub fn nice_step(max: f64, n: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let raw = max / n;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

pub fn fmt_num(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if v >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

pub fn polyline(s: &mut String, pts: &[(f64, f64)], color: &str) {
    polyline_w(s, pts, color, 2.0, 1.0);
}

pub fn polyline_w(s: &mut String, pts: &[(f64, f64)], color: &str, width: f64, opacity: f64) {
    if pts.is_empty() {
        return;
    }
    let d: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    let _ = writeln!(
        s,
        r#"<polyline fill="none" stroke="{color}" stroke-width="{width}" stroke-opacity="{opacity}" points="{}"/>"#,
        d.join(" ")
    );
}

pub fn legend(s: &mut String, f: Frame, row: usize, color: &str, lines: &[&str]) {
    let x = f.x + f.w + 16.0;
    let y = f.y + 14.0 + row as f64 * 20.0;
    let _ = writeln!(
        s,
        r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="3"/>"#,
        x + 18.0,
    );
    for (i, text) in lines.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="11">{}</text>"#,
            x + 24.0,
            y + 4.0 + i as f64 * 15.0,
            esc(text)
        );
    }
}

pub fn frame(s: &mut String, f: Frame, title: &str, xlabel: &str, ylabel: &str) {
    let _ = writeln!(
        s,
        r##"<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#888"/>"##,
        f.x, f.y, f.w, f.h
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        f.x,
        f.y - 12.0,
        esc(title)
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle">{}</text>"#,
        f.x + f.w / 2.0,
        f.y + f.h + 36.0,
        esc(xlabel)
    );
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" font-size="12" text-anchor="middle" transform="rotate(-90 {} {})">{}</text>"#,
        f.x - 58.0,
        f.y + f.h / 2.0,
        f.x - 58.0,
        f.y + f.h / 2.0,
        esc(ylabel)
    );
}

pub fn grid_x(s: &mut String, f: Frame, x: f64, label: &str) {
    let _ = writeln!(
        s,
        r##"<line x1="{x:.1}" y1="{}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"##,
        f.y,
        f.y + f.h,
        f.y + f.h + 16.0,
        esc(label)
    );
}

pub fn grid_y(s: &mut String, f: Frame, y: f64, label: &str) {
    let _ = writeln!(
        s,
        r##"<line x1="{}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
        f.x,
        f.x + f.w,
        f.x - 6.0,
        y + 4.0,
        esc(label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped_and_numbers_are_short() {
        assert_eq!(esc("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
        assert_eq!(fmt_num(2_500_000.0), "2.5M");
        assert_eq!(fmt_num(45_000.0), "45k");
        assert_eq!(fmt_num(12.0), "12");
    }
}
