//! A scheduled sale's pre-queue cannot be stuffed (issue 23, finding 2): an entrant counts
//! for its client address until the draw, however long ago its stream ended; the draw puts
//! the entrants whose browsers were there first and the absent ones after them, and the
//! public record lists both groups; `max_entrants` caps the pre-queue with a clear event.
//! Real gateway, dispatcher and `redis-server`; the record is checked by the Python verifier
//! of docs/policies.md and by the order recomputed here without usher's code.

use crate::draw_check::{drawn_order, entrant, python_check};

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::{json, Value};
use usher_core::draw::{EntrantHash, Seed};
use usher_core::ids::QueueId;
use usher_core::store::{DrawOutcome, DrawPrep, Joined, QueueConfig, Store};
use usher_core::time::{now_ms, rfc3339_ms};
use usher_testkit::browser::Browser;
use usher_testkit::line::{data, PAUSED, T};
use usher_testkit::sse::SseItem;
use usher_testkit::stack::{self, Stack, StackOptions};
use usher_testkit::wait::{eventually, eventually_within, Seen};
use usher_testkit::{RedisServer, SseClient};

/// `PUT /admin/queues/{queue}` with `body`: (status, JSON answer).
async fn put(stack: &Stack, queue: &str, body: Value) -> anyhow::Result<(u16, Value)> {
    let r = stack
        .http
        .put(format!("{}/admin/queues/{queue}", stack.dispatcher.url()))
        .json(&body)
        .send()
        .await?;
    Ok((r.status().as_u16(), r.json().await?))
}

/// Schedules `queue`'s sale `in_ms` from now.
async fn schedule(stack: &Stack, queue: &str, in_ms: u64) -> anyhow::Result<()> {
    let (status, v) = put(
        stack,
        queue,
        json!({"opens_at": rfc3339_ms(now_ms() + in_ms)}),
    )
    .await?;
    anyhow::ensure!(status == 200, "schedule answered {status}: {v}");
    Ok(())
}

/// The draw record once the draw ran.
async fn drawn(stack: &Stack, queue: &str) -> anyhow::Result<Value> {
    let url = format!("{}/api/queues/{queue}/draw", stack.gateway_url(0));
    eventually_within("the draw to run", Duration::from_secs(30), async || {
        let v: Value = stack.http.get(&url).send().await.ok()?.json().await.ok()?;
        (!v["seed"].is_null()).then_some(v)
    })
    .await
}

/// What a stream request got: its first event, or a `retry:` and the end.
enum Answer {
    Event(usher_sse::Event, Box<usher_testkit::sse::SseConn>),
    Retry,
}

async fn open(c: &SseClient, queue: &str, ticket: Option<&str>) -> anyhow::Result<Answer> {
    let mut conn = c
        .open(&format!("/api/queues/{queue}/stream"), ticket)
        .await?;
    anyhow::ensure!(conn.status == 200, "stream answered {}", conn.status);
    let mut retry = false;
    loop {
        match conn.next_item(T).await? {
            Some(SseItem::Event(e)) => return Ok(Answer::Event(e, Box::new(conn))),
            Some(SseItem::Retry(_)) => retry = true,
            Some(SseItem::Comment(_)) => {}
            None if retry => return Ok(Answer::Retry),
            None => anyhow::bail!("the stream ended without an event or retry:"),
        }
    }
}

/// (a) The per-address place cap holds for pre-queue entrants until the draw: an address
/// that joined its cap and dropped every stream cannot join again once the place memory of an
/// ordinary place has passed (it follows the queue's grace period, 1 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entrant_counts_for_its_address_until_the_draw() -> anyhow::Result<()> {
    const Q: &str = "stuffed";
    const CAP: u32 = 3;
    let mut stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.ip_max_places = CAP;
    stack.gateways.push(stack::gateway_with(cfg).await?);
    let (status, v) = put(
        &stack,
        Q,
        json!({"admit_per_second": PAUSED, "grace_seconds": 1, "passthrough": false, "confirm": true}),
    )
    .await?;
    anyhow::ensure!(status == 201, "{v}");
    schedule(&stack, Q, 600_000).await?;
    let from = |last| {
        SseClient::from_address(
            stack.gateway_url(0),
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)),
            HeaderMap::new(),
        )
    };
    let abuser = from(2)?;
    for i in 0..CAP {
        match open(&abuser, Q, None).await? {
            // The stream is dropped at once: the browser "went away".
            Answer::Event(e, _) if e.event == "scheduled" => {}
            Answer::Event(e, _) => anyhow::bail!("join {i}: {} {}", e.event, e.data),
            Answer::Retry => anyhow::bail!("join {i} of the cap was refused"),
        }
    }
    // Longer than the grace period (and so the place memory of a place in line): the
    // entrants still stand in the pre-queue, and still count for the address.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for i in 0..3 {
        match open(&abuser, Q, None).await? {
            Answer::Retry => {}
            Answer::Event(e, _) => anyhow::bail!(
                "entrant {} of one address was let in before the draw: {} {}",
                CAP + i + 1,
                e.event,
                e.data
            ),
        }
    }
    // Another address joins as usual.
    assert!(matches!(
        open(&from(3)?, Q, None).await?,
        Answer::Event(e, _) if e.event == "scheduled"
    ));
    Ok(())
}

/// A pre-queue that ends without a draw (the queue closed) frees its entrants' count on the
/// address: they become ordinary places, forgotten once the grace period has passed, and the
/// address joins elsewhere again (a NAT's users are not locked out until the gateway
/// restarts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entrants_of_a_closed_pre_queue_stop_counting_for_their_address() -> anyhow::Result<()> {
    const Q: &str = "closing";
    const CAP: u32 = 2;
    let mut stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.ip_max_places = CAP;
    stack.gateways.push(stack::gateway_with(cfg).await?);
    for q in [Q, "next"] {
        let (status, v) = put(
            &stack,
            q,
            json!({"admit_per_second": PAUSED, "grace_seconds": 1, "passthrough": false, "confirm": true}),
        )
        .await?;
        anyhow::ensure!(status == 201, "{v}");
    }
    schedule(&stack, Q, 600_000).await?;
    let nat = SseClient::from_address(
        stack.gateway_url(0),
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 4)),
        HeaderMap::new(),
    )?;
    for i in 0..CAP {
        match open(&nat, Q, None).await? {
            Answer::Event(e, _) if e.event == "scheduled" => {}
            Answer::Event(e, _) => anyhow::bail!("join {i}: {} {}", e.event, e.data),
            Answer::Retry => anyhow::bail!("join {i} of the cap was refused"),
        }
    }
    assert!(
        matches!(open(&nat, "next", None).await?, Answer::Retry),
        "the entrants count for the address while the pre-queue stands"
    );
    let closed = stack
        .http
        .delete(format!("{}/admin/queues/{Q}", stack.dispatcher.url()))
        .send()
        .await?;
    anyhow::ensure!(closed.status() == 200, "close answered {}", closed.status());
    // Then, past the grace period, the address takes a place in another queue.
    eventually(
        "the closed pre-queue's entrants stop counting",
        async || match open(&nat, "next", None).await? {
            Answer::Event(e, _) if e.event == "waiting" => Ok(()),
            Answer::Event(e, _) => anyhow::bail!("{} {}", e.event, e.data),
            Answer::Retry => anyhow::bail!("still refused"),
        },
    )
    .await?;
    Ok(())
}

/// (b) The draw places the entrants whose browsers were there first, then those whose
/// browsers had gone away; the record lists both groups, each in the committed order, and
/// the docs' verifier checks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_entrants_are_drawn_after_every_present_one() -> anyhow::Result<()> {
    const Q: &str = "presence";
    const PRESENT: usize = 4;
    const ABSENT: usize = 4;
    let stack = Stack::start(StackOptions {
        gateways: 1,
        ..Default::default()
    })
    .await?;
    let (status, v) = put(&stack, Q, json!({"admit_per_second": 20.0, "paused": true})).await?;
    anyhow::ensure!(status == 201, "{v}");
    schedule(&stack, Q, 6_000).await?;
    let c = SseClient::new(stack.gateway_url(0));

    // Joins alternate: absent entrants' ids interleave with present ones, so a FIFO or a
    // single draw order would mix them.
    let mut present = Vec::new();
    let mut absent = Vec::new();
    for _ in 0..PRESENT {
        let b = Browser::spawn(vec![c.clone()], Q, 0, Duration::from_secs(60));
        eventually("a present browser hears scheduled", async || {
            b.seen().ticket.is_some()
        })
        .await?;
        present.push(b);
        match open(&c, Q, None).await? {
            Answer::Event(e, conn) if e.event == "scheduled" => {
                absent.push(e.id);
                drop(conn);
            }
            Answer::Event(e, _) => anyhow::bail!("{} {}", e.event, e.data),
            Answer::Retry => anyhow::bail!("a join was refused"),
        }
    }
    assert_eq!(absent.len(), ABSENT);

    let record = drawn(&stack, Q).await?;
    let seed = hex::decode(record["seed"].as_str().unwrap_or_default())?;
    let tickets: Vec<String> = present
        .iter()
        .map(|b| b.seen().ticket.unwrap_or_default())
        .collect();
    let want_present = drawn_order(&seed, tickets.iter().map(|t| entrant(t)).collect());
    let want_absent = drawn_order(&seed, absent.iter().map(|t| entrant(t)).collect());
    assert_eq!(
        (&record["entrants"], &record["absent_entrants"]),
        (&json!(want_present), &json!(want_absent)),
        "present entrants first, then the absent ones, each group in the seed's order"
    );
    let out = python_check(&record)?;
    assert_eq!(
        out.trim(),
        format!(
            "draw verified: {} entrants ({ABSENT} absent, drawn last)",
            PRESENT + ABSENT
        )
    );

    // The line follows: present browsers stand at 1..=PRESENT in drawn order, and each
    // absent ticket resumed after the draw stands behind all of them.
    let position = |b: &Browser| b.seen().positions.last().map(|p| p.1);
    eventually("each present browser at its drawn rank", async || {
        let at: Vec<_> = present
            .iter()
            .map(|b| (position(b), b.seen().ticket.map(|t| entrant(&t))))
            .collect();
        let ok = at.iter().all(|(p, h)| {
            let rank = want_present.iter().position(|w| Some(w) == h.as_ref());
            p.is_some() && *p == rank.map(|r| r as u64 + 1)
        });
        if ok {
            Ok(())
        } else {
            Err(Seen(at))
        }
    })
    .await?;
    for t in &absent {
        let rank = want_absent
            .iter()
            .position(|w| *w == entrant(t))
            .expect("in the record");
        match open(&c, Q, Some(t)).await? {
            Answer::Event(e, _) if e.event == "waiting" => assert_eq!(
                data(&e)["position"],
                json!(PRESENT + rank + 1),
                "an absent entrant stands behind every present one"
            ),
            Answer::Event(e, _) => anyhow::bail!("{} {}", e.event, e.data),
            Answer::Retry => anyhow::bail!("an absent entrant's resume was refused"),
        }
    }
    Ok(())
}

/// (c) `max_entrants` caps a pre-queue: the next join is answered `event: pre_queue_full`,
/// takes no place, and the cap shows in the admin API.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_entrants_refuses_the_next_entrant_with_a_clear_event() -> anyhow::Result<()> {
    const Q: &str = "capped";
    let stack = Stack::start(StackOptions::default()).await?;
    let (status, v) = put(
        &stack,
        Q,
        json!({"admit_per_second": PAUSED, "max_entrants": 2}),
    )
    .await?;
    assert_eq!(status, 201, "max_entrants is a queue setting: {v}");
    assert_eq!(v["max_entrants"], 2, "{v}");
    schedule(&stack, Q, 600_000).await?;
    let c = SseClient::new(stack.gateway_url(0));
    let mut held = Vec::new();
    for _ in 0..2 {
        match open(&c, Q, None).await? {
            Answer::Event(e, conn) if e.event == "scheduled" => held.push((e.id, conn)),
            Answer::Event(e, _) => anyhow::bail!("{} {}", e.event, e.data),
            Answer::Retry => anyhow::bail!("a join under the cap was refused"),
        }
    }
    match open(&c, Q, None).await? {
        Answer::Event(e, mut conn) => {
            assert_eq!(e.event, "pre_queue_full", "{}", e.data);
            assert_eq!(data(&e), json!({"queue": Q, "max_entrants": 2}));
            assert!(e.id.is_empty(), "no ticket: no place was taken");
            assert!(conn.next_event(T).await?.is_none(), "the stream ends");
        }
        Answer::Retry => anyhow::bail!("refused with only retry:, not a clear event"),
    }
    // A resume is not a new entrant; and leaving frees room for one.
    assert!(matches!(
        open(&c, Q, Some(&held[0].0)).await?,
        Answer::Event(e, _) if e.event == "scheduled"
    ));
    let r = stack
        .http
        .delete(format!(
            "{}/api/queues/{Q}/tickets/{}",
            stack.gateway_url(0),
            held[1].0
        ))
        .send()
        .await?;
    assert_eq!(r.status().as_u16(), 204);
    assert!(matches!(
        open(&c, Q, None).await?,
        Answer::Event(e, _) if e.event == "scheduled"
    ));
    // Refused when not a whole number of at least 1.
    for bad in [json!(0), json!(-1), json!(1.5)] {
        let (status, v) = put(&stack, Q, json!({"max_entrants": bad})).await?;
        assert_eq!(status, 400, "{bad} → {v}");
    }
    let (status, v) = put(&stack, Q, json!({"max_entrants": null})).await?;
    assert_eq!((status, &v["max_entrants"]), (200, &Value::Null), "{v}");
    Ok(())
}

/// Upgrade: a pre-queue written by the previous version (no `pre_away` set: every entrant
/// reads as present) draws exactly as before, in one group.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_queue_of_the_previous_version_draws_as_before() -> anyhow::Result<()> {
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("upgraded")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    let Joined::Scheduled { last, count, .. } = store.join_many(&q, 0, now_ms(), 30).await? else {
        anyhow::bail!("joins did not go to the pre-queue");
    };
    let entrants: Vec<_> = (last + 1 - count..=last)
        .map(|p| {
            let p = usher_core::ids::PlaceId(p);
            (p, EntrantHash::of_ticket(&format!("upgraded.{}.old", p.0)))
        })
        .collect();
    store.record_entrants(&q, &entrants).await?;
    assert!(store.schedule(&q, Some(now_ms()), &seed).await?);
    let lease = store
        .acquire_lease(&q, "replica-a", Duration::from_secs(60))
        .await?
        .ok_or_else(|| anyhow::anyhow!("no lease"))?;
    let DrawPrep::Ready(due) = store.prepare_draw(&q, &lease, 60_000, now_ms()).await? else {
        anyhow::bail!("the draw is not ready");
    };
    let expected: Vec<EntrantHash> = seed
        .order(None, entrants.iter().map(|(p, h)| (*h, *p)).collect())
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    let recorded = due.recorded;
    assert!(due.absent.is_empty(), "no pre_away set: nobody is absent");
    let order = due.order();
    let outcome = store
        .run_draw(
            &q,
            &lease,
            60_000,
            now_ms(),
            recorded,
            &order.entrants,
            order.absent,
        )
        .await?;
    assert!(
        matches!(outcome, DrawOutcome::Done { drawn: 30, .. }),
        "{outcome:?}"
    );
    let (present, absent) = store.drawn_groups(&q).await?;
    assert_eq!((present, absent), (expected, Vec::new()));
    Ok(())
}

/// A draw interrupted inside its absent group goes on there: the gateways' disconnect marks
/// (`Store::mark_away` on pre-queue places) split the entrants, the first step records the
/// present group and part of the absent one, and the next lease holder finishes the absent
/// group in order. The record's groups and the line come out as one uninterrupted draw.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draw_interrupted_among_the_absent_goes_on_there() -> anyhow::Result<()> {
    use usher_core::ids::PlaceId;
    use usher_core::store::{DrawStep, PlaceState, DRAW_STEP};
    const N: u64 = 1_500;
    let redis = RedisServer::start()?;
    let store = Store::connect(&redis.url()).await?;
    let q = QueueId::new("interrupted")?;
    store.put_queue(&q, &QueueConfig::default()).await?;
    let seed = Seed::generate();
    store
        .schedule(&q, Some(now_ms() + 3_600_000), &seed)
        .await?;
    let mut places = Vec::new();
    for _ in 0..N / 500 {
        let Joined::Scheduled { last, count, .. } = store.join_many(&q, 0, now_ms(), 500).await?
        else {
            anyhow::bail!("joins did not go to the pre-queue");
        };
        let batch: Vec<_> = (last + 1 - count..=last)
            .map(|p| {
                (
                    PlaceId(p),
                    EntrantHash::of_ticket(&format!("interrupted.{p}.t")),
                )
            })
            .collect();
        store.record_entrants(&q, &batch).await?;
        places.extend(batch);
    }
    // Every other entrant's browser went away (gateway 0 holds them all), and one came back.
    let away: Vec<PlaceId> = places.iter().step_by(2).map(|(p, _)| *p).collect();
    assert_eq!(
        store.mark_away(&q, &away, 0, now_ms()).await?,
        away.len() as u64
    );
    assert!(matches!(
        store.resume(&q, away[0], 0, now_ms()).await?,
        PlaceState::Scheduled { .. }
    ));
    let absent_n = away.len() - 1;
    assert!(store.schedule(&q, Some(now_ms()), &seed).await?);
    let lease = store
        .acquire_lease(&q, "replica-a", Duration::from_secs(60))
        .await?
        .ok_or_else(|| anyhow::anyhow!("no lease"))?;
    let DrawPrep::Ready(due) = store.prepare_draw(&q, &lease, 60_000, now_ms()).await? else {
        anyhow::bail!("the draw is not ready");
    };
    assert_eq!(
        (due.entrants.len(), due.absent.len()),
        (N as usize - absent_n, absent_n)
    );
    let whole = due.order();
    assert_eq!(whole.absent, absent_n);
    let present_n = N as usize - absent_n;
    assert!(
        present_n < DRAW_STEP,
        "the first step reaches into the absent group"
    );

    // One step, then the replica stops.
    let first = &whole.entrants[..DRAW_STEP];
    let step = store
        .draw_step_with_absent(
            &q,
            &lease,
            60_000,
            now_ms(),
            0,
            first,
            DRAW_STEP - present_n,
        )
        .await?;
    assert!(matches!(step, DrawStep::Placed { placed, .. } if placed == DRAW_STEP as u64));
    // The next holder reads what is left: absent entrants only, after the last recorded.
    let DrawPrep::Ready(again) = store.prepare_draw(&q, &lease, 60_000, now_ms()).await? else {
        anyhow::bail!("the draw is not ready again");
    };
    assert!(
        again.entrants.is_empty(),
        "every present entrant was placed"
    );
    let recorded = again.recorded;
    let rest = again.order();
    assert_eq!(rest.entrants, whole.entrants[DRAW_STEP..].to_vec());
    assert_eq!(rest.absent, rest.entrants.len());
    let outcome = store
        .run_draw(
            &q,
            &lease,
            60_000,
            now_ms(),
            recorded,
            &rest.entrants,
            rest.absent,
        )
        .await?;
    assert!(matches!(outcome, DrawOutcome::Done { .. }), "{outcome:?}");

    let hashes = |s: &[(EntrantHash, PlaceId)]| s.iter().map(|e| e.0).collect::<Vec<_>>();
    let (present, absent) = store.drawn_groups(&q).await?;
    assert_eq!(present, hashes(&whole.entrants[..present_n]));
    assert_eq!(absent, hashes(&whole.entrants[present_n..]));
    // In line: the last present entrant, then the first absent one.
    for (i, (_, place)) in whole
        .entrants
        .iter()
        .enumerate()
        .skip(present_n - 1)
        .take(2)
    {
        match store.status(&q, *place, now_ms()).await? {
            PlaceState::Waiting { position, .. } => assert_eq!(position, i as u64 + 1),
            other => anyhow::bail!("{place:?} is {other:?}"),
        }
    }
    Ok(())
}
