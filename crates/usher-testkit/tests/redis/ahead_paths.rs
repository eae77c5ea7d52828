//! The paths of a tick admitting ahead (`usher_dispatcher::tick`, `timing::admit_lead`) that
//! leave its usual course:
//!
//! * a later script call of the tick fails (a Redis error) or finds the lease gone: the
//!   admissions the calls before it took from the line and held for the admission time still
//!   go to their gateways, and the next tick sends them again from the outbox with the very
//!   same tokens and admits the rest; no place is lost, none admitted twice;
//! * a queue whose scheduled sale's draw may be pending ticks at its admission time, not
//!   ahead: a browser who joins the pre-queue in the tick's lead is in the draw.
//!
//! The dispatcher runs in-process ([`Admitter::tick_at`]) against a real `redis-server`, the
//! test playing the gateway (a registered index and its stream). The fault is placed exactly
//! between the tick's first and second script call by the tick's own clock
//! ([`BreakingClock`]), so the path runs every time, whatever the machine's load.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::{PlaceId, QueueId, ServerId};
use usher_core::keys::QueueKeys;
use usher_core::messages::StreamMessage;
use usher_core::store::{Joined, QueueConfig, Store};
use usher_core::time::{now_ms, Clock};
use usher_dispatcher::tick::{Admitter, Settings};
use usher_mint::token::SigningKey;
use usher_testkit::acl::Component;
use usher_testkit::line::{played_gateway, read_played};
use usher_testkit::wait::eventually;
use usher_testkit::RedisServer;

/// The Redis user the dispatcher under test runs as (the ACL `usher_testkit::acl` gives it),
/// so that its script calls alone can be refused.
const DISPATCHER_USER: &str = "usher-dispatcher";
const PASSWORD: &str = "ahead-paths-password";

/// A tick of 1 s at 600 admissions a second: a queue's first tick admits 600, in two script
/// calls (the first admits [`FIRST_CALL`], the second the other 350).
const TICK: Duration = Duration::from_secs(1);
const RATE: f64 = 600.0;
/// Places a tick's first script call admits at most (`tick::deliver::FIRST_CALL` in the
/// dispatcher).
const FIRST_CALL: usize = 250;
/// Places in line: more than a tick admits, so the first tick's first call has `more`.
const JOINED: usize = 700;

/// A virtual clock (it reads what the test set, and never waits: every call of a tick is
/// made ahead of its admission time) that applies a fault once the queue's tick has made its
/// first script call: the tick asks its clock whether it is still ahead before each further
/// call, so the fault lands exactly between the first call and the second. (The check is a
/// blocking Redis call, made on the tick's own thread, before the tick goes on.)
struct BreakingClock {
    ms: AtomicU64,
    redis: Mutex<redis::Connection>,
    /// The queue's meta hash: `admitted_total` rises with the first call's admissions.
    meta: String,
    /// The fault: one Redis command, run as the default user.
    fault: Vec<String>,
    armed: AtomicBool,
    /// The clock's reading when the fault was applied.
    broke_at: Mutex<Option<u64>>,
}

impl std::fmt::Debug for BreakingClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BreakingClock")
            .field("ms", &self.ms)
            .field("fault", &self.fault)
            .finish()
    }
}

impl BreakingClock {
    fn new(redis: &RedisServer, q: &QueueId, at: u64, fault: &[&str]) -> anyhow::Result<Self> {
        Ok(Self {
            ms: AtomicU64::new(at),
            redis: Mutex::new(redis::Client::open(redis.url())?.get_connection()?),
            meta: QueueKeys::new(q).meta,
            fault: fault.iter().map(|w| w.to_string()).collect(),
            armed: AtomicBool::new(true),
            broke_at: Mutex::new(None),
        })
    }

    fn set_ms(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    fn broke_at(&self) -> Option<u64> {
        *self.broke_at.lock().expect("not poisoned")
    }

    /// Applies the fault if the tick's first call has admitted (once).
    fn break_after_first_call(&self) -> redis::RedisResult<()> {
        let mut c = self.redis.lock().expect("not poisoned");
        let admitted: Option<u64> = redis::cmd("HGET")
            .arg(&self.meta)
            .arg("admitted_total")
            .query(&mut *c)?;
        if admitted.unwrap_or(0) == 0 {
            return Ok(());
        }
        let mut cmd = redis::cmd(&self.fault[0]);
        cmd.arg(&self.fault[1..]);
        let () = cmd.query(&mut *c)?;
        self.armed.store(false, Ordering::SeqCst);
        *self.broke_at.lock().expect("not poisoned") = Some(self.ms.load(Ordering::SeqCst));
        Ok(())
    }
}

impl Clock for BreakingClock {
    fn now_ms(&self) -> u64 {
        if self.armed.load(Ordering::SeqCst) {
            if let Err(e) = self.break_after_first_call() {
                // Seen as `broke_at() == None` by the test.
                eprintln!("the fault could not be applied: {e}");
            }
        }
        self.ms.load(Ordering::SeqCst)
    }

    fn wait_for(&self, _at_ms: u64) -> Duration {
        Duration::ZERO
    }
}

/// A line of [`JOINED`] places on a played gateway, and a dispatcher (running as
/// [`DISPATCHER_USER`]) whose clock applies `fault` after its tick's first call.
struct Line {
    redis: RedisServer,
    store: Store,
    q: QueueId,
    gw: ServerId,
    key: Arc<SigningKey>,
    clock: Arc<BreakingClock>,
    admitter: Admitter,
    /// The line's places, in line order.
    places: Vec<u64>,
}

impl Line {
    async fn start(name: &str, fault: &[&str]) -> anyhow::Result<Self> {
        let redis = RedisServer::start()?;
        let mut admin = redis::Client::open(redis.url())?
            .get_multiplexed_async_connection()
            .await?;
        let setuser = Component::Dispatcher.setuser(DISPATCHER_USER, PASSWORD);
        let mut words = setuser.split_whitespace();
        let () = redis::cmd(words.next().unwrap_or_default())
            .arg(words.collect::<Vec<_>>())
            .query_async(&mut admin)
            .await?;
        let store = Store::connect(&redis.url()).await?;
        let q = QueueId::new(name)?;
        store
            .put_queue(
                &q,
                &QueueConfig {
                    admit_per_second: RATE,
                    ..Default::default()
                },
            )
            .await?;
        let (gw, index) = played_gateway(&store, &format!("gw-{name}")).await?;
        let mut places = Vec::new();
        for _ in 0..2 {
            let Joined::Places { last, count, .. } =
                store.join_many(&q, index, now_ms(), JOINED / 2).await?
            else {
                anyhow::bail!("the joins took no place");
            };
            places.extend(last + 1 - count..=last);
        }
        anyhow::ensure!(places.len() == JOINED);
        let clock = Arc::new(BreakingClock::new(&redis, &q, now_ms(), fault)?);
        let key = Arc::new(SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?);
        let settings = settings(&redis);
        let url = format!(
            "redis://{DISPATCHER_USER}:{PASSWORD}@127.0.0.1:{}",
            redis.port()
        );
        let admitter = Admitter::new(Store::connect(&url).await?, key.clone(), settings)
            .with_clock(clock.clone());
        Ok(Self {
            redis,
            store,
            q,
            gw,
            key,
            clock,
            admitter,
            places,
        })
    }

    /// Runs one tick admitting at `at`, the clock reading 100 ms before it: every call of the
    /// tick is made ahead of its admission time.
    async fn tick_at(
        &mut self,
        at: u64,
    ) -> Result<usher_dispatcher::tick::TickReport, usher_core::store::StoreError> {
        self.clock.set_ms(at - 100);
        self.admitter.tick_at(at).await
    }

    /// Runs a Redis command as the default user.
    async fn admin(&self, words: &[&str]) -> anyhow::Result<()> {
        let mut c = redis::Client::open(self.redis.url())?
            .get_multiplexed_async_connection()
            .await?;
        let () = redis::cmd(words[0])
            .arg(&words[1..])
            .query_async(&mut c)
            .await?;
        Ok(())
    }

    /// Entries left in the queue's outbox (sent, or not, but not recorded).
    async fn outbox_len(&self) -> anyhow::Result<u64> {
        let mut c = redis::Client::open(self.redis.url())?
            .get_multiplexed_async_connection()
            .await?;
        Ok(redis::cmd("LLEN")
            .arg(QueueKeys::new(&self.q).outbox)
            .query_async(&mut c)
            .await?)
    }

    /// Reads the played gateway's stream into `admissions` (place → every (admission time,
    /// token) it was sent with, in order) until it holds `places` places.
    async fn read_admissions(
        &self,
        admissions: &mut BTreeMap<u64, Vec<(u64, String)>>,
        places: usize,
    ) -> anyhow::Result<()> {
        eventually(&format!("{places} places admitted"), async || {
            let mut log = Vec::new();
            read_played(&self.store, &self.gw, &mut log).await?;
            for (_, m) in log {
                match m {
                    StreamMessage::Admitted { items, .. } => {
                        for a in items {
                            admissions
                                .entry(a.place.0)
                                .or_default()
                                .push((a.admitted_at_ms, a.token));
                        }
                    }
                    StreamMessage::AdmittedStaged { .. } => {
                        anyhow::bail!("nothing was staged, yet {m:?}")
                    }
                    _ => {}
                }
            }
            anyhow::ensure!(
                admissions.len() >= places,
                "{} places so far",
                admissions.len()
            );
            Ok(())
        })
        .await
    }

    /// After a tick at `at` that broke after its first script call: the first call's places
    /// were sent to the gateway, each once, stamped `at`, and their outbox entry is kept
    /// (`kept`: for whom). Every admission read so far.
    async fn first_call_sent(
        &self,
        at: u64,
        kept: &str,
    ) -> anyhow::Result<BTreeMap<u64, Vec<(u64, String)>>> {
        let mut admissions = BTreeMap::new();
        self.read_admissions(&mut admissions, FIRST_CALL).await?;
        assert_eq!(
            admissions.keys().copied().collect::<Vec<_>>(),
            self.places[..FIRST_CALL],
            "the first call's places, sent"
        );
        assert!(admissions.values().all(|s| s.len() == 1 && s[0].0 == at));
        assert_eq!(self.outbox_len().await?, 1, "{kept}");
        Ok(admissions)
    }

    /// The tick after the broken one at `at` (a second later) admits the rest of the line,
    /// and then everyone was admitted once ([`Self::check_everyone_admitted_once`]).
    async fn next_tick_admits_the_rest(
        &mut self,
        mut admissions: BTreeMap<u64, Vec<(u64, String)>>,
        at: u64,
    ) -> anyhow::Result<()> {
        let next = at + 1_000;
        let report = self.tick_at(next).await?;
        assert_eq!(report.admitted, (JOINED - FIRST_CALL) as u64, "{report:?}");
        self.check_everyone_admitted_once(&mut admissions, at, next)
            .await
    }

    /// After the tick that failed at `at` and the next one at `next`: every place of the line
    /// was sent its admission, each with one admission time and one token (those held when
    /// the tick failed were sent at `at`, then again from the outbox with the same token),
    /// every token verifies and names its place and queue; the outbox is empty and the line
    /// too.
    async fn check_everyone_admitted_once(
        &self,
        admissions: &mut BTreeMap<u64, Vec<(u64, String)>>,
        at: u64,
        next: u64,
    ) -> anyhow::Result<()> {
        self.read_admissions(admissions, JOINED).await?;
        assert_eq!(
            admissions.keys().copied().collect::<Vec<_>>(),
            self.places,
            "every place of the line, none other"
        );
        for (place, sent) in admissions.iter() {
            let (when, token) = &sent[0];
            assert!(
                sent.iter().all(|s| s == &sent[0]),
                "place {place} was admitted twice: {sent:?}"
            );
            let expected = if *place <= self.places[FIRST_CALL - 1] {
                at
            } else {
                next
            };
            assert_eq!(*when, expected, "place {place}'s admission time");
            let claims = self.key.verify(token)?;
            assert_eq!(
                (claims.sub.as_str(), claims.aud.as_str(), claims.iat),
                (place.to_string().as_str(), self.q.as_str(), expected / 1000),
                "place {place}'s token"
            );
        }
        let resent = admissions.values().filter(|s| s.len() == 2).count();
        assert_eq!(
            resent, FIRST_CALL,
            "the held admissions are sent again from the outbox, the others once"
        );
        assert_eq!(self.outbox_len().await?, 0, "the outbox is delivered");
        let stats = self.store.queue_stats(&self.q, next).await?;
        assert_eq!(
            (stats.admitted_total, stats.waiting),
            (JOINED as u64, 0),
            "{stats:?}"
        );
        Ok(())
    }
}

/// The tick's second script call fails (Redis refuses the dispatcher's scripts): the 250
/// places the first call took from the line and held for the admission time are sent to
/// their gateway all the same, stamped with it, before the tick reports the error; their
/// outbox entry stays for the next tick, which sends them again with the same tokens and
/// admits the rest of the line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_admissions_reach_their_gateway_when_a_later_call_fails() -> anyhow::Result<()> {
    let mut line = Line::start(
        "flush-on-error",
        &["ACL", "SETUSER", DISPATCHER_USER, "-evalsha", "-eval"],
    )
    .await?;
    let at = line.clock.now_ms() + 1_000;
    let failed = line.tick_at(at).await;
    assert!(
        line.clock.broke_at().is_some_and(|t| t < at),
        "the fault was applied ahead of the admission time"
    );
    let e = failed.expect_err("the tick's second call was refused");
    assert!(e.to_string().contains("no permissions"), "{e}");
    let admissions = line.first_call_sent(at, "kept for the next tick").await?;

    // Redis takes the scripts again: the next tick delivers the outbox, then the rest.
    line.admin(&["ACL", "SETUSER", DISPATCHER_USER, "+evalsha", "+eval"])
        .await?;
    line.next_tick_admits_the_rest(admissions, at).await
}

/// Another replica takes the lease between the tick's first and second script call: the
/// second call admits nobody, and the places the first one took and held are sent to their
/// gateway all the same, stamped with the admission time; the outbox keeps their entry for
/// whoever holds the lease next, which sends them again with the same tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_admissions_reach_their_gateway_when_the_lease_is_lost_mid_tick() -> anyhow::Result<()>
{
    let name = "flush-on-lease-loss";
    let lease = QueueKeys::new(&QueueId::new(name)?).lease;
    let mut line = Line::start(name, &["SET", &lease, "replica-b|99"]).await?;
    let at = line.clock.now_ms() + 1_000;
    let report = line.tick_at(at).await?;
    assert!(
        line.clock.broke_at().is_some_and(|t| t < at),
        "the lease was taken ahead of the admission time"
    );
    assert_eq!(report.queues, 0, "the queue is no longer driven here");
    let admissions = line.first_call_sent(at, "kept for the next holder").await?;
    let stats = line.store.queue_stats(&line.q, at).await?;
    assert_eq!(stats.admitted_total, FIRST_CALL as u64, "{stats:?}");

    // Replica B lets the lease go; this replica takes the queue again at the next tick.
    line.admin(&["DEL", &lease]).await?;
    line.next_tick_admits_the_rest(admissions, at).await
}

/// A queue whose scheduled sale opens at a tick's admission time `T` is ticked at `T`, not
/// ahead of it (`tick::queue`): its draw takes the pre-queue as it is at `T`. Joins run all
/// along the tick's lead (the tick starts 240 ms before `T`); every browser whose join (and
/// entrant record, as a gateway makes it) was answered before `T` is in the draw, and the
/// gateway hears of the draw no sooner than `T`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sale_with_its_draw_pending_ticks_at_its_admission_time() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("sale-at-time")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let (gw, index) = played_gateway(&store, "gw-sale").await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    let key = Arc::new(SigningKey::from_pkcs8_pem(&SigningKey::generate_pem()?)?);
    let settings = settings(&redis);
    let mut admitter = Admitter::new(store.clone(), key, settings);
    // The first tick takes the lease; the sale is not due.
    admitter.tick_at(now_ms()).await?;

    // The sale opens at the next tick's admission time, 240 ms from now: within the longest
    // lead of a 1 s tick (250 ms), the time a tick ahead would start at.
    let started = now_ms();
    let at = started + 240;
    assert!(store.schedule(&q, Some(at), &seed).await?);
    let stop = Arc::new(AtomicBool::new(false));
    let joins = tokio::spawn({
        let (store, q, stop) = (store.clone(), q.clone(), stop.clone());
        async move {
            // (place, its entrant hash, when its join and record were answered)
            let mut joined: Vec<(PlaceId, EntrantHash, u64)> = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let place = match store.join_many(&q, index, now_ms(), 1).await? {
                    Joined::Scheduled { last, .. } | Joined::Places { last, .. } => PlaceId(last),
                    other => anyhow::bail!("join: {other:?}"),
                };
                let hash = EntrantHash::of_ticket(&format!("{q}.{}", place.0));
                store.record_entrants(&q, &[(place, hash)]).await?;
                joined.push((place, hash, now_ms()));
            }
            anyhow::Ok(joined)
        }
    });
    let report = admitter.tick_at(at).await;
    stop.store(true, Ordering::SeqCst);
    let joined = joins.await??;
    report?;

    let drawn: HashSet<EntrantHash> = store.drawn_entrants(&q).await?.into_iter().collect();
    anyhow::ensure!(!drawn.is_empty(), "the draw ran");
    let before: Vec<_> = joined.iter().filter(|(_, _, t)| *t < at).collect();
    // The lead was exercised: joins were answered in it, well after the tick started.
    assert!(
        before.iter().any(|(_, _, t)| *t >= started + 50),
        "no join answered in the tick's lead: {:?}",
        joined.iter().map(|j| j.2).collect::<Vec<_>>()
    );
    for (place, hash, t) in &before {
        assert!(
            drawn.contains(hash),
            "place {place:?}, joined {} ms before the opening, is not in the draw",
            at - t
        );
    }
    let mut log = Vec::new();
    eventually("the gateway hears of the draw", async || {
        read_played(&store, &gw, &mut log).await?;
        anyhow::ensure!(log
            .iter()
            .any(|(_, m)| matches!(m, StreamMessage::Drawn { .. })));
        Ok(())
    })
    .await?;
    for (entry_ms, m) in &log {
        if matches!(m, StreamMessage::Drawn { .. }) {
            assert!(*entry_ms >= at, "drawn at {entry_ms}, before {at}");
        }
    }
    Ok(())
}

/// The admitter's settings of these tests: one replica, [`TICK`], on `redis`.
fn settings(redis: &RedisServer) -> Settings {
    Settings {
        replica: "replica-a".into(),
        tick: TICK,
        lease_ttl: Duration::from_secs(60),
        exact_positions: 100,
        redis: usher_core::store::RedisArgs::standalone(redis.url()),
    }
}
