//! Lanes in the `state` snapshot (usher_core::lanes): each lane's line, snapshot and
//! effective rate, so gateways show each place its position and ETA in its own lane.

use usher_core::lanes::{lane_rate, Lane};
use usher_core::messages::{LaneState, QueueState};
use usher_core::store::TickOutcome;

/// Splits `state` (built from the whole tick) by lane: each lane's entry gets its effective
/// rate, the queue's rate × its share ÷ the shares of the lanes with somebody present (an
/// empty lane's share flows to the others, as the tick admits), and the top-level fields
/// become the default lane's, so a gateway that predates lanes still shows the default lane's
/// places their right positions and ETAs. Nothing changes without lanes.
pub(super) fn split_state(state: &mut QueueState, out: &TickOutcome) {
    if out.lanes.is_empty() {
        return;
    }
    let lanes: Vec<Lane> = out
        .lanes
        .iter()
        .map(|l| Lane {
            name: l.name.clone(),
            share: l.share,
        })
        .collect();
    let busy: Vec<_> = out
        .lanes
        .iter()
        .filter(|l| l.present > 0)
        .map(|l| &l.name)
        .collect();
    let rate = state.rate;
    state.lanes = out
        .lanes
        .iter()
        .map(|l| LaneState {
            name: l.name.clone(),
            default: l.default,
            share: l.share,
            waiting: l.waiting,
            rate: lane_rate(&lanes, &busy, &l.name, rate),
            runs: l.runs.clone(),
            samples: l.samples.clone(),
        })
        .collect();
    if let Some(d) = state.lanes.iter().find(|l| l.default) {
        state.waiting = d.waiting;
        state.rate = d.rate;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use usher_core::ids::QueueId;
    use usher_core::lanes::LaneName;
    use usher_core::store::LaneOutcome;

    fn lane(name: &str, default: bool, share: u8, present: u64) -> LaneOutcome {
        LaneOutcome {
            name: LaneName::new(name).expect("valid"),
            default,
            share,
            waiting: present,
            present,
            admitted: 0,
            runs: vec![(1, present)],
            samples: Vec::new(),
        }
    }

    #[test]
    fn each_lane_gets_its_share_of_the_rate_and_the_top_level_is_the_default_lane() {
        let q = QueueId::new("q").expect("valid");
        let mut state = QueueState {
            waiting: 300,
            rate: 100.0,
            ..QueueState::empty(q.clone())
        };
        let out = TickOutcome {
            waiting: 300,
            lanes: vec![
                lane("general", true, 70, 200),
                lane("members", false, 30, 100),
            ],
            ..TickOutcome::default()
        };
        split_state(&mut state, &out);
        assert_eq!((state.waiting, state.rate), (200, 70.0));
        assert_eq!(state.lanes[1].rate, 30.0);
        // Nobody in `members`: general gets the whole rate.
        let mut state = QueueState {
            rate: 100.0,
            ..QueueState::empty(q)
        };
        let out = TickOutcome {
            lanes: vec![
                lane("general", true, 70, 200),
                lane("members", false, 30, 0),
            ],
            ..TickOutcome::default()
        };
        split_state(&mut state, &out);
        assert_eq!(state.rate, 100.0);
    }
}
