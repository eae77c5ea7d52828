//! Browser binding (`bind: "browser_key"`) checked by the place's own scripts: `leave.lua`,
//! `resume.lua` and `status.lua` compare the key the request proved with the place's key in
//! the same call as what they do. The gateway's proof check (`place_key.lua`) is a call of
//! its own before them, so a check there alone leaves gaps a copied ticket (without the key)
//! can act through: a gateway that cached the queue as unknown a moment before it was
//! configured again checks nothing, and a place put back by a restore between the check and
//! the action was "over" when checked.

use std::time::Duration;

use usher_core::binding::{Bind, Thumbprint};
use usher_core::ids::{PlaceId, QueueId};
use usher_core::keys::QueueKeys;
use usher_core::store::{
    Asker, LeaveOutcome, PlaceState, QueueConfig, Restore, Store, Tick, TicketKey,
};
use usher_core::time::now_ms;
use usher_testkit::dpop::BrowserKey;
use usher_testkit::line::{place_of, take_lease};
use usher_testkit::procs::Proc;
use usher_testkit::redis_server::redis_cli;
use usher_testkit::sse::Watcher;
use usher_testkit::{tick_args, tick_calls, RedisServer, SseClient};

const Q: &str = "bound-script";
const STREAM: &str = "/api/queues/bound-script/stream";
const STATUS: &str = "/api/queues/bound-script/status";
const T: Duration = Duration::from_secs(10);

fn binding() -> QueueConfig {
    QueueConfig {
        paused: true,
        passthrough: false,
        grace_seconds: 600,
        bind: Bind::BrowserKey,
        ..QueueConfig::default()
    }
}

/// A thumbprint made of one character (what Redis stores; the store tests need no real key).
fn thumbprint(c: char) -> Thumbprint {
    Thumbprint::parse(&format!("{}A", c.to_string().repeat(Thumbprint::LEN - 1)))
        .expect("43 base64url characters")
}

/// Gateway B cached the queue's setting as unknown (the queue's meta lost, as in a data loss)
/// just before the queue is configured again; in that second it must still refuse a copied
/// ticket without a proof: no status (where the place stands, or its token) and no leave.
/// Gateway A holds the place's browser, so B has no stream of it to check against.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copied_ticket_is_refused_while_a_gateway_caches_the_queue_unknown() -> anyhow::Result<()>
{
    let redis = RedisServer::start()?;
    let env = [
        ("USHER_REDIS_URL", redis.url()),
        ("USHER_HEARTBEAT_MS", "200".to_owned()),
        (
            "USHER_TICKET_KEY",
            "bind-script-test-ticket-key-0123456789abcdef".to_owned(),
        ),
    ];
    let (a, b) = (
        Proc::start("usher-gateway", &env).await?,
        Proc::start("usher-gateway", &env).await?,
    );
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new(Q)?;
    store.put_queue(&q, &binding()).await?;

    // The victim joins through A with its key and keeps its stream open there.
    let key = BrowserKey::generate();
    let mut conn = SseClient::new(a.url())
        .open(
            &format!("{STREAM}?proof={}", key.proof("GET", STREAM, None)),
            None,
        )
        .await?;
    anyhow::ensure!(conn.status == 200, "join: {}", conn.status);
    let first = conn.wait_for("waiting", T).await?;
    let ticket = first.id.clone();
    let place = PlaceId(place_of(&ticket));
    let victim = Watcher::spawn_with(conn, vec![first]);

    // The queue's meta is lost; B is asked about the ticket and caches "unknown" (~1 s).
    redis_cli(redis.port(), &["DEL", &QueueKeys::new(&q).meta])?;
    let status = format!("{}{STATUS}?ticket={ticket}", b.url());
    let r = reqwest::get(&status).await?;
    assert_eq!(
        r.status().as_u16(),
        404,
        "unknown queue: {}",
        r.text().await?
    );

    // The operator configures the queue again; within B's cached second, the copied ticket
    // (no proof) asks where the place stands and tries to make its owner leave.
    store.put_queue(&q, &binding()).await?;
    let r = reqwest::get(&status).await?;
    let (code, body) = (r.status().as_u16(), r.text().await?);
    assert_eq!(
        code, 403,
        "status of a copied ticket without a proof: {body}"
    );
    assert!(body.contains("wrong_key"), "{body}");
    let r = reqwest::Client::new()
        .delete(format!("{}/api/queues/{Q}/tickets/{ticket}", b.url()))
        .send()
        .await?;
    let (code, body) = (r.status().as_u16(), r.text().await?);
    assert_eq!(
        code, 403,
        "leave by a copied ticket without a proof: {body}"
    );
    assert!(body.contains("wrong_key"), "{body}");

    // Nothing changed: the place is in line, its browser was not told `left`.
    assert!(
        matches!(
            store.status(&q, place, now_ms()).await?,
            PlaceState::Waiting { .. }
        ),
        "the place is still in line"
    );
    assert!(
        victim.all("closed").is_empty(),
        "the victim's stream was closed: {:?}",
        victim.all("closed")
    );

    // The owner's own proof is taken through B all the same.
    let r = reqwest::get(format!("{status}&proof={}", key.proof("GET", STATUS, None))).await?;
    let (code, body) = (r.status().as_u16(), r.text().await?);
    assert_eq!(code, 200, "the owner's status: {body}");
    victim.disconnect();
    Ok(())
}

/// A browser's request that proved `key` (`None`: nothing).
fn ticket(key: Option<&Thumbprint>) -> Asker<'_> {
    Asker::Ticket {
        proven: key,
        known: None,
    }
}

/// Places joined on gateway 0 of `q`, one per key (`None`: joined without one).
async fn join(
    store: &Store,
    q: &QueueId,
    keys: &[Option<Thumbprint>],
) -> anyhow::Result<Vec<PlaceId>> {
    let batch = store
        .join_bound(q, 0, now_ms(), &vec![None; keys.len()], keys)
        .await?;
    (0..keys.len())
        .map(|i| match batch.outcome(i) {
            Ok(PlaceState::Waiting { place, .. }) => Ok(place),
            other => Err(anyhow::anyhow!("a waiting place expected, got {other:?}")),
        })
        .collect()
}

/// Where `place` stands, as the gateway itself sees it (nothing checked).
async fn standing(store: &Store, q: &QueueId, place: PlaceId) -> anyhow::Result<PlaceState> {
    Ok(store.status(q, place, now_ms()).await?)
}

/// On a binding queue, a live place bound to key K: leave, resume and status with another key
/// or with none are refused by the scripts and change nothing (the place stays in line, held by
/// its gateway); with K they work. This holds whatever the gateway checked before (its check
/// is a call of its own: a data loss or a restore may come between).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_place_scripts_refuse_a_key_that_is_not_the_places() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("scripted")?;
    store.put_queue(&q, &binding()).await?;
    let (k, other) = (thumbprint('k'), thumbprint('o'));
    let places = join(&store, &q, &[Some(k.clone()), Some(k.clone())]).await?;
    let (p, behind) = (places[0], places[1]);

    for wrong in [Some(&other), None] {
        assert_eq!(
            store.status_as(&q, p, now_ms(), ticket(wrong)).await?,
            PlaceState::WrongKey,
            "status with {wrong:?}"
        );
        assert_eq!(
            store.leave_as(&q, p, ticket(wrong)).await?,
            LeaveOutcome::WrongKey,
            "leave with {wrong:?}"
        );
        assert_eq!(
            store
                .resume_bound(&q, p, 7, now_ms(), ticket(wrong))
                .await?,
            PlaceState::WrongKey,
            "resume on gateway 7 with {wrong:?}"
        );
        // Even the key the gateway knows the place by does not stand in for a proof.
        let known = Asker::Ticket {
            proven: wrong,
            known: Some(&k),
        };
        assert_eq!(
            store.resume_bound(&q, p, 7, now_ms(), known).await?,
            PlaceState::WrongKey
        );
    }
    assert!(
        matches!(
            standing(&store, &q, p).await?,
            PlaceState::Waiting {
                position: 1,
                waiting: 2,
                ..
            }
        ),
        "the place is still first in line"
    );

    // With K: status, then a resume on gateway 7, which finds the place still held by gateway
    // 0 (no refused resume moved it), then a leave that names gateway 7 as its holder.
    assert!(matches!(
        store.status_as(&q, p, now_ms(), ticket(Some(&k))).await?,
        PlaceState::Waiting { position: 1, .. }
    ));
    match store
        .resume_bound(&q, p, 7, now_ms(), ticket(Some(&k)))
        .await?
    {
        PlaceState::Waiting {
            previous_gateway, ..
        } => assert_eq!(previous_gateway, Some(0), "held by gateway 0 until now"),
        other => anyhow::bail!("resume with K: {other:?}"),
    }
    assert_eq!(
        store.leave_as(&q, p, ticket(Some(&k))).await?,
        LeaveOutcome::Left {
            gateway: Some(7),
            place: p
        }
    );
    assert_eq!(standing(&store, &q, p).await?, PlaceState::Gone);
    // A place over for good answers as before, whoever asks.
    assert_eq!(
        store.status_as(&q, p, now_ms(), ticket(None)).await?,
        PlaceState::WrongKey,
        "its key is still in `bound` (until pruned): only K is told"
    );
    redis_cli(
        redis.port(),
        &["HDEL", &QueueKeys::new(&q).bound, &p.0.to_string()],
    )?;
    assert_eq!(
        store.status_as(&q, p, now_ms(), ticket(None)).await?,
        PlaceState::Gone,
        "its key pruned: gone, as for anyone"
    );
    assert_eq!(
        store.leave_as(&q, p, ticket(Some(&other))).await?,
        LeaveOutcome::NotFound
    );
    assert!(matches!(
        standing(&store, &q, behind).await?,
        PlaceState::Waiting { position: 1, .. }
    ));
    Ok(())
}

/// An admitted place's token is handed out, and its session given up, only with its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_place_answers_only_its_key() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("scripted-admitted")?;
    let config = QueueConfig {
        paused: false,
        admit_per_second: 100.0,
        ..binding()
    };
    store.put_queue(&q, &config).await?;
    let (k, other) = (thumbprint('k'), thumbprint('o'));
    let p = join(&store, &q, &[Some(k.clone())]).await?[0];
    let lease = take_lease(&store, &q).await?;
    let calls = tick_calls(&store, &q, &tick_args(&lease, now_ms() + 1_000)).await?;
    let admitted: u64 = calls
        .iter()
        .map(|t| match t {
            Tick::Ticked(o) => o.admitted,
            _ => 0,
        })
        .sum();
    anyhow::ensure!(admitted == 1, "the place admitted: {calls:?}");
    let admitted = standing(&store, &q, p).await?;
    assert!(
        matches!(
            admitted,
            PlaceState::Admitted(_) | PlaceState::AdmissionPending
        ),
        "{admitted:?}"
    );

    for wrong in [Some(&other), None] {
        assert_eq!(
            store.status_as(&q, p, now_ms(), ticket(wrong)).await?,
            PlaceState::WrongKey
        );
        assert_eq!(
            store
                .resume_bound(&q, p, 7, now_ms(), ticket(wrong))
                .await?,
            PlaceState::WrongKey
        );
        assert_eq!(
            store.leave_as(&q, p, ticket(wrong)).await?,
            LeaveOutcome::WrongKey
        );
    }
    assert_eq!(
        standing(&store, &q, p).await?,
        admitted,
        "the session is untouched"
    );
    assert_eq!(
        store.status_as(&q, p, now_ms(), ticket(Some(&k))).await?,
        admitted
    );
    assert_eq!(
        store.leave_as(&q, p, ticket(Some(&k))).await?,
        LeaveOutcome::Released
    );
    assert_eq!(
        store.status_as(&q, p, now_ms(), ticket(Some(&k))).await?,
        PlaceState::SessionEnded
    );
    Ok(())
}

/// A live place without a key on a binding queue (it joined before the queue bound) cannot be
/// proven: every key is refused. A queue that binds nothing checks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyless_place_is_refused_and_a_queue_without_bind_checks_nothing() -> anyhow::Result<()>
{
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("scripted-keyless")?;
    store.put_queue(&q, &binding()).await?;
    let k = thumbprint('k');
    let p = join(&store, &q, &[None]).await?[0];
    for proven in [Some(&k), None] {
        assert_eq!(
            store.status_as(&q, p, now_ms(), ticket(proven)).await?,
            PlaceState::WrongKey
        );
        assert_eq!(
            store.leave_as(&q, p, ticket(proven)).await?,
            LeaveOutcome::WrongKey
        );
        assert_eq!(
            store
                .resume_bound(&q, p, 7, now_ms(), ticket(proven))
                .await?,
            PlaceState::WrongKey
        );
    }
    assert!(matches!(
        standing(&store, &q, p).await?,
        PlaceState::Waiting { .. }
    ));

    let plain = QueueId::new("scripted-plain")?;
    store
        .put_queue(
            &plain,
            &QueueConfig {
                bind: Bind::None,
                ..binding()
            },
        )
        .await?;
    let places = join(&store, &plain, &[None, None]).await?;
    assert!(matches!(
        store
            .status_as(&plain, places[0], now_ms(), ticket(None))
            .await?,
        PlaceState::Waiting { position: 1, .. }
    ));
    assert!(matches!(
        store
            .resume_bound(&plain, places[0], 7, now_ms(), ticket(None))
            .await?,
        PlaceState::Waiting {
            previous_gateway: Some(0),
            ..
        }
    ));
    assert_eq!(
        store.leave_as(&plain, places[1], ticket(Some(&k))).await?,
        LeaveOutcome::Left {
            gateway: Some(0),
            place: places[1]
        }
    );
    Ok(())
}

/// The race of a data loss: the gateway checks a copied ticket while its place is lost (no key
/// to compare: `place_key.lua` says it is over, and any proof passes), then the gateway that
/// held the place puts it back with its key, then the copied ticket's leave, resume or status
/// runs. The scripts refuse it: the place stays in line, held by its gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_restored_after_the_gateways_check_is_still_refused() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("scripted-race")?;
    store.put_queue(&q, &binding()).await?;
    let (k, thief) = (thumbprint('k'), thumbprint('t'));
    let p = join(&store, &q, &[Some(k.clone())]).await?[0];

    // The loss: the place and its key are gone; the check sees a place over for good.
    let keys = QueueKeys::new(&q);
    let id = p.0.to_string();
    redis_cli(redis.port(), &["ZREMRANGEBYSCORE", &keys.waiting, &id, &id])?;
    redis_cli(redis.port(), &["HDEL", &keys.bound, &id])?;
    assert_eq!(store.ticket_key(&q, p).await?, TicketKey::Over);

    // Gateway 3, which held the browser, puts the place back with its key.
    let restored = store
        .restore_places_bound(&q, 3, &[p], &[Some(k.clone())], now_ms())
        .await?;
    assert!(
        matches!(restored, Restore::Done { restored: 1, .. }),
        "{restored:?}"
    );

    // Then the copied ticket's action, with what its proof showed (the thief's key).
    assert_eq!(
        store.leave_as(&q, p, ticket(Some(&thief))).await?,
        LeaveOutcome::WrongKey
    );
    assert_eq!(
        store
            .resume_bound(&q, p, 7, now_ms(), ticket(Some(&thief)))
            .await?,
        PlaceState::WrongKey
    );
    assert_eq!(
        store
            .status_as(&q, p, now_ms(), ticket(Some(&thief)))
            .await?,
        PlaceState::WrongKey
    );
    match store
        .resume_bound(&q, p, 7, now_ms(), ticket(Some(&k)))
        .await?
    {
        PlaceState::Waiting {
            previous_gateway, ..
        } => assert_eq!(
            previous_gateway,
            Some(3),
            "still held by the restoring gateway"
        ),
        other => anyhow::bail!("the owner's resume: {other:?}"),
    }
    Ok(())
}
