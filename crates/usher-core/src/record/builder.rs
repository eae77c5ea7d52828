//! [`ReportBuilder`]: a [`FairnessReport`] from a record's entries, in one pass (fed a slice
//! at a time by `crate::store::Store::fairness_report`).
//!
//! Memory: the builder keeps a few integers per place (admitted places' arrival, admission,
//! lane and flags; each waiting time), never the entries themselves: about 90 bytes a place
//! at its peak with the sorts' copies (BENCHMARKS.md, "The fairness record": 11 MB for
//! 100,000 places, 90 MB for a million), so the record's largest size (crate::record, 10
//! million places) takes about 0.9 GB.

use std::collections::{BTreeMap, HashMap};

use super::report::{
    Abandonment, DrawProof, EtaAccuracy, Explained, FairnessReport, MinuteWaits, NetworkCount,
    Networks, Order, Overtaken, ProofOfWork, RecordInfo, Sessions, NETWORKS_LISTED,
    OVERTAKEN_LISTED,
};
use super::stats::{inversions, kendall_tau, percentile, ranks};
use super::{Entry, Kind, LeaveReason, Outcome};

/// What the record's meta says, for the builder.
#[derive(Debug, Clone)]
pub struct RecordMeta {
    pub queue: String,
    /// The place id before the record's first place.
    pub seq0: u64,
    /// When the record began (ms since the epoch).
    pub since_ms: u64,
    pub overflow: u64,
    pub retention_seconds: u64,
    pub expires_in_seconds: Option<u64>,
    /// The queue is closed (meta `open` = `0`).
    pub closed: bool,
    pub draw: Option<DrawProof>,
}

/// An admitted place, as the order statistics need it.
#[derive(Debug, Clone, Copy)]
struct Admitted {
    arrival: u32,
    admission: u32,
    index: u32,
    lane: u8,
    away: bool,
    drawn: bool,
    network: Option<u32>,
}

#[derive(Default)]
struct Minute {
    joined: u64,
    waits_ms: Vec<u32>,
    etas: Vec<u32>,
}

/// Builds a [`FairnessReport`] from entries added in any order.
pub struct ReportBuilder {
    meta: RecordMeta,
    places: u64,
    admitted: Vec<Admitted>,
    minutes: BTreeMap<u32, Minute>,
    eta_errors: Vec<i64>,
    within_eta: u64,
    abandonment: BTreeMap<u32, Abandonment>,
    sessions: Sessions,
    pow: BTreeMap<u8, u64>,
    solves: Vec<u32>,
    /// Neither admitted nor recorded leaving.
    waiting: u64,
    door: u64,
}

fn seconds(ms: u32) -> f64 {
    f64::from(ms) / 1000.0
}

impl ReportBuilder {
    pub fn new(meta: RecordMeta) -> Self {
        Self {
            meta,
            places: 0,
            admitted: Vec::new(),
            minutes: BTreeMap::new(),
            eta_errors: Vec::new(),
            within_eta: 0,
            abandonment: BTreeMap::new(),
            sessions: Sessions::default(),
            pow: BTreeMap::new(),
            solves: Vec::new(),
            waiting: 0,
            door: 0,
        }
    }

    /// Takes one entry into account.
    pub fn add(&mut self, e: &Entry) {
        if e.kind == Kind::Superseded {
            return;
        }
        // A pre-queue place that left before the draw still joined, waited and left.
        self.places += 1;
        let minute = self.minutes.entry(e.joined_ms / 60_000).or_default();
        minute.joined += 1;
        if e.pow_difficulty > 0 {
            *self.pow.entry(e.pow_difficulty).or_default() += 1;
        }
        if let Some(s) = e.issue_to_join_ms {
            self.solves.push(s);
        }
        if let (Some(at), Some(admission)) = (e.admitted_ms, e.admission) {
            let wait = at.saturating_sub(e.joined_ms);
            minute.waits_ms.push(wait);
            if let Some(eta) = e.eta_seconds {
                minute.etas.push(u32::from(eta));
                let eta_ms = i64::from(eta) * 1000;
                self.eta_errors.push(i64::from(wait) - eta_ms);
                if i64::from(wait) <= eta_ms + eta_ms / 10 + 5_000 {
                    self.within_eta += 1;
                }
            }
            self.admitted.push(Admitted {
                arrival: e.arrival(),
                admission,
                index: e.index,
                lane: e.lane,
                away: e.went_away,
                drawn: e.kind == Kind::Drawn,
                network: e.network,
            });
            let s = &mut self.sessions;
            s.admitted += 1;
            s.passthrough += u64::from(e.passthrough);
            match e.outcome {
                Some(Outcome::Booked) => s.booked += 1,
                Some(Outcome::Released) => s.released += 1,
                Some(Outcome::Expired) => s.expired += 1,
                Some(Outcome::NoShow) => s.no_show += 1,
                None => s.open += 1,
            }
        } else if e.left == Some(LeaveReason::Door) {
            self.door += 1;
        } else if let (Some(reason), Some(at)) = (e.left, e.left_ms) {
            let m = at.saturating_sub(e.joined_ms) / 60_000;
            let row = self.abandonment.entry(m).or_insert(Abandonment {
                minutes_waited: m,
                left: 0,
                away_expired: 0,
                dropped: 0,
            });
            match reason {
                LeaveReason::Left => row.left += 1,
                LeaveReason::AwayExpired => row.away_expired += 1,
                LeaveReason::GatewayGone | LeaveReason::Unbound => row.dropped += 1,
                LeaveReason::Door => {}
            }
        } else {
            self.waiting += 1;
        }
    }

    /// The report.
    pub fn finish(mut self) -> FairnessReport {
        self.admitted.sort_unstable_by_key(|a| (a.arrival, a.index));
        let order = self.order();
        let networks = self.networks();
        let waits = self
            .minutes
            .iter_mut()
            .map(|(&minute, m)| {
                m.waits_ms.sort_unstable();
                m.etas.sort_unstable();
                let p = |q: f64| percentile(&m.waits_ms, q).map(seconds);
                MinuteWaits {
                    minute,
                    joined: m.joined,
                    admitted: m.waits_ms.len() as u64,
                    p50_seconds: p(50.0),
                    p90_seconds: p(90.0),
                    p99_seconds: p(99.0),
                    max_seconds: m.waits_ms.last().copied().map(seconds),
                    eta_p50_seconds: percentile(&m.etas, 50.0).map(f64::from),
                }
            })
            .collect();
        self.eta_errors.sort_unstable();
        let n = self.eta_errors.len();
        let mut abs: Vec<u32> = self
            .eta_errors
            .iter()
            .map(|e| u32::try_from(e.unsigned_abs()).unwrap_or(u32::MAX))
            .collect();
        abs.sort_unstable();
        let eta = EtaAccuracy {
            compared: n as u64,
            median_error_seconds: (n > 0).then(|| self.eta_errors[(n - 1) / 2] as f64 / 1000.0),
            p90_abs_error_seconds: percentile(&abs, 90.0).map(seconds),
            within_eta: (n > 0).then(|| self.within_eta as f64 / n as f64),
        };
        self.solves.sort_unstable();
        let pow = ProofOfWork {
            joins: self.pow.values().sum(),
            difficulty: self.pow,
            issue_to_join_p50_seconds: percentile(&self.solves, 50.0).map(seconds),
            issue_to_join_p90_seconds: percentile(&self.solves, 90.0).map(seconds),
            issue_to_join_p99_seconds: percentile(&self.solves, 99.0).map(seconds),
        };
        FairnessReport {
            queue: self.meta.queue.clone(),
            recorded: true,
            record: Some(RecordInfo {
                since: crate::time::rfc3339_ms(self.meta.since_ms),
                places: self.places,
                overflow: self.meta.overflow,
                retention_seconds: self.meta.retention_seconds,
                expires_in_seconds: self.meta.expires_in_seconds,
                closed: self.meta.closed,
                waiting_at_close: if self.meta.closed { self.waiting } else { 0 },
                still_waiting: if self.meta.closed { 0 } else { self.waiting },
                let_through_door: self.door,
            }),
            order: Some(order),
            waits: Some(waits),
            eta: Some(eta),
            abandonment: Some(self.abandonment.into_values().collect()),
            sessions: Some(self.sessions),
            networks: Some(networks),
            proof_of_work: Some(pow),
            draw: Some(self.meta.draw),
        }
    }

    /// Inversions by explanation. Each pass counts the inversions within a subset of the
    /// admitted places (in arrival order): all of them (T); within each lane (S); within each
    /// lane among the places never away (N); and those of them not drawn (C). A pair in two
    /// lanes is in T only: lane = T − S; a same-lane pair with an away place: away = S − N;
    /// with a drawn place: draw = N − C; the rest, C, is unexplained. Per place likewise.
    fn order(&self) -> Order {
        let a = &self.admitted;
        let n = a.len();
        let admissions: Vec<u32> = a.iter().map(|x| x.admission).collect();
        let rank = ranks(&admissions);
        let mut per = [vec![0u64; n], vec![0u64; n], vec![0u64; n], vec![0u64; n]];
        let keep: [&dyn Fn(&Admitted) -> bool; 4] =
            [&|_| true, &|_| true, &|x| !x.away, &|x| !x.away && !x.drawn];
        let mut totals = [0u64; 4];
        for pass in 0..4 {
            let by_lane = pass > 0;
            let mut groups: HashMap<u8, Vec<usize>> = HashMap::new();
            for (i, x) in a.iter().enumerate() {
                if keep[pass](x) {
                    groups
                        .entry(if by_lane { x.lane } else { 0 })
                        .or_default()
                        .push(i);
                }
            }
            for idx in groups.values() {
                let seq = ranks(&idx.iter().map(|&i| rank[i]).collect::<Vec<_>>());
                let mut counts = vec![0u64; idx.len()];
                totals[pass] += inversions(&seq, idx.len(), Some(&mut counts));
                for (j, &i) in idx.iter().enumerate() {
                    per[pass][i] += counts[j];
                }
            }
        }
        let explained = |t: [u64; 4]| Explained {
            lane: t[0] - t[1],
            away: t[1] - t[2],
            draw: t[2] - t[3],
            unexplained: t[3],
        };
        let overtaken = (0..n)
            .filter(|&i| per[0][i] > 0)
            .take(OVERTAKEN_LISTED)
            .map(|i| Overtaken {
                place: self.meta.seq0 + u64::from(a[i].index) + 1,
                lane: a[i].lane,
                admission: a[i].admission,
                by: explained([per[0][i], per[1][i], per[2][i], per[3][i]]),
            })
            .collect();
        // The connected places alone, all lanes together.
        let connected: Vec<u32> = (0..n).filter(|&i| !a[i].away).map(|i| rank[i]).collect();
        let m = connected.len();
        let inv = inversions(&ranks(&connected), m, None);
        Order {
            admitted: n as u64,
            stayed_connected: m as u64,
            inversions: inv,
            kendall_tau: kendall_tau(m as u64, inv),
            explained: explained(totals),
            overtaken,
        }
    }

    fn networks(&self) -> Vec<Networks> {
        let mut by_admission: Vec<(u32, Option<u32>)> = self
            .admitted
            .iter()
            .map(|a| (a.admission, a.network))
            .collect();
        by_admission.sort_unstable_by_key(|x| x.0);
        [1_000u64, 10_000]
            .into_iter()
            .map(|window| {
                let first = &by_admission[..by_admission.len().min(window as usize)];
                let mut counts: HashMap<u32, u64> = HashMap::new();
                for net in first.iter().filter_map(|x| x.1) {
                    *counts.entry(net).or_default() += 1;
                }
                let mut sorted: Vec<(u32, u64)> = counts.into_iter().collect();
                sorted.sort_unstable_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
                let total = first.len() as u64;
                let share = |c: u64| {
                    if total == 0 {
                        0.0
                    } else {
                        c as f64 / total as f64
                    }
                };
                Networks {
                    window,
                    admissions: total,
                    with_network: first.iter().filter(|x| x.1.is_some()).count() as u64,
                    distinct_networks: sorted.len() as u64,
                    top1_share: share(sorted.first().map_or(0, |x| x.1)),
                    top10_share: share(sorted.iter().take(10).map(|x| x.1).sum()),
                    busiest: sorted
                        .iter()
                        .take(NETWORKS_LISTED)
                        .map(|&(net, c)| NetworkCount {
                            network: format!("{net:08x}"),
                            admissions: c,
                            share: share(c),
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u32, lane: u8, admission: Option<u32>) -> Entry {
        Entry {
            index,
            kind: Kind::Joined,
            lane,
            left: None,
            outcome: None,
            went_away: false,
            pow_difficulty: 0,
            eta_seconds: Some(10),
            joined_ms: index * 1000,
            admitted_ms: admission.map(|a| 20_000 + a * 1000),
            admission,
            left_ms: None,
            network: Some(7),
            origin: 0,
            issue_to_join_ms: None,
            passthrough: false,
        }
    }

    fn meta() -> RecordMeta {
        RecordMeta {
            queue: "q".into(),
            seq0: 100,
            since_ms: 0,
            overflow: 0,
            retention_seconds: 3600,
            expires_in_seconds: None,
            closed: false,
            draw: None,
        }
    }

    #[test]
    fn inversions_are_explained_by_lane_away_and_draw() {
        let mut b = ReportBuilder::new(meta());
        // Arrivals 0..6. Lane 1 (place 1) admitted first: overtakes place 0 (lane).
        b.add(&entry(0, 0, Some(2)));
        b.add(&entry(1, 1, Some(1)));
        // Place 2 went away and came back late: overtaken by 3 (away).
        let mut away = entry(2, 0, Some(4));
        away.went_away = true;
        b.add(&away);
        b.add(&entry(3, 0, Some(3)));
        // Places 4 and 5 drawn in reverse of their pre-queue arrival (draw).
        let mut d1 = entry(4, 0, Some(6));
        d1.kind = Kind::Drawn;
        d1.origin = 4;
        let mut d2 = entry(5, 0, Some(5));
        d2.kind = Kind::Drawn;
        d2.origin = 5;
        b.add(&d1);
        b.add(&d2);
        let r = b.finish();
        let o = r.order.expect("order");
        assert_eq!(o.admitted, 6);
        assert_eq!(
            o.explained,
            Explained {
                lane: 1,
                away: 1,
                draw: 1,
                unexplained: 0
            }
        );
        assert_eq!(o.stayed_connected, 5);
        // Connected: 0(2) 1(1) 3(3) 4(6) 5(5): two inversions over 10 pairs.
        assert_eq!(o.inversions, 2);
        assert!((o.kendall_tau.expect("tau") - 0.6).abs() < 1e-12);
        let places: Vec<u64> = o.overtaken.iter().map(|x| x.place).collect();
        assert_eq!(places, vec![101, 103, 105]);
        assert_eq!(o.overtaken[1].by.away, 1);
    }

    #[test]
    fn waits_eta_abandonment_sessions_and_networks() {
        let mut b = ReportBuilder::new(meta());
        let mut a = entry(0, 0, Some(1));
        a.outcome = Some(Outcome::Booked);
        b.add(&a); // waited 21 s, ETA 10 s
        let mut l = entry(1, 0, None);
        l.left = Some(LeaveReason::Left);
        l.left_ms = Some(1000 + 125_000);
        b.add(&l);
        let r = b.finish();
        let w = r.waits.expect("waits");
        assert_eq!(w[0].joined, 2);
        assert_eq!(w[0].p50_seconds, Some(21.0));
        let e = r.eta.expect("eta");
        assert_eq!(e.median_error_seconds, Some(11.0));
        assert_eq!(e.within_eta, Some(0.0));
        let ab = r.abandonment.expect("abandonment");
        assert_eq!((ab[0].minutes_waited, ab[0].left), (2, 1));
        let s = r.sessions.expect("sessions");
        assert_eq!((s.admitted, s.booked, s.open), (1, 1, 0));
        let n = &r.networks.expect("networks")[0];
        assert_eq!(
            (n.admissions, n.distinct_networks, n.top1_share),
            (1, 1, 1.0)
        );
        assert_eq!(n.busiest[0].network, "00000007");
    }
}
