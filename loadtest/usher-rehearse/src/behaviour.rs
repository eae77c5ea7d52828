//! One browser's behaviour, drawn once at its join from the rehearsal's seeded generator, so
//! the same seed gives every browser the same fate.

use rand::rngs::StdRng;
use rand::Rng;
use usher_core::lanes::LaneName;

use crate::scenario::Behaviours;

/// What one browser will do.
#[derive(Debug, Clone, PartialEq)]
pub struct Fate {
    /// The lane it joins (`None`: the default lane).
    pub lane: Option<LaneName>,
    /// Milliseconds of waiting after which it leaves, if still waiting.
    pub leaves_after_ms: Option<u64>,
    /// Milliseconds after its join at which its connection drops (once), if still waiting.
    pub drops_after_ms: Option<u64>,
    /// Admitted, it never arrives at the booking service.
    pub no_show: bool,
    /// Milliseconds its booking takes once it arrives.
    pub booking_ms: u64,
}

impl Behaviours {
    /// A browser's fate. The draws are made in a fixed order, so adding a behaviour at a
    /// share of 0 changes nobody's fate.
    pub fn draw(&self, rng: &mut StdRng) -> Fate {
        let (u_lane, u_leave, u_drop, u_drop_at, u_show, u_book): (f64, f64, f64, f64, f64, f64) = (
            rng.gen(),
            rng.gen(),
            rng.gen(),
            rng.gen(),
            rng.gen(),
            rng.gen(),
        );
        let mut lane = None;
        let mut acc = 0.0;
        for (name, share) in &self.lane_shares {
            acc += share;
            if u_lane < acc {
                lane = Some(name.clone());
                break;
            }
        }
        // A constant share `p` leaving per minute of waiting is an exponential time with
        // rate -ln(1 - p) per minute.
        let leaves_after_ms = (self.leave_per_minute > 0.0).then(|| {
            if self.leave_per_minute >= 1.0 {
                return 0;
            }
            let per_minute = -(1.0 - self.leave_per_minute).ln();
            let minutes = -(1.0 - u_leave).ln() / per_minute;
            (minutes * 60_000.0).min(1e15) as u64
        });
        let drops_after_ms = (u_drop < self.reconnect).then_some((u_drop_at * 60_000.0) as u64);
        let span = self.booking.high_s - self.booking.low_s;
        let booking_ms = self.booking.low_s * 1000 + (u_book * (span * 1000) as f64) as u64;
        Fate {
            lane,
            leaves_after_ms,
            drops_after_ms,
            no_show: u_show < self.no_show,
            booking_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::scenario::BookingTime;

    fn behaviours(leave_per_minute: f64, no_show: f64) -> Behaviours {
        Behaviours {
            leave_per_minute,
            no_show,
            booking: BookingTime {
                low_s: 60,
                high_s: 180,
            },
            reconnect: 0.0,
            away_seconds: 5,
            lane_shares: Vec::new(),
        }
    }

    #[test]
    fn fates_follow_the_shares_and_the_seed() {
        let b = behaviours(0.1, 0.25);
        let fates = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..10_000).map(|_| b.draw(&mut rng)).collect::<Vec<_>>()
        };
        let (one, again) = (fates(7), fates(7));
        assert_eq!(one, again, "the same seed draws the same fates");
        assert_ne!(one, fates(8));
        let no_shows = one.iter().filter(|f| f.no_show).count();
        assert!((2_300..2_700).contains(&no_shows), "{no_shows}");
        // 10% a minute: about 10% leave within their first minute of waiting.
        let first_minute = one
            .iter()
            .filter(|f| f.leaves_after_ms.is_some_and(|ms| ms < 60_000))
            .count();
        assert!((900..1_100).contains(&first_minute), "{first_minute}");
        assert!(one
            .iter()
            .all(|f| (60_000..=180_000).contains(&f.booking_ms)));
        assert!(one.iter().all(|f| f.drops_after_ms.is_none()));
    }
}
