//! One client must not take the line: per-IP limits at the gateway, and the client address
//! they count under — from the socket, from `X-Forwarded-For` across trusted hops, or from a
//! PROXY protocol header. Clients are other loopback addresses (`127.0.0.x`), each a client
//! address of its own, so one test can be an abuser and an ordinary browser at once.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use anyhow::Context;
use reqwest::header::{HeaderMap, HeaderValue};
use usher_testkit::line::PAUSED;
use usher_testkit::line::T;
use usher_testkit::raw;
use usher_testkit::sse::{SseConn, SseItem};
use usher_testkit::stack::{self, Stack, StackOptions};
use usher_testkit::wait::{eventually, within};
use usher_testkit::SseClient;

fn loopback(last: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
}

/// What a stream request got: a place (its ticket, and the open stream), or only a `retry:`.
enum Outcome {
    Waiting(String, Box<SseConn>),
    Retry(u64),
}

impl Outcome {
    fn is_retry(&self) -> bool {
        matches!(self, Outcome::Retry(_))
    }
}

/// Opens a stream the way `EventSource` does and reads until a `waiting` event or the end.
async fn open(client: &SseClient, queue: &str, ticket: Option<&str>) -> anyhow::Result<Outcome> {
    let mut conn = client
        .open(&format!("/api/queues/{queue}/stream"), ticket)
        .await?;
    anyhow::ensure!(
        conn.status == 200,
        "stream answered {}: {:?}",
        conn.status,
        conn.error_body
    );
    let mut retry = None;
    loop {
        match conn.next_item(T).await? {
            Some(SseItem::Event(e)) if e.event == "waiting" => {
                return Ok(Outcome::Waiting(e.id, Box::new(conn)))
            }
            Some(SseItem::Event(e)) => anyhow::bail!("unexpected {} event: {}", e.event, e.data),
            Some(SseItem::Retry(ms)) => retry = Some(ms),
            Some(SseItem::Comment(_)) => {}
            None => return retry.map(Outcome::Retry).context("ended without retry:"),
        }
    }
}

fn client(stack: &Stack, from: u8, headers: HeaderMap) -> anyhow::Result<SseClient> {
    SseClient::from_address(stack.gateway_url(0), loopback(from), headers)
}

/// A stack whose one gateway has the per-IP limits `set` applies.
async fn stack_with(set: impl FnOnce(&mut usher_gateway::Config)) -> anyhow::Result<Stack> {
    let mut stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    set(&mut cfg);
    stack.gateways.push(stack::gateway_with(cfg).await?);
    stack.create_queue("q", PAUSED).await?;
    Ok(stack)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_take_more_joins_than_its_bucket_while_another_joins(
) -> anyhow::Result<()> {
    let stack = stack_with(|c| {
        c.ip_join_rate = 1;
        c.ip_join_burst = 5;
    })
    .await?;
    let abuser = client(&stack, 2, HeaderMap::new())?;
    let mut held = Vec::new();
    for i in 0..5 {
        match open(&abuser, "q", None).await? {
            Outcome::Waiting(t, c) => held.push((t, c)),
            Outcome::Retry(_) => anyhow::bail!("join {i} of the burst was refused"),
        }
    }
    // The bucket is empty: a burst of joins gets only retry: (jittered around the configured
    // delay, so EventSource tries again later), and takes no place.
    let before = stack.waiting("q").await?;
    let mut refused = 0;
    for _ in 0..20 {
        if let Outcome::Retry(ms) = open(&abuser, "q", None).await? {
            assert!(ms > 0);
            refused += 1;
        }
    }
    // The bucket refills at one join per second: a slow test machine lets a few through.
    assert!(
        refused >= 15,
        "only {refused} of 20 joins over the bucket were refused"
    );
    assert!(stack.waiting("q").await? <= before + 20 - refused);
    // A resume draws nothing from the bucket: the abuser's own places come back.
    let (ticket, conn) = held.pop().context("a held place")?;
    drop(conn);
    assert!(
        !open(&abuser, "q", Some(&ticket)).await?.is_retry(),
        "a resume was refused"
    );
    // Another address joins as if nothing happened.
    let browser = client(&stack, 3, HeaderMap::new())?;
    assert!(
        !open(&browser, "q", None).await?.is_retry(),
        "another address was refused"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_hold_more_places_or_streams_than_its_limits() -> anyhow::Result<()> {
    let stack = stack_with(|c| {
        c.ip_max_places = 3;
        c.ip_max_streams = 4;
    })
    .await?;
    let abuser = client(&stack, 4, HeaderMap::new())?;
    let mut tickets = Vec::new();
    let mut conns = Vec::new();
    for _ in 0..3 {
        let Outcome::Waiting(t, c) = open(&abuser, "q", None).await? else {
            anyhow::bail!("a join under the place limit was refused");
        };
        tickets.push(t);
        conns.push(c);
    }
    assert!(
        open(&abuser, "q", None).await?.is_retry(),
        "a 4th place was taken"
    );
    // Disconnected places kept alive by resuming still count. Wait until the gateway has
    // marked all three away: it gives back a stream's slot as it marks the place.
    conns.clear();
    eventually(
        "the three disconnected places to be marked away",
        async || {
            let away = stack.queue("q").await?["away"].clone();
            anyhow::ensure!(away == 3, "{away} away");
            Ok(())
        },
    )
    .await?;
    assert!(
        open(&abuser, "q", None).await?.is_retry(),
        "a place was taken after disconnects"
    );
    let mut resumed = Vec::new();
    for t in &tickets {
        let Outcome::Waiting(_, c) = open(&abuser, "q", Some(t)).await? else {
            anyhow::bail!("resuming an own place was refused");
        };
        resumed.push(c);
    }
    // A 4th stream is allowed by the stream cap (4) but not a 4th place; a 5th stream is not
    // allowed at all.
    assert!(open(&abuser, "q", None).await?.is_retry());
    assert_eq!(stack.waiting("q").await?, 3);
    // Another address takes places and streams normally meanwhile.
    let browser = client(&stack, 5, HeaderMap::new())?;
    let mut others = Vec::new();
    for _ in 0..3 {
        let Outcome::Waiting(_, c) = open(&browser, "q", None).await? else {
            anyhow::bail!("another address was refused");
        };
        others.push(c);
    }
    assert_eq!(stack.waiting("q").await?, 6);
    Ok(())
}

/// Joins sent at once from one address all reach the gateway before any holds its place:
/// each counts from the moment it is let through, so the cap holds (a security review took
/// 20 places under a cap of 2 this way), and so does it for resumes of places sent at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_sent_at_once_take_no_more_places_than_the_cap() -> anyhow::Result<()> {
    let stack = stack_with(|c| {
        c.ip_max_places = 2;
        c.ip_join_burst = 50;
    })
    .await?;
    let abuser = client(&stack, 6, HeaderMap::new())?;
    let outcomes = futures::future::join_all((0..12).map(|_| open(&abuser, "q", None))).await;
    let mut held = Vec::new();
    for o in outcomes {
        if let Outcome::Waiting(t, c) = o? {
            held.push((t, c));
        }
    }
    assert_eq!(held.len(), 2, "12 joins at once under a cap of 2");
    assert_eq!(stack.waiting("q").await?, 2);
    // Another address is untouched.
    let browser = client(&stack, 7, HeaderMap::new())?;
    assert!(!open(&browser, "q", None).await?.is_retry());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_cap_counts_open_streams_per_address() -> anyhow::Result<()> {
    let stack = stack_with(|c| c.ip_max_streams = 2).await?;
    let abuser = client(&stack, 6, HeaderMap::new())?;
    let (Outcome::Waiting(_, a), Outcome::Waiting(_, b)) = (
        open(&abuser, "q", None).await?,
        open(&abuser, "q", None).await?,
    ) else {
        anyhow::bail!("streams under the cap were refused");
    };
    assert!(
        open(&abuser, "q", None).await?.is_retry(),
        "a 3rd stream was held"
    );
    let browser = client(&stack, 7, HeaderMap::new())?;
    assert!(!open(&browser, "q", None).await?.is_retry());
    // A stream that ends gives its slot back.
    drop(a);
    eventually("the slot of a closed stream to be given back", async || {
        anyhow::ensure!(!open(&abuser, "q", None).await?.is_retry(), "told to retry");
        Ok(())
    })
    .await?;
    drop(b);
    Ok(())
}

fn forwarded(value: &str) -> anyhow::Result<HeaderMap> {
    let mut h = HeaderMap::new();
    h.insert("x-forwarded-for", HeaderValue::from_str(value)?);
    Ok(h)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_is_the_entry_trusted_hops_from_the_right_never_the_left_most(
) -> anyhow::Result<()> {
    // Behind one trusted proxy (all requests come from 127.0.0.8, the proxy), which appends
    // the address it saw; the client wrote anything it liked further left.
    let stack = stack_with(|c| {
        c.trusted_proxy_hops = 1;
        c.ip_max_streams = 1;
    })
    .await?;
    let first = client(&stack, 8, forwarded("6.6.6.6, 203.0.113.1")?)?;
    let Outcome::Waiting(_, _held) = open(&first, "q", None).await? else {
        anyhow::bail!("the first client was refused");
    };
    // Same spoofed left-most entry, another real client: not the same address.
    let other = client(&stack, 8, forwarded("6.6.6.6, 203.0.113.2")?)?;
    assert!(
        !open(&other, "q", None).await?.is_retry(),
        "the left-most entry was used"
    );
    // The first client again, with another spoofed entry: still the same address, capped.
    let again = client(&stack, 8, forwarded("7.7.7.7, 203.0.113.1")?)?;
    assert!(
        open(&again, "q", None).await?.is_retry(),
        "a spoofed entry escaped the cap"
    );
    // Two header lines are one list; an IPv4-mapped address is that IPv4 address.
    let mut split = forwarded("8.8.8.8")?;
    split.append(
        "x-forwarded-for",
        HeaderValue::from_static("::ffff:203.0.113.1"),
    );
    let split = client(&stack, 8, split)?;
    assert!(
        open(&split, "q", None).await?.is_retry(),
        "the last header line was not used"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_v1_and_v2_name_the_client() -> anyhow::Result<()> {
    let stack = stack_with(|c| {
        c.proxy_protocol = true;
        c.ip_max_streams = 1;
        c.header_timeout_secs = 2;
    })
    .await?;
    let addr = stack.gateways[0].addr;
    let get = b"GET /api/queues/q/stream HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n";
    let v1 = |src: &str| format!("PROXY TCP4 {src} 10.0.0.1 40000 80\r\n").into_bytes();
    let v2 = |src: &str| -> anyhow::Result<Vec<u8>> {
        let from: SocketAddr = format!("{src}:40000").parse()?;
        let to: SocketAddr = "10.0.0.1:80".parse()?;
        Ok(ppp::v2::Builder::with_addresses(
            ppp::v2::Version::Two | ppp::v2::Command::Proxy,
            ppp::v2::Protocol::Stream,
            (from, to),
        )
        .build()?)
    };
    let stream = |header: Vec<u8>| {
        let mut req = header;
        req.extend_from_slice(get);
        req
    };
    // v1 for 192.0.2.10: a place.
    let mut a = raw::send(None, addr, &stream(v1("192.0.2.10"))).await?;
    let r = raw::read_response(&mut a, Some(b"event: waiting"), T).await?;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("event: waiting"), "{}", r.text());
    // v2 naming the same client: over its stream cap (1), so the header was read.
    let mut b = raw::send(None, addr, &stream(v2("192.0.2.10")?)).await?;
    let r = raw::read_response(&mut b, None, T).await?;
    assert_eq!(r.status, 200);
    assert!(!r.text().contains("event: waiting"), "{}", r.text());
    assert!(r.text().contains("retry:"), "{}", r.text());
    // v2 naming another client: a place.
    let mut c = raw::send(None, addr, &stream(v2("192.0.2.11")?)).await?;
    let r = raw::read_response(&mut c, Some(b"event: waiting"), T).await?;
    assert!(r.text().contains("event: waiting"), "{}", r.text());
    // A v2 LOCAL header (the balancer's own health check) and a request.
    let local = ppp::v2::Builder::new(
        ppp::v2::Version::Two | ppp::v2::Command::Local,
        ppp::v2::AddressFamily::Unspecified | ppp::v2::Protocol::Unspecified,
    )
    .build()?;
    let mut h = raw::send(
        None,
        addr,
        &[local, b"GET /readyz HTTP/1.1\r\n\r\n".to_vec()].concat(),
    )
    .await?;
    assert_eq!(raw::read_response(&mut h, None, T).await?.status, 200);
    // No header, a garbled one, or one that never completes: closed without an answer.
    for bad in [&get[..], b"PROXY TCP9 nonsense\r\n", b"PROXY TCP4 192.0"] {
        let mut s = raw::send(None, addr, bad).await?;
        let mut buf = Vec::new();
        let read = within(
            "the server to close",
            T,
            tokio::io::AsyncReadExt::read_to_end(&mut s, &mut buf),
        )
        .await;
        assert!(
            matches!(read, Ok(Ok(0)) | Ok(Err(_))),
            "{:?}: {read:?} {:?}",
            String::from_utf8_lossy(bad),
            String::from_utf8_lossy(&buf)
        );
    }
    Ok(())
}
