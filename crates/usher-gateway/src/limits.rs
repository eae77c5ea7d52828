//! Per-IP limits: what one client address ([`IpKey`]) may take from this gateway.
//!
//! * a token bucket for joins that create a place (resumes create none and draw nothing, so a
//!   gateway restart or a deploy does not throttle the browsers coming back);
//! * a token bucket for status polls and leaves, drawn before anything else is looked at (a
//!   binding queue spends each good proof's `jti` in Redis for 130 s: without a rate, one
//!   client with one place could fill the queue's Redis master by signing proofs quickly);
//! * a cap on the streams it holds open here;
//! * a cap on the places it holds through this gateway: a place counts from the moment its
//!   join or resume here is let through ([`PendingPlace`], while Redis is asked: joins sent at
//!   once must not all pass the check before any is counted) until its stream ends for good
//!   (admitted, closed, gone), or until its queue's grace period has passed since its last
//!   stream here ended — as long as Redis
//!   keeps an away place in line — so a client that keeps places alive by resuming each one
//!   now and then, with no connection in between, still has them counted. (A fixed 300 s
//!   against a grace of up to an hour let one address keep twelve times its cap.) A
//!   scheduled sale's pre-queue entrant counts until the draw, connected or not
//!   ([`IpLimits::hold_entrant`]): otherwise one address could add its cap of entrants every
//!   grace period for as long as the pre-queue is open.
//!
//! The state is this gateway's own: it is never read by a per-queue Redis script (their keys
//! would have to share a Cluster slot). With several gateways, an address can hold up to the
//! limits on each gateway it reaches; a load balancer that hashes on the client address keeps
//! a client on one gateway. The state is bounded: an address's entry is dropped once it holds
//! nothing and its bucket is full again ([`IpLimits::sweep`]), and the places counted per
//! address are capped by the place limit itself.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use usher_core::ids::{PlaceId, QueueId};

use crate::client::IpKey;
use crate::metrics::Refusal;
use usher_http::bucket::{Bucket, Rate};

/// Proofs one place may spend on one gateway (`crate::binding`): a browser spends one a stream
/// resume, status poll or leave, far fewer than one a second; the burst covers a reconnecting
/// tab's retries. A place's spent proofs in Redis (each kept 130 s) stay under 130 + 30 per
/// gateway it reaches, however many addresses share its key.
pub(crate) const PLACE_PROOFS: Rate = Rate {
    per_second: 1,
    burst: 30,
};

/// How often idle entries are swept out (on the next call after this long).
const SWEEP_EVERY: Duration = Duration::from_secs(10);

/// The limits, as configured; `0` turns one off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Joins that take a new place.
    pub joins: Rate,
    /// Status polls and leaves.
    pub polls: Rate,
    pub max_streams: u32,
    pub max_places: u32,
}

/// Which per-IP limit refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exceeded {
    Joins,
    Streams,
    Places,
}

impl Exceeded {
    /// The refusal counted on `/metrics`.
    pub(crate) fn refusal(self) -> Refusal {
        match self {
            Exceeded::Joins => Refusal::IpJoins,
            Exceeded::Streams => Refusal::IpStreams,
            Exceeded::Places => Refusal::IpPlaces,
        }
    }
}

#[derive(Default)]
struct Entry {
    joins: Bucket,
    polls: Bucket,
    streams: u32,
    places: HashMap<(QueueId, PlaceId), PlaceUse>,
    /// Joins and resumes of places not counted yet, let through and still under way (Redis
    /// asked, the stream not holding the place yet): each counts as a place.
    pending: u32,
}

struct PlaceUse {
    /// Streams here holding it now.
    held: u32,
    /// When its last stream here ended (or it was taken).
    seen: Instant,
    /// How long it keeps counting with no stream: its queue's grace period, during which
    /// Redis keeps an away place in line.
    memory: Duration,
    /// A pre-queue entrant: counts until its queue's draw ([`IpLimits::drawn`]).
    entrant: bool,
}

impl PlaceUse {
    fn counts(&self, now: Instant) -> bool {
        self.held > 0 || self.entrant || now.duration_since(self.seen) < self.memory
    }
}

struct State {
    ips: HashMap<IpKey, Entry>,
    swept: Instant,
}

/// The per-IP state of one gateway.
pub(crate) struct IpLimits {
    limits: Limits,
    state: Mutex<State>,
}

impl IpLimits {
    pub(crate) fn new(limits: Limits) -> Self {
        Self {
            limits,
            state: Mutex::new(State {
                ips: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if now.duration_since(s.swept) >= SWEEP_EVERY {
            s.swept = now;
            self.sweep(&mut s.ips, now);
        }
        s
    }

    /// Drops expired places, and entries that hold nothing and whose buckets are full again
    /// (forgetting them changes no answer).
    fn sweep(&self, ips: &mut HashMap<IpKey, Entry>, now: Instant) {
        let Limits { joins, polls, .. } = self.limits;
        ips.retain(|_, e| {
            e.places.retain(|_, p| p.counts(now));
            let full = e.joins.is_full(joins, now) && e.polls.is_full(polls, now);
            e.streams > 0 || e.pending > 0 || !e.places.is_empty() || !full
        });
    }

    /// Addresses with state here (for tests of the bound).
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.lock().ips.len()
    }

    /// A stream from `ip` opens: counted until the slot is dropped.
    pub(crate) fn open_stream(self: &Arc<Self>, ip: IpKey) -> Result<StreamSlot, Exceeded> {
        if self.limits.max_streams > 0 {
            let mut s = self.lock();
            let e = s.ips.entry(ip).or_default();
            if e.streams >= self.limits.max_streams {
                return Err(Exceeded::Streams);
            }
            e.streams += 1;
        }
        Ok(StreamSlot {
            limits: self.clone(),
            ip,
        })
    }

    /// May `ip` take a new place? Draws a join from its bucket when it may; the place counts
    /// for `ip` from now on, while the join is under way ([`PendingPlace`]).
    pub(crate) fn join(self: &Arc<Self>, ip: IpKey) -> Result<PendingPlace, Exceeded> {
        if self.limits.max_places == 0 && !self.limits.joins.is_on() {
            return Ok(PendingPlace::none());
        }
        let now = Instant::now();
        let mut s = self.lock();
        let e = s.ips.entry(ip).or_default();
        if self.limits.max_places > 0 && counted(e, now) >= self.limits.max_places {
            return Err(Exceeded::Places);
        }
        e.joins
            .take(self.limits.joins, now)
            .map_err(|_| Exceeded::Joins)?;
        Ok(self.pending(e, ip))
    }

    /// Counts a place under way for `ip`'s entry `e` (when places are capped at all).
    fn pending(self: &Arc<Self>, e: &mut Entry, ip: IpKey) -> PendingPlace {
        if self.limits.max_places == 0 {
            return PendingPlace::none();
        }
        e.pending += 1;
        PendingPlace {
            counted: Some((self.clone(), ip)),
        }
    }

    /// May `ip` send a status poll or a leave now? Draws one from its poll bucket; when it is
    /// empty, how long until it holds one again (`Retry-After`). Asked before the request's
    /// ticket or proof is looked at, so a refused request costs no Redis call.
    pub(crate) fn poll(&self, ip: IpKey) -> Result<(), Duration> {
        if !self.limits.polls.is_on() {
            return Ok(());
        }
        let now = Instant::now();
        self.lock()
            .ips
            .entry(ip)
            .or_default()
            .polls
            .take(self.limits.polls, now)
    }

    /// May `ip` resume `place` here? Yes when it holds it already, or when it holds fewer
    /// places than its limit (and then the place counts from now on, as a join's does).
    /// Draws nothing from the join bucket.
    pub(crate) fn resume(
        self: &Arc<Self>,
        ip: IpKey,
        q: &QueueId,
        place: PlaceId,
    ) -> Result<PendingPlace, Exceeded> {
        if self.limits.max_places == 0 {
            return Ok(PendingPlace::none());
        }
        let now = Instant::now();
        let mut s = self.lock();
        let e = s.ips.entry(ip).or_default();
        let known = e
            .places
            .get(&(q.clone(), place))
            .is_some_and(|p| p.counts(now));
        if known {
            return Ok(PendingPlace::none());
        }
        if counted(e, now) >= self.limits.max_places {
            return Err(Exceeded::Places);
        }
        Ok(self.pending(e, ip))
    }

    /// A stream from `ip` holds `place` now: it counts for `ip` until the hold is dropped and
    /// `grace` (its queue's grace period) has passed, or until [`PlaceHold::finished`].
    pub(crate) fn hold(
        self: &Arc<Self>,
        ip: IpKey,
        q: &QueueId,
        place: PlaceId,
        grace: Duration,
    ) -> PlaceHold {
        self.hold_as(ip, q, place, grace, false)
    }

    /// A stream from `ip` holds `place`, a scheduled sale's pre-queue entrant: it counts for
    /// `ip` until the queue's draw ([`IpLimits::drawn`]), whether a stream holds it or not,
    /// or until [`PlaceHold::finished`] (it left); after the draw, like [`IpLimits::hold`].
    pub(crate) fn hold_entrant(
        self: &Arc<Self>,
        ip: IpKey,
        q: &QueueId,
        place: PlaceId,
        grace: Duration,
    ) -> PlaceHold {
        self.hold_as(ip, q, place, grace, true)
    }

    fn hold_as(
        self: &Arc<Self>,
        ip: IpKey,
        q: &QueueId,
        place: PlaceId,
        grace: Duration,
        entrant: bool,
    ) -> PlaceHold {
        if self.limits.max_places > 0 {
            let mut s = self.lock();
            let e = s.ips.entry(ip).or_default();
            let p = e.places.entry((q.clone(), place)).or_insert(PlaceUse {
                held: 0,
                seen: Instant::now(),
                memory: grace,
                entrant,
            });
            p.held += 1;
            p.memory = grace;
            // Resumed in line after the draw: an ordinary place from now on.
            p.entrant = entrant;
        }
        PlaceHold {
            limits: self.clone(),
            ip,
            key: Some((q.clone(), place)),
        }
    }

    /// `q`'s pre-queue is over (its draw ran, the queue closed, or a data loss voided the draw
    /// and put the places in line): its entrants count as ordinary places from now on (until
    /// their queue's grace period after their last stream here ended).
    pub(crate) fn drawn(&self, q: &QueueId) {
        if self.limits.max_places == 0 {
            return;
        }
        let now = Instant::now();
        for e in self.lock().ips.values_mut() {
            for ((pq, _), p) in e.places.iter_mut() {
                if p.entrant && pq == q {
                    p.entrant = false;
                    p.seen = now;
                }
            }
        }
    }

    /// `place` is over for good (admitted, closed, gone): it no longer counts for `ip`.
    pub(crate) fn forget(&self, ip: IpKey, q: &QueueId, place: PlaceId) {
        if self.limits.max_places > 0 {
            if let Some(e) = self.lock().ips.get_mut(&ip) {
                e.places.remove(&(q.clone(), place));
            }
        }
    }
}

/// The places that count for an entry now, those under way included.
fn counted(e: &Entry, now: Instant) -> u32 {
    let n = e.places.values().filter(|p| p.counts(now)).count();
    u32::try_from(n)
        .unwrap_or(u32::MAX)
        .saturating_add(e.pending)
}

/// A join or resume let through and under way: it counts as one of its address's places
/// until dropped, which the stream does once it holds the place ([`IpLimits::hold`]) or has
/// failed to take it. Without it, joins sent at once all passed the cap (the check comes
/// before Redis, the count after it): a security review took 20 places under a cap of 2.
#[must_use = "the place counts only while this lives"]
pub(crate) struct PendingPlace {
    /// Where it is counted; `None` when nothing is (places uncapped, or the place counted
    /// already).
    counted: Option<(Arc<IpLimits>, IpKey)>,
}

impl PendingPlace {
    fn none() -> Self {
        Self { counted: None }
    }
}

impl Drop for PendingPlace {
    fn drop(&mut self) {
        if let Some((limits, ip)) = self.counted.take() {
            if let Some(e) = limits.lock().ips.get_mut(&ip) {
                e.pending = e.pending.saturating_sub(1);
            }
        }
    }
}

/// A stream counted against its address's cap while it lives.
pub(crate) struct StreamSlot {
    limits: Arc<IpLimits>,
    ip: IpKey,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        if self.limits.limits.max_streams > 0 {
            if let Some(e) = self.limits.lock().ips.get_mut(&self.ip) {
                e.streams = e.streams.saturating_sub(1);
            }
        }
    }
}

/// A place held by a stream: on drop it keeps counting for its queue's grace period.
pub(crate) struct PlaceHold {
    limits: Arc<IpLimits>,
    ip: IpKey,
    key: Option<(QueueId, PlaceId)>,
}

impl PlaceHold {
    /// The stream ended the place for good: it stops counting now.
    pub(crate) fn finished(mut self) {
        if let Some((q, place)) = self.key.take() {
            self.limits.forget(self.ip, &q, place);
        }
    }
}

impl Drop for PlaceHold {
    fn drop(&mut self) {
        let Some(key) = self.key.take() else { return };
        if self.limits.limits.max_places > 0 {
            if let Some(p) = self
                .limits
                .lock()
                .ips
                .get_mut(&self.ip)
                .and_then(|e| e.places.get_mut(&key))
            {
                p.held = p.held.saturating_sub(1);
                p.seen = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFF: Rate = Rate {
        per_second: 0,
        burst: 0,
    };

    fn rate(per_second: u32, burst: u32) -> Rate {
        Rate { per_second, burst }
    }

    fn key(last: u8) -> IpKey {
        IpKey::V4([192, 0, 2, last])
    }

    /// A join or resume's answer, its place no longer under way.
    fn ok(r: Result<PendingPlace, Exceeded>) -> Result<(), Exceeded> {
        r.map(drop)
    }

    /// The default grace period.
    const GRACE: Duration = Duration::from_secs(300);

    fn q() -> QueueId {
        QueueId::new("q1").expect("a queue id")
    }

    #[test]
    fn the_bucket_allows_a_burst_then_refuses() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(1, 3),
            polls: OFF,
            max_streams: 0,
            max_places: 0,
        }));
        for _ in 0..3 {
            assert_eq!(ok(l.join(key(1))), Ok(()));
        }
        assert_eq!(ok(l.join(key(1))), Err(Exceeded::Joins));
        assert_eq!(
            ok(l.join(key(2))),
            Ok(()),
            "another address has its own bucket"
        );
    }

    #[test]
    fn polls_have_their_own_bucket_and_say_when_to_come_back() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(1, 1),
            polls: rate(2, 2),
            max_streams: 0,
            max_places: 0,
        }));
        assert_eq!(l.poll(key(1)), Ok(()));
        assert_eq!(l.poll(key(1)), Ok(()));
        let wait = l.poll(key(1)).expect_err("past the burst");
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        assert_eq!(ok(l.join(key(1))), Ok(()), "joins draw from another bucket");
        assert_eq!(l.poll(key(2)), Ok(()), "another address has its own bucket");
    }

    #[test]
    fn places_count_while_held_and_after_until_finished() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(0, 0),
            polls: OFF,
            max_streams: 0,
            max_places: 2,
        }));
        let (a, b, c) = (PlaceId(1), PlaceId(2), PlaceId(3));
        assert_eq!(ok(l.join(key(1))), Ok(()));
        let ha = l.hold(key(1), &q(), a, GRACE);
        assert_eq!(ok(l.join(key(1))), Ok(()));
        drop(l.hold(key(1), &q(), b, GRACE));
        // b's stream ended, but b still counts: no third place, no resume of another one.
        assert_eq!(ok(l.join(key(1))), Err(Exceeded::Places));
        assert_eq!(ok(l.resume(key(1), &q(), c)), Err(Exceeded::Places));
        // Resuming a place it holds is fine.
        assert_eq!(ok(l.resume(key(1), &q(), b)), Ok(()));
        ha.finished();
        assert_eq!(ok(l.resume(key(1), &q(), c)), Ok(()));
    }

    /// Joins (or resumes) sent at once all pass the check before any holds its place: each
    /// counts from the moment it is let through, until it holds its place or took none.
    #[test]
    fn joins_and_resumes_under_way_count_against_the_place_cap() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(1, 50),
            polls: OFF,
            max_streams: 0,
            max_places: 2,
        }));
        let mut under_way: Vec<_> = (0..10).filter_map(|_| l.join(key(1)).ok()).collect();
        assert_eq!(under_way.len(), 2, "10 joins at once under a cap of 2");
        assert_eq!(
            ok(l.resume(key(1), &q(), PlaceId(9))),
            Err(Exceeded::Places),
            "nor a resume of another place"
        );
        // The first join holds its place; the second took none (Redis refused it).
        let held = l.hold(key(1), &q(), PlaceId(1), GRACE);
        drop(under_way.remove(0));
        drop(under_way.remove(0));
        let third = l
            .join(key(1))
            .expect("room for the place the second did not take");
        assert_eq!(
            ok(l.join(key(1))),
            Err(Exceeded::Places),
            "one held, one under way"
        );
        drop(third);
        drop(held);
        // Resumes of places it does not hold yet, at once: as many as the cap.
        let resumes: Vec<_> = (0..10)
            .filter_map(|i| l.resume(key(2), &q(), PlaceId(100 + i)).ok())
            .collect();
        assert_eq!(resumes.len(), 2, "10 resumes at once under a cap of 2");
    }

    /// The places an address holds, as counted at `now`.
    fn counted_at(l: &IpLimits, ip: IpKey, now: Instant) -> u32 {
        let s = l.state.lock().unwrap_or_else(|p| p.into_inner());
        s.ips.get(&ip).map_or(0, |e| counted(e, now))
    }

    #[test]
    fn a_place_keeps_counting_for_its_queues_grace_period() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(0, 0),
            polls: OFF,
            max_streams: 0,
            max_places: 10,
        }));
        // An hour's grace (the most a queue may set), and the default five minutes.
        drop(l.hold(key(1), &q(), PlaceId(1), Duration::from_secs(3600)));
        drop(l.hold(key(1), &q(), PlaceId(2), Duration::from_secs(300)));
        let ended = Instant::now();
        let after = |s: u64| ended + Duration::from_secs(s);
        assert_eq!(counted_at(&l, key(1), after(299)), 2);
        assert_eq!(
            counted_at(&l, key(1), after(301)),
            1,
            "past the 300 s grace"
        );
        assert_eq!(
            counted_at(&l, key(1), after(3599)),
            1,
            "within the hour's grace"
        );
        assert_eq!(counted_at(&l, key(1), after(3601)), 0);
    }

    #[test]
    fn an_entrant_counts_until_the_draw_however_long_ago_its_stream_ended() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(0, 0),
            polls: OFF,
            max_streams: 0,
            max_places: 2,
        }));
        let other = QueueId::new("q2").expect("a queue id");
        drop(l.hold_entrant(key(1), &q(), PlaceId(1), Duration::from_secs(300)));
        drop(l.hold(key(1), &other, PlaceId(2), Duration::from_secs(300)));
        let hour = Instant::now() + Duration::from_secs(3600);
        let counted_at = |t: Instant| {
            let s = l.state.lock().unwrap_or_else(|p| p.into_inner());
            s.ips.get(&key(1)).map_or(0, |e| counted(e, t))
        };
        assert_eq!(
            counted_at(hour),
            1,
            "the entrant still counts an hour later"
        );
        l.drawn(&other);
        assert_eq!(counted_at(hour), 1, "another queue's draw changes nothing");
        l.drawn(&q());
        assert_eq!(
            counted_at(Instant::now()),
            2,
            "an ordinary place after the draw"
        );
        assert_eq!(counted_at(hour), 0, "then forgotten like one");
    }

    #[test]
    fn streams_are_capped_and_released() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(0, 0),
            polls: OFF,
            max_streams: 1,
            max_places: 0,
        }));
        let s = l.open_stream(key(1));
        assert!(s.is_ok());
        assert!(matches!(l.open_stream(key(1)), Err(Exceeded::Streams)));
        assert!(l.open_stream(key(2)).is_ok());
        drop(s);
        assert!(l.open_stream(key(1)).is_ok());
    }

    #[test]
    fn idle_entries_are_swept() {
        let l = Arc::new(IpLimits::new(Limits {
            joins: rate(1000, 1),
            polls: rate(1000, 1),
            max_streams: 5,
            max_places: 0,
        }));
        for i in 0..50 {
            drop(l.open_stream(key(i)));
            let _ = l.join(key(i));
            let _ = l.poll(key(i));
        }
        let mut s = l.state.lock().unwrap_or_else(|p| p.into_inner());
        let later = Instant::now() + Duration::from_secs(1);
        l.sweep(&mut s.ips, later);
        assert!(s.ips.is_empty(), "{} entries left", s.ips.len());
        drop(s);
        assert_eq!(l.tracked(), 0);
    }
}
