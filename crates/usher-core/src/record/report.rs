//! A queue's fairness report ([`FairnessReport`]): what each part holds, and its CSV form.
//! `super::builder` makes one from the record's entries.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Most places listed by name in [`Order::overtaken`] (all are counted).
pub const OVERTAKEN_LISTED: usize = 100;
/// Busiest networks listed per window in [`Networks`].
pub const NETWORKS_LISTED: usize = 10;

/// The fairness report of a queue (docs/fairness-report.md says what each part shows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct FairnessReport {
    pub queue: String,
    /// Whether the queue recorded (`"record": true`). When `false`, every other part is
    /// absent: there is nothing to report.
    pub recorded: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waits: Option<Vec<MinuteWaits>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub eta: Option<EtaAccuracy>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub abandonment: Option<Vec<Abandonment>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Sessions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<Networks>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proof_of_work: Option<ProofOfWork>,
    /// A scheduled sale's draw; `null` for a queue without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw: Option<Option<DrawProof>>,
}

/// What the record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecordInfo {
    /// When its first place joined (RFC 3339): minutes in the report count from here.
    pub since: String,
    /// Places recorded (in line; a pre-queue place the draw placed counts once).
    pub places: u64,
    /// Places not recorded because the record was full.
    pub overflow: u64,
    /// Seconds the record is kept after the queue closes.
    pub retention_seconds: u64,
    /// Seconds until it is deleted (`null`: the queue is open, nothing is scheduled).
    pub expires_in_seconds: Option<u64>,
    /// Whether the queue was closed when the report was made.
    pub closed: bool,
    /// Places that joined and were neither admitted nor recorded leaving, in a closed queue:
    /// the close dropped them from the line (`lua/close.lua` records no leave per place).
    pub waiting_at_close: u64,
    /// The same while the queue is open: places still in line (or leaving unrecorded).
    pub still_waiting: u64,
    /// Places let through a gateway's open door (`on_outage: "open"`): out of the line,
    /// admitted without the dispatcher.
    pub let_through_door: u64,
}

/// Arrival order against admission order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Order {
    /// Places admitted.
    pub admitted: u64,
    /// Of those, the ones whose browser stayed connected (never away while waiting).
    pub stayed_connected: u64,
    /// Pairs of connected places admitted out of arrival order (across lanes and the draw
    /// included): 0 for a plain queue.
    pub inversions: u64,
    /// Kendall's tau between arrival and admission order of the connected places (1: in
    /// order); `null` for fewer than two.
    pub kendall_tau: Option<f64>,
    /// Every inversion among all admitted places, by its explanation (a pair counts once, in
    /// this order): the two were in different `lane`s; one was `away`; the `draw` ordered
    /// them; `unexplained` (0 expected).
    pub explained: Explained,
    /// The places overtaken by a later arrival, at most [`OVERTAKEN_LISTED`], each with how
    /// many overtook it and why (first overtaken first, by arrival).
    pub overtaken: Vec<Overtaken>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Explained {
    pub lane: u64,
    pub away: u64,
    pub draw: u64,
    pub unexplained: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Overtaken {
    /// The place id.
    pub place: u64,
    /// Its lane's slot (0: the default lane).
    pub lane: u8,
    pub admission: u32,
    /// The later arrivals admitted before it, by explanation.
    pub by: Explained,
}

/// Waiting times of the places that arrived in one minute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MinuteWaits {
    /// Minutes since the record began.
    pub minute: u32,
    pub joined: u64,
    pub admitted: u64,
    /// Percentiles of the admitted places' waits, in seconds (`null`: none admitted).
    pub p50_seconds: Option<f64>,
    pub p90_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
    pub max_seconds: Option<f64>,
    /// The median ETA these places were shown at join, in seconds.
    pub eta_p50_seconds: Option<f64>,
}

/// The ETA shown at join against the wait that followed (admitted places shown one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EtaAccuracy {
    pub compared: u64,
    /// Median of actual wait − ETA, in seconds (positive: the ETA was optimistic).
    pub median_error_seconds: Option<f64>,
    /// 90th percentile of |actual wait − ETA|, in seconds.
    pub p90_abs_error_seconds: Option<f64>,
    /// Share of places admitted within their ETA (+ 10 %, + 5 s).
    pub within_eta: Option<f64>,
}

/// Places that left without admission after waiting `minutes_waited` (whole minutes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Abandonment {
    pub minutes_waited: u32,
    pub left: u64,
    pub away_expired: u64,
    /// Gateway gone or unbound.
    pub dropped: u64,
}

/// What became of the admitted places' sessions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Sessions {
    pub admitted: u64,
    /// Admitted in the join itself (passthrough).
    pub passthrough: u64,
    pub booked: u64,
    pub released: u64,
    pub expired: u64,
    pub no_show: u64,
    /// Still active (or ended in a way not recorded) when the report was made.
    pub open: u64,
}

/// The busiest client networks among the first `window` admissions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Networks {
    pub window: u64,
    /// Admissions in the window (fewer than `window` when fewer were admitted).
    pub admissions: u64,
    /// Of those, with a known network.
    pub with_network: u64,
    pub distinct_networks: u64,
    /// Share of the window's admissions taken by the busiest network, and by the busiest 10.
    pub top1_share: f64,
    pub top10_share: f64,
    pub busiest: Vec<NetworkCount>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NetworkCount {
    /// The network's keyed hash (hex): the same network in the same queue, never its address.
    pub network: String,
    pub admissions: u64,
    pub share: f64,
}

/// Proof of work: the difficulties joins solved, and their issue-to-join times: from the
/// puzzle's issue to the join that brought its solution (solving, and whatever the browser
/// did before it joined: not the solve time alone).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProofOfWork {
    /// Places whose join brought a proof.
    pub joins: u64,
    /// Difficulty (leading zero bits) → joins.
    pub difficulty: BTreeMap<u8, u64>,
    pub issue_to_join_p50_seconds: Option<f64>,
    pub issue_to_join_p90_seconds: Option<f64>,
    pub issue_to_join_p99_seconds: Option<f64>,
}

/// A scheduled sale's draw, and how to check it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DrawProof {
    /// `pending`, `done` or `void`.
    pub status: String,
    pub commitment: Option<String>,
    /// Published once the draw ran.
    pub seed: Option<String>,
    pub beacon_round: Option<u64>,
    pub beacon: Option<String>,
    /// The public draw record, on any gateway.
    pub record_url: String,
    /// How to verify it (docs/policies.md, "Verifying a draw").
    pub verify: String,
}

impl FairnessReport {
    /// The report of a queue that did not record.
    pub fn not_recorded(queue: &str) -> Self {
        Self {
            queue: queue.to_owned(),
            recorded: false,
            record: None,
            order: None,
            waits: None,
            eta: None,
            abandonment: None,
            sessions: None,
            networks: None,
            proof_of_work: None,
            draw: None,
        }
    }

    /// The report as CSV: one `key,value` row per number or text of the JSON form, the key
    /// its path there (`order.inversions`, `waits.3.p50_seconds`), so a spreadsheet or a
    /// script reads any part without a JSON parser and both forms always agree.
    pub fn to_csv(&self) -> String {
        let mut out = String::from("key,value\n");
        let json = serde_json::to_value(self).unwrap_or(serde_json::Value::Null);
        flatten("", &json, &mut out);
        out
    }
}

fn flatten(prefix: &str, v: &serde_json::Value, out: &mut String) {
    use serde_json::Value;
    let key = |k: &str| {
        if prefix.is_empty() {
            k.to_owned()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => m.iter().for_each(|(k, v)| flatten(&key(k), v, out)),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .for_each(|(i, v)| flatten(&key(&i.to_string()), v, out)),
        Value::String(s) => {
            out.push_str(&csv_field(prefix));
            out.push(',');
            out.push_str(&csv_field(s));
            out.push('\n');
        }
        other => {
            out.push_str(&csv_field(prefix));
            out.push(',');
            out.push_str(&other.to_string());
            out.push('\n');
        }
    }
}

/// A CSV field: quoted (RFC 4180) when it holds a comma, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_rows_carry_the_json_values() {
        let r = FairnessReport::not_recorded("a,b");
        assert_eq!(r.to_csv(), "key,value\nqueue,\"a,b\"\nrecorded,false\n");
    }
}
