//! The plan: the line a sale builds, second by second, and what holding it costs, each number
//! with how it was computed and the BENCHMARKS.md row it comes from. Pure functions of the
//! inputs and the [`Costs`]: no clock, no I/O.

use serde::Serialize;

use crate::figures::{Costs, Figure};

/// Sockets at the top of a gateway's `USHER_MAX_SOCKETS` kept for health checks and scrapes
/// (`usher-gateway --health-reserve-sockets`, default 64): open files a gateway holds beyond
/// its streams.
pub const HEALTH_RESERVE_SOCKETS: u64 = 64;

/// The sale and the deployment limits a plan is for.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inputs {
    /// People joining in each second after the opening.
    pub joins: Vec<u64>,
    /// Admissions per second (the queue's `admit_per_second`).
    pub rate: f64,
    /// Share (0 to 1) of the waiting places whose browser is away (disconnected within the
    /// queue's grace): no stream held, more Redis memory.
    pub away_share: f64,
    /// The queue binds places to a browser key (`"bind": "browser_key"`).
    pub bind: bool,
    /// Each gateway's open-files limit.
    pub open_files: u64,
    /// Each gateway's `USHER_MAX_CONNECTIONS`.
    pub max_connections: u64,
    /// Spare capacity planned over the peak, in percent.
    pub headroom_percent: u64,
}

/// One number of the plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Line {
    pub quantity: &'static str,
    pub value: f64,
    pub unit: &'static str,
    /// The arithmetic, with the figures put in.
    pub how: String,
    /// Where its inputs come from: BENCHMARKS.md rows (`Section: row`), the arrival curve or
    /// a gateway default.
    pub source: String,
}

/// The plan, in the order a reader needs it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    pub crowd: Line,
    pub peak_join_rate: Line,
    pub peak_waiting: Line,
    pub longest_wait: Line,
    pub line_empties: Line,
    pub peak_streams: Line,
    pub streams_per_gateway_max: Line,
    pub gateways_for_streams: Line,
    pub gateways_for_joins: Line,
    pub gateways: Line,
    pub streams_per_gateway: Line,
    pub open_files_per_gateway: Line,
    pub gateway_rss: Line,
    pub gateway_cpu_joins: Line,
    pub redis_memory: Line,
    pub redis_commands_waiting: Line,
    pub redis_cpu: Line,
    pub dispatcher_replicas: Line,
    pub dispatcher_cpu: Line,
    /// What the numbers take for granted, in words.
    pub assumptions: Vec<String>,
}

impl Plan {
    /// Every line with its JSON key, in order.
    pub fn lines(&self) -> [(&'static str, &Line); 19] {
        [
            ("crowd", &self.crowd),
            ("peak_join_rate", &self.peak_join_rate),
            ("peak_waiting", &self.peak_waiting),
            ("longest_wait", &self.longest_wait),
            ("line_empties", &self.line_empties),
            ("peak_streams", &self.peak_streams),
            ("streams_per_gateway_max", &self.streams_per_gateway_max),
            ("gateways_for_streams", &self.gateways_for_streams),
            ("gateways_for_joins", &self.gateways_for_joins),
            ("gateways", &self.gateways),
            ("streams_per_gateway", &self.streams_per_gateway),
            ("open_files_per_gateway", &self.open_files_per_gateway),
            ("gateway_rss", &self.gateway_rss),
            ("gateway_cpu_joins", &self.gateway_cpu_joins),
            ("redis_memory", &self.redis_memory),
            ("redis_commands_waiting", &self.redis_commands_waiting),
            ("redis_cpu", &self.redis_cpu),
            ("dispatcher_replicas", &self.dispatcher_replicas),
            ("dispatcher_cpu", &self.dispatcher_cpu),
        ]
    }
}

/// Waiting places at the end of each second of the curve: each second its joins come in and
/// `rate` places are admitted (fewer when fewer wait). Returns them and the second (counted
/// from the opening) by which the line is empty.
pub fn simulate(joins: &[u64], rate: f64) -> (Vec<f64>, u64) {
    let mut waiting = 0.0_f64;
    let queue: Vec<f64> = joins
        .iter()
        .map(|j| {
            waiting = (waiting + *j as f64 - rate).max(0.0);
            waiting
        })
        .collect();
    let len = joins.len() as u64;
    let empties = if waiting > 0.0 {
        // After the last arrivals only admissions: `rate` a second.
        len + (waiting / rate).ceil() as u64
    } else if let Some(t) = queue.iter().rposition(|w| *w > 0.0) {
        // Emptied during the second after the last one that ended with people waiting.
        t as u64 + 2
    } else {
        // Never a line: everyone admitted in the second they joined.
        joins
            .iter()
            .rposition(|j| *j > 0)
            .map_or(0, |t| t as u64 + 1)
    };
    (queue, empties)
}

/// `x / per`, rounded up, with a little slack so that 7.000000001 stays 7.
fn ceil_div(x: f64, per: f64) -> f64 {
    (x / per - 1e-9).ceil().max(0.0)
}

/// The plan for `inputs` at `costs`.
pub fn plan(inputs: &Inputs, costs: &Costs) -> Plan {
    let c = costs;
    let h = 1.0 + inputs.headroom_percent as f64 / 100.0;
    let hp = inputs.headroom_percent;
    let rate = inputs.rate;
    let crowd: u64 = inputs.joins.iter().sum();
    let peak_join = inputs.joins.iter().copied().max().unwrap_or(0) as f64;
    let (queue, empties) = simulate(&inputs.joins, rate);
    let peak_waiting = queue.iter().copied().fold(0.0, f64::max).ceil();
    let away = inputs.away_share;
    let peak_streams = (peak_waiting * (1.0 - away)).ceil();
    let load_gw = c.load_gateways.value;
    let curve = "arrival curve";
    let line_src = "arrival curve, --rate";

    // A gateway's streams: its own cap, the open files left after the reserve, and never more
    // than a gateway of the load run held (more was not measured).
    let measured_per_gw = (c.held.value / load_gw).floor();
    let files_cap = inputs.open_files.saturating_sub(HEALTH_RESERVE_SOCKETS) as f64;
    // At least one, so that a limit below the reserve cannot divide by zero.
    let per_gw = (inputs.max_connections as f64)
        .min(files_cap)
        .min(measured_per_gw)
        .max(1.0);
    let joins_per_gw = c.join_rate.value / load_gw;
    let for_streams = ceil_div(peak_streams * h, per_gw);
    let for_joins = ceil_div(peak_join * h, joins_per_gw);
    let gateways = (for_streams.max(for_joins) + 1.0).max(2.0);
    let per_gw_peak = (peak_streams / (gateways - 1.0)).ceil();
    let idle_mib = c.idle_mib_all_gateways.value / load_gw;
    let rss = idle_mib + per_gw_peak * c.kib_per_connection.value / 1024.0;
    let bind_bytes = if inputs.bind {
        c.bytes_per_bound.value
    } else {
        0.0
    };
    let bytes_per_place =
        (1.0 - away) * c.bytes_per_waiting.value + away * c.bytes_per_away.value + bind_bytes;
    let redis_mib = peak_waiting * bytes_per_place * h / (1024.0 * 1024.0);
    let redis_us = peak_join * c.redis_us_per_join.value + rate * c.redis_us_per_admission.value;
    let dispatcher_us_per_admission =
        c.dispatcher_ms_per_burst.value * 1000.0 / c.burst_places.value;

    let src = |figures: &[&Figure]| {
        figures
            .iter()
            .map(|f| f.source.as_str())
            .fold(Vec::<&str>::new(), |mut v, s| {
                if !v.contains(&s) {
                    v.push(s);
                }
                v
            })
            .join("; ")
    };
    let line = |quantity, value, unit, how: String, source: String| Line {
        quantity,
        value,
        unit,
        how,
        source,
    };
    let n = |x: f64| fmt_number(x);

    let mut assumptions = vec![
        format!(
            "Every cost was measured on one {}-core machine shared by Redis, the dispatcher, {} gateways and the load generator (BENCHMARKS.md, \"The machine\" and \"Load\"). Nothing is scaled to other machines: a gateway with cores of its own may take more joins a second than planned here.",
            n(c.machine_vcpus.value), c.load_gateways.text
        ),
        format!("The line: in each second that second's joins come in and {} places are admitted; an admitted browser leaves its stream, so streams held are the places waiting that are not away.", n(rate)),
        "Gateway memory is resident memory (RSS). The kernel's socket buffers, which a container's memory limit also counts, are not measured and come on top.".to_owned(),
        format!("Headroom {hp}% is added to the gateway counts and to Redis memory, not to the CPU figures."),
    ];
    if inputs.max_connections as f64 > files_cap {
        assumptions.push(format!(
            "USHER_MAX_CONNECTIONS {} is above the open-files limit {} less the {HEALTH_RESERVE_SOCKETS} reserve sockets: such a gateway refuses connections (`accept failed`) before its cap, so the plan counts at most {} streams on one. Raise the limit or lower the cap.",
            n(inputs.max_connections as f64), n(inputs.open_files as f64), n(files_cap)
        ));
    }
    if peak_streams > c.held.value {
        assumptions.push(format!(
            "{} streams at the peak is more than the {} held at once in the load run: each gateway holds only its own, but that many together was not measured.",
            n(peak_streams), c.held.text
        ));
    }
    if gateways > load_gw {
        assumptions.push(format!(
            "{} gateways is more than the {} of the load run: each adds its own stream reads and heartbeats to Redis' commands/s, not measured beyond {}.",
            n(gateways), c.load_gateways.text, c.load_gateways.text
        ));
    }
    if redis_us > 1e6 {
        assumptions.push("Redis needs more than one core at the peak: one queue's keys are one slot, served by one Redis core, so split the sale into several queues (docs/deploying.md, \"Sizing Redis\").".to_owned());
    }

    Plan {
        crowd: line(
            "people in the crowd",
            crowd as f64,
            "people",
            format!("the arrival curve's {} seconds of joins, added up", inputs.joins.len()),
            curve.into(),
        ),
        peak_join_rate: line(
            "peak join rate",
            peak_join,
            "joins/s",
            "the busiest second of the arrival curve".into(),
            curve.into(),
        ),
        peak_waiting: line(
            "peak places waiting",
            peak_waiting,
            "places",
            format!("each second: waiting + joins - {} admitted, never below 0; the largest", n(rate)),
            line_src.into(),
        ),
        longest_wait: line(
            "longest wait",
            (peak_waiting / rate).ceil(),
            "s",
            format!("{} waiting / {} admitted a second", n(peak_waiting), n(rate)),
            line_src.into(),
        ),
        line_empties: line(
            "line empty after",
            empties as f64,
            "s",
            "from the opening: the curve, then what still waits at the rate".into(),
            line_src.into(),
        ),
        peak_streams: line(
            "peak streams held",
            peak_streams,
            "streams",
            format!("{} waiting x (1 - {} away)", n(peak_waiting), n(away)),
            format!("{line_src}, --away-share"),
        ),
        streams_per_gateway_max: line(
            "streams one gateway may hold",
            per_gw,
            "streams",
            format!(
                "least of USHER_MAX_CONNECTIONS {}, open files {} - {} reserve, and {} held / {} gateways measured",
                n(inputs.max_connections as f64),
                n(inputs.open_files as f64),
                HEALTH_RESERVE_SOCKETS,
                c.held.text,
                c.load_gateways.text
            ),
            format!("{}; --max-connections, --open-files", src(&[&c.held])),
        ),
        gateways_for_streams: line(
            "gateways for the streams",
            for_streams,
            "gateways",
            format!("{} streams x {h} headroom / {}, rounded up", n(peak_streams), n(per_gw)),
            src(&[&c.held]),
        ),
        gateways_for_joins: line(
            "gateways for the joins",
            for_joins,
            "gateways",
            format!(
                "{} joins/s x {h} headroom / ({} joins/s / {} gateways = {} each), rounded up",
                n(peak_join),
                c.join_rate.text,
                c.load_gateways.text,
                n(joins_per_gw)
            ),
            src(&[&c.join_rate, &c.load_gateways]),
        ),
        gateways: line(
            "gateways",
            gateways,
            "gateways",
            format!(
                "the larger of the two + 1, at least 2: one drained or lost moves its browsers to the others (all resumed within {} ms in the test)",
                c.gateway_failover_ms.text
            ),
            src(&[&c.gateway_failover_ms]),
        ),
        streams_per_gateway: line(
            "streams per gateway at the peak",
            per_gw_peak,
            "streams",
            format!("{} streams / ({} - 1 drained or lost)", n(peak_streams), n(gateways)),
            line_src.into(),
        ),
        open_files_per_gateway: line(
            "open files per gateway at the peak",
            per_gw_peak + HEALTH_RESERVE_SOCKETS as f64,
            "files",
            format!(
                "{} streams + {} reserve sockets; limit {}",
                n(per_gw_peak),
                HEALTH_RESERVE_SOCKETS,
                n(inputs.open_files as f64)
            ),
            "usher-gateway --health-reserve-sockets default; --open-files".into(),
        ),
        gateway_rss: line(
            "gateway RSS at the peak",
            round1(rss),
            "MiB",
            format!(
                "{} MiB / {} gateways idle + {} streams x {} KiB",
                c.idle_mib_all_gateways.text,
                c.load_gateways.text,
                n(per_gw_peak),
                c.kib_per_connection.text
            ),
            src(&[&c.kib_per_connection, &c.idle_mib_all_gateways]),
        ),
        gateway_cpu_joins: line(
            "gateway CPU at the peak join rate, all gateways",
            round2(peak_join * c.gateway_us_per_join.value / 1e6),
            "cores",
            format!("{} joins/s x {} µs", n(peak_join), c.gateway_us_per_join.text),
            src(&[&c.gateway_us_per_join]),
        ),
        redis_memory: line(
            "Redis memory at the peak",
            round1(redis_mib),
            "MiB",
            format!(
                "{} waiting x ({} x {} B + {} away x {} B{}) x {h} headroom",
                n(peak_waiting),
                n(1.0 - away),
                c.bytes_per_waiting.text,
                n(away),
                c.bytes_per_away.text,
                if inputs.bind {
                    format!(" + {} B bound", c.bytes_per_bound.text)
                } else {
                    String::new()
                }
            ),
            if inputs.bind {
                src(&[&c.bytes_per_waiting, &c.bytes_per_away, &c.bytes_per_bound])
            } else {
                src(&[&c.bytes_per_waiting, &c.bytes_per_away])
            },
        ),
        redis_commands_waiting: line(
            "Redis commands/s while waiting",
            c.waiting_commands_per_s.value,
            "commands/s",
            format!(
                "as measured with {} waiting on {} gateways; it does not grow with the places waiting",
                c.held.text, c.load_gateways.text
            ),
            src(&[&c.waiting_commands_per_s, &c.held]),
        ),
        redis_cpu: line(
            "Redis CPU at the peak",
            round2(redis_us / 1e6),
            "cores",
            format!(
                "{} joins/s x {} µs + {} admissions/s x {} µs",
                n(peak_join),
                c.redis_us_per_join.text,
                n(rate),
                c.redis_us_per_admission.text
            ),
            src(&[&c.redis_us_per_join, &c.redis_us_per_admission]),
        ),
        dispatcher_replicas: line(
            "dispatcher replicas",
            c.dispatcher_replicas.value.max(2.0),
            "replicas",
            "one drives each queue (a lease); the other takes over when it dies: 0 lost, 0 duplicated in the test".into(),
            src(&[&c.dispatcher_replicas]),
        ),
        dispatcher_cpu: line(
            "dispatcher CPU at the rate",
            round1(rate * dispatcher_us_per_admission / 1e3),
            "ms/s",
            format!(
                "{} admissions/s x {} ms{} / {} places",
                n(rate),
                n(c.dispatcher_ms_per_burst.value),
                // A range is planned at its upper end (`figures::number_at`): say so.
                if c.dispatcher_ms_per_burst.text.contains('–') {
                    format!(" (the upper end of {})", c.dispatcher_ms_per_burst.text)
                } else {
                    String::new()
                },
                c.burst_places.text
            ),
            src(&[&c.dispatcher_ms_per_burst]),
        ),
        assumptions,
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// `1,234,567`, with up to two decimals when not whole.
pub fn fmt_number(x: f64) -> String {
    let fixed = format!("{:.2}", x.abs());
    let (int, frac) = fixed.split_once('.').unwrap_or((fixed.as_str(), ""));
    let mut out = String::new();
    if x < 0.0 {
        out.push('-');
    }
    for (i, d) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(d);
    }
    let frac = frac.trim_end_matches('0');
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

#[cfg(test)]
mod tests;
