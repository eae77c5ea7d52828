//! When a tick does what. Its reads (registries, queue list) and its script calls start a
//! little before its admission time, the longer the bigger its expected burst, and its
//! admissions are sent at the admission time; the admission time is the scheduled one whenever
//! the tick is on time, so tokens minted ahead for it match exactly; its token records are
//! stored a moment after it.

use std::time::Duration;

use usher_core::time::{now_ms, Clock};

/// A tick starting at most this late still uses its scheduled time as the admission time.
const ON_TIME_MS: u64 = 50;

/// The admission times of a run of ticks, on the wall clock, derived from the interval's
/// monotonic schedule: the interval fires [`admit_lead_cap`] before each admission time.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    /// The same moment on both clocks.
    base: (tokio::time::Instant, u64),
    lead_ms: u64,
}

impl Timing {
    /// A timing whose clocks are paired now.
    pub(super) fn start(tick: Duration) -> Self {
        Self {
            base: paired_at(tokio::time::Instant::now()),
            lead_ms: admit_lead_cap(tick).as_millis() as u64,
        }
    }

    /// The admission time planned for the tick the interval fired for at `scheduled`.
    pub(super) fn planned(&self, scheduled: tokio::time::Instant) -> u64 {
        self.base.1 + scheduled.duration_since(self.base.0).as_millis() as u64 + self.lead_ms
    }

    /// [`Timing::planned`], after pairing the clocks again if the wall clock was stepped
    /// (back or forward) since they were paired: it has drifted from the monotonic clock by
    /// more than [`ON_TIME_MS`] (however late the tick itself is). Without it every later tick
    /// would be planned on the old wall clock, and its tokens minted ahead for a time it is
    /// never admitted at.
    pub(super) fn planned_now(&mut self, scheduled: tokio::time::Instant) -> u64 {
        let wall = now_ms() as i64 - self.base.1 as i64;
        let mono = self.base.0.elapsed().as_millis() as i64;
        if wall.abs_diff(mono) > ON_TIME_MS {
            self.base = paired_at(scheduled);
        }
        self.planned(scheduled)
    }
}

/// The two clocks paired at the monotonic instant `at` (now or just past): the wall clock's
/// reading then. Pairing at the interval's own instant keeps the plan of each later tick on
/// whole milliseconds from it, as the pre-mint made a tick earlier expects.
fn paired_at(at: tokio::time::Instant) -> (tokio::time::Instant, u64) {
    (at, now_ms().saturating_sub(at.elapsed().as_millis() as u64))
}

/// The admission time of a tick planned for `planned` whose start puts it at `actual` (the
/// wall clock when the interval fired, plus the lead it fires with): the planned time when
/// the two agree (so tokens minted ahead for it are used), else `actual`. A tick that starts
/// late is never stamped far in the past, and after the wall clock is stepped (back or
/// forward) each tick is timed on the wall clock again instead of waiting out the step.
pub(super) fn admission_time(planned: u64, actual: u64) -> u64 {
    if actual.abs_diff(planned) <= ON_TIME_MS {
        planned
    } else {
        actual
    }
}

/// How long a tick's reads (registries, queue list, the queue's rate inputs) take at most, the
/// part of [`admit_lead`] that does not grow with the burst: a tenth of the tick, at most
/// 20 ms.
pub(super) fn read_lead(tick: Duration) -> Duration {
    (tick / 10).min(Duration::from_millis(20))
}

/// The longest a tick starts admitting ahead of its admission time ([`admit_lead`]): a
/// quarter of the tick, at most 250 ms. The tick loop's interval fires this long before each
/// admission time. Ahead of it means behind for whoever joins meanwhile: a browser arriving in
/// those last moments waits for the next tick (the line's order is unchanged).
pub(super) fn admit_lead_cap(tick: Duration) -> Duration {
    (tick / 4).min(Duration::from_millis(250))
}

/// The tick script's time per admission budgeted ahead ([`admit_lead`]): about twice what a
/// call of 1,000 admissions takes Redis with 200,000 waiting on the reference machine
/// (BENCHMARKS.md, "Many queues on 1 master vs 3"), so a burst's calls end before its
/// admission time there, and sooner on a faster one.
const SCRIPT_PER_ADMISSION: Duration = Duration::from_micros(20);

/// How long before its admission time a tick expecting `burst` admissions (over every queue)
/// reads the registries and runs its script calls, stamped with the admission time: the read
/// lead plus [`SCRIPT_PER_ADMISSION`] each, at most [`admit_lead_cap`]. The admissions wait in
/// the dispatcher until the admission time, then go to the gateways at once, so a burst's
/// browsers wait for the writes alone, not for Redis to pop them a thousand at a time (a
/// serial chain no number of cores shortens). A burst whose calls outrun the lead is sent
/// as its calls return, from the admission time on.
pub(super) fn admit_lead(tick: Duration, burst: u64) -> Duration {
    let calls = SCRIPT_PER_ADMISSION.saturating_mul(u32::try_from(burst).unwrap_or(u32::MAX));
    (read_lead(tick) + calls).min(admit_lead_cap(tick))
}

/// The longest a tick's token records (and the line's new state, published after them) wait
/// after its admission time: three tenths of the tick, at most 300 ms. Until then the machines
/// deliver the admissions alone: a full tick's burst keeps the gateways busy for a good part
/// of that time, and the state that follows moves every other browser (up to one write
/// each), so sent sooner it slows the burst's tail.
pub(super) fn token_store_delay(tick: Duration) -> Duration {
    (tick * 3 / 10).min(Duration::from_millis(300))
}

/// How long a burst of `admissions` may take to deliver, per admission: 60 µs, so a burst of
/// 5,000 gets the whole 300 ms. That is about four times what the reference machine (two
/// cores running Redis, the dispatcher, six gateways and the browsers) needs per admission
/// (BENCHMARKS.md, "An admission burst"); a bigger machine needs less.
const DELIVERY_PER_ADMISSION: Duration = Duration::from_micros(60);

/// How long after the admission time the token records of a tick call that admitted
/// `admissions` are stored, and the state published: the time the burst may take to deliver
/// ([`DELIVERY_PER_ADMISSION`] each), at most `cap` ([`token_store_delay`]). A small burst
/// leaves no tail to protect: a line moving by five places a tick must not hold every other
/// browser's new position for the whole cap, which would make positions a third of a tick
/// stale for nothing (`timing::tests::a_small_burst_holds_the_state_back_for_less`).
pub(super) fn records_delay(cap: Duration, admissions: usize) -> Duration {
    let need = DELIVERY_PER_ADMISSION.saturating_mul(u32::try_from(admissions).unwrap_or(u32::MAX));
    need.min(cap)
}

/// Sleeps until `clock` reads `at_ms`, but never longer than `cap_ms`: a wall clock stepped
/// back must not hold a tick. A virtual clock (a rehearsal's) never sleeps: its driver moves
/// it (`Clock::wait_for`).
///
/// To within a fraction of a millisecond, and never early by the wall clock while the wait
/// fits in the cap: every wait here is for a time something may not happen before (a tick's
/// admissions, whose tokens are valid from their admission time; a sale's draw; token records
/// after a burst). tokio's timer ends up to two milliseconds late, and a burst released then
/// left the two cores idle for its first 1–2 ms, every one of its browsers waiting
/// (BENCHMARKS.md, "An admission burst"); so the wait is the process's precise timer
/// ([`usher_runtime::precise::sleep`]: one thread for all the tasks waiting), and the clock is
/// read again when it ends. The cap is measured on std's monotonic clock, which that timer
/// runs on: a paused tokio clock (a test's) must not make it endless.
pub(super) async fn sleep_until_ms(clock: &dyn Clock, at_ms: u64, cap_ms: u64) {
    let began = std::time::Instant::now();
    let cap = Duration::from_millis(cap_ms);
    loop {
        let wait = clock
            .wait_for(at_ms)
            .min(cap.saturating_sub(began.elapsed()));
        if wait.is_zero() {
            return;
        }
        usher_runtime::precise::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tick_on_time_admits_at_its_planned_time() {
        assert_eq!(admission_time(1_000, 990), 1_000);
        assert_eq!(admission_time(1_000, 1_000 + ON_TIME_MS), 1_000);
        assert_eq!(
            admission_time(1_000, 1_001 + ON_TIME_MS),
            1_001 + ON_TIME_MS
        );
        // The wall clock stepped back: timed on it again, not held until the old time.
        assert_eq!(admission_time(5_000, 1_000), 1_000);
        assert_eq!(admission_time(1_000, 1_000 - ON_TIME_MS), 1_000);
    }

    #[test]
    fn reads_lead_and_token_records_follow_by_a_share_of_the_tick_capped() {
        let ms = Duration::from_millis;
        assert_eq!(read_lead(ms(100)), ms(10));
        assert_eq!(read_lead(ms(1000)), ms(20));
        assert_eq!(token_store_delay(ms(100)), ms(30));
        assert_eq!(token_store_delay(ms(5000)), ms(300));
    }

    #[tokio::test]
    async fn a_stepped_wall_clock_is_paired_again() {
        let now = tokio::time::Instant::now();
        // Paired 5 s off the wall clock (as after a step back or forward of 5 s).
        for off in [-5_000i64, 5_000] {
            let mut timing = Timing {
                base: (now, now_ms().saturating_add_signed(off)),
                lead_ms: 20,
            };
            let planned = timing.planned_now(now);
            assert!(
                planned.abs_diff(now_ms() + 20) <= ON_TIME_MS,
                "{off}: {planned} vs {}",
                now_ms() + 20
            );
        }
        // Paired right: the plan is kept.
        let mut timing = Timing {
            base: (now, now_ms()),
            lead_ms: 20,
        };
        let base = timing.base;
        timing.planned_now(now);
        assert_eq!(timing.base, base);
    }

    #[test]
    fn a_bigger_burst_is_admitted_further_ahead_capped() {
        let ms = Duration::from_millis;
        // A small tick needs only its reads ahead.
        assert_eq!(admit_lead(ms(1000), 0), ms(20));
        assert_eq!(admit_lead(ms(1000), 5), ms(20) + Duration::from_micros(100));
        assert_eq!(admit_lead(ms(1000), 5_000), ms(120));
        assert_eq!(admit_lead(ms(1000), 10_000), ms(220));
        assert_eq!(admit_lead(ms(1000), 100_000), ms(250));
        assert_eq!(admit_lead(ms(1000), u64::MAX), ms(250));
        // A short tick: a quarter of it at most.
        assert_eq!(admit_lead(ms(100), 5_000), ms(25));
        assert_eq!(admit_lead_cap(ms(100)), ms(25));
    }

    /// Never before the admission time (a token is valid from then on), on the wall clock's
    /// microseconds; a far time waits no longer than the cap; a virtual clock never waits.
    #[tokio::test]
    async fn a_release_is_never_early_and_never_past_its_cap() {
        let now_us = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_micros())
                .unwrap_or(0)
        };
        let clock = usher_core::time::WallClock;
        // Times a few milliseconds apart, so that each falls at a different point of the wall
        // clock's millisecond.
        for ahead_ms in [1, 2, 3, 4, 7, 20] {
            let at = now_ms() + ahead_ms;
            sleep_until_ms(&clock, at, 1_000).await;
            let now = now_us();
            assert!(
                now >= u128::from(at) * 1000,
                "released {} µs early",
                u128::from(at) * 1000 - now
            );
        }
        // A wall clock stepped back an hour: the cap (30 ms), not the hour; the minute
        // allowed is only a guard against a wait that never ends.
        let began = std::time::Instant::now();
        let capped = tokio::time::timeout(
            Duration::from_secs(60),
            sleep_until_ms(&clock, now_ms() + 3_600_000, 30),
        );
        assert!(capped.await.is_ok(), "waited past the cap");
        assert!(began.elapsed() >= Duration::from_millis(30));
        // A virtual clock behind the time does not sleep: its driver moves it.
        let virt = usher_core::time::VirtualClock::starting_at(0);
        let unslept = tokio::time::timeout(
            Duration::from_secs(60),
            sleep_until_ms(&*virt, 3_600_000, 3_600_000),
        );
        assert!(unslept.await.is_ok(), "a virtual clock slept");
    }

    #[test]
    fn a_small_burst_holds_the_state_back_for_less() {
        let ms = Duration::from_millis;
        let cap = token_store_delay(ms(1000));
        assert_eq!(records_delay(cap, 0), Duration::ZERO);
        assert_eq!(records_delay(cap, 5), Duration::from_micros(300));
        assert_eq!(records_delay(cap, 1_000), ms(60));
        assert_eq!(records_delay(cap, 5_000), ms(300));
        assert_eq!(records_delay(cap, 50_000), ms(300));
        assert_eq!(records_delay(cap, usize::MAX), ms(300));
        // A short tick's cap still bounds a big burst.
        assert_eq!(records_delay(token_store_delay(ms(100)), 5_000), ms(30));
    }
}
