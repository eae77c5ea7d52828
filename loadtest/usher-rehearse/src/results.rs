//! The figures of a run: wait percentiles by arrival minute, the ETA shown at join against
//! the actual wait, when the line empties, and Redis' peak memory and commands.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::scenario::{Behaviours, Scenario};
use crate::sim::{RedisSample, Run, Second, SoldOut};

/// The value at quantile `q` (0..=1) of sorted `v` (nearest rank); `None` when empty.
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    Some(v[rank - 1])
}

/// Percentiles of a set of seconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Spread {
    pub count: usize,
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Spread {
    pub fn of(mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self {
            count: v.len(),
            p50: quantile(&v, 0.5),
            p90: quantile(&v, 0.9),
            p99: quantile(&v, 0.99),
            max: v.last().copied(),
        }
    }
}

/// The people who arrived in one minute.
#[derive(Debug, Clone, Serialize)]
pub struct Minute {
    pub minute: u64,
    pub joined: u64,
    pub admitted: u64,
    pub left: u64,
    /// Seconds from join to admission, of those admitted.
    pub wait_s: Spread,
    /// Actual wait − the ETA shown at join, seconds (positive: it took longer than shown).
    pub eta_error_s: Spread,
}

/// The run's headline figures.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub crowd: u64,
    pub joined: u64,
    pub refused: u64,
    pub admitted: u64,
    pub admitted_without_a_join: u64,
    pub left: u64,
    pub still_waiting: u64,
    pub no_shows: u64,
    pub booked: u64,
    pub wait_s: Spread,
    pub eta_error_s: Spread,
    /// When the last place in line was admitted or left (seconds after second 0); `None`
    /// when people were still waiting at the end.
    pub line_empty_at_s: Option<f64>,
    pub peak_waiting: u64,
    pub peak_active: u64,
    pub peak_admitted_per_second: u64,
    pub peak_redis_memory_bytes: u64,
    pub redis_commands: u64,
    pub closed_at_s: Option<u64>,
    pub sold_out: Option<SoldOut>,
    pub simulated_s: f64,
    pub wall_s: f64,
}

/// What the rehearsal ran with.
#[derive(Debug, Clone, Serialize)]
pub struct Inputs {
    pub queue: String,
    pub start: String,
    pub tick_ms: u64,
    pub seed: u64,
    pub crowd: u64,
    pub arrival_seconds: usize,
    pub behaviours: Behaviours,
    pub inventory: Option<u64>,
    pub backend_capacity: Option<u64>,
    pub settings: serde_json::Value,
}

/// rehearsal.json.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub inputs: Inputs,
    pub summary: Summary,
    pub by_arrival_minute: Vec<Minute>,
    pub seconds: Vec<Second>,
    pub redis: Vec<RedisSample>,
}

fn secs(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

impl Report {
    pub fn of(sc: &Scenario, run: Run) -> Self {
        let mut minutes: BTreeMap<u64, (Minute, Vec<f64>, Vec<f64>)> = BTreeMap::new();
        let (mut waits, mut errors) = (Vec::new(), Vec::new());
        let mut resolved_last = 0u64;
        let mut still_waiting = 0;
        for p in run.places.values() {
            let m = p.joined_ms / 60_000;
            let entry = minutes.entry(m).or_insert_with(|| {
                (
                    Minute {
                        minute: m,
                        joined: 0,
                        admitted: 0,
                        left: 0,
                        wait_s: Spread::default(),
                        eta_error_s: Spread::default(),
                    },
                    Vec::new(),
                    Vec::new(),
                )
            });
            entry.0.joined += 1;
            match (p.admitted_ms, p.left_ms) {
                (Some(at), _) => {
                    entry.0.admitted += 1;
                    let wait = secs(at.saturating_sub(p.joined_ms));
                    entry.1.push(wait);
                    waits.push(wait);
                    if let Some(eta) = p.eta_ms {
                        entry.2.push(wait - secs(eta));
                        errors.push(wait - secs(eta));
                    }
                    resolved_last = resolved_last.max(at);
                }
                (None, Some(at)) => {
                    entry.0.left += 1;
                    resolved_last = resolved_last.max(at);
                }
                (None, None) => still_waiting += 1,
            }
        }
        let by_arrival_minute = minutes
            .into_values()
            .map(|(mut m, w, e)| {
                m.wait_s = Spread::of(w);
                m.eta_error_s = Spread::of(e);
                m
            })
            .collect();
        let peak = |f: fn(&Second) -> u64| run.seconds.iter().map(f).max().unwrap_or(0);
        let summary = Summary {
            crowd: sc.crowd(),
            joined: run.places.len() as u64,
            refused: run.refused,
            admitted: run
                .places
                .values()
                .filter(|p| p.admitted_ms.is_some())
                .count() as u64,
            admitted_without_a_join: run.admitted_unmatched,
            left: run
                .places
                .values()
                .filter(|p| p.admitted_ms.is_none() && p.left_ms.is_some())
                .count() as u64,
            still_waiting,
            no_shows: run.no_shows,
            booked: run.booked,
            wait_s: Spread::of(waits),
            eta_error_s: Spread::of(errors),
            line_empty_at_s: (still_waiting == 0).then(|| secs(resolved_last)),
            peak_waiting: peak(|s| s.waiting),
            peak_active: peak(|s| s.active),
            peak_admitted_per_second: peak(|s| s.admitted),
            peak_redis_memory_bytes: run.redis.iter().map(|r| r.used_memory).max().unwrap_or(0),
            redis_commands: run.redis.last().map_or(0, |r| r.commands),
            closed_at_s: run.closed_at_s,
            sold_out: run.sold_out.clone(),
            simulated_s: secs(run.simulated_ms),
            wall_s: secs(run.wall_ms),
        };
        Self {
            inputs: Inputs {
                queue: sc.queue.as_str().to_owned(),
                start: usher_core::time::rfc3339_ms(sc.start_ms),
                tick_ms: sc.tick_ms,
                seed: sc.seed,
                crowd: sc.crowd(),
                arrival_seconds: sc.joins.len(),
                behaviours: sc.behaviours.clone(),
                inventory: sc.inventory,
                backend_capacity: sc.backend_capacity,
                settings: sc.settings_json.clone(),
            },
            summary,
            by_arrival_minute,
            seconds: run.seconds,
            redis: run.redis,
        }
    }

    /// Two lines for the terminal: what happened to the crowd (the same for the same inputs
    /// and seed), then what it cost Redis and how long the run took (these vary a little
    /// from run to run).
    pub fn headline(&self) -> String {
        let s = &self.summary;
        let f = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1} s"));
        format!(
            "{} joined over {:.0} virtual s: {} admitted, {} left, {} still waiting, {} booked; wait p50 {}, p90 {}, p99 {}; ETA error p50 {}; line empty at {}{}\n\
             Redis peak memory {:.1} MiB, {} commands; {:.1} s of wall time",
            s.joined,
            s.simulated_s,
            s.admitted,
            s.left,
            s.still_waiting,
            s.booked,
            f(s.wait_s.p50),
            f(s.wait_s.p90),
            f(s.wait_s.p99),
            f(s.eta_error_s.p50),
            f(s.line_empty_at_s),
            s.sold_out.as_ref().map_or_else(String::new, |so| format!(
                "; sold out at {} s with {} waiting",
                so.second, so.waiting
            )),
            s.peak_redis_memory_bytes as f64 / 1_048_576.0,
            s.redis_commands,
            s.wall_s
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), Some(5.0));
        assert_eq!(quantile(&v, 0.9), Some(9.0));
        assert_eq!(quantile(&v, 0.99), Some(10.0));
        assert_eq!(quantile(&[], 0.5), None);
        let s = Spread::of(vec![3.0, 1.0, 2.0]);
        assert_eq!((s.count, s.p50, s.max), (3, Some(2.0), Some(3.0)));
    }
}
