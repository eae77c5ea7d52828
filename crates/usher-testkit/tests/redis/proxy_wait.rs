//! Behind `USHER_PROXY_PROTOCOL=1`, a socket still waiting for its PROXY protocol header holds
//! nothing a browser waits on: when sockets run short it gives way like a slow request head
//! (issue 23), so a flood of connections that never send the header cannot keep browsers out.
//! The sockets are not counted per peer address while they wait: the peer is the load
//! balancer, which may open connections before its client sends anything.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use usher_testkit::line::{PAUSED, T};
use usher_testkit::raw;
use usher_testkit::stack::{self, Stack, StackOptions};
use usher_testkit::wait::eventually;

/// A stream request for `q`, behind a PROXY v1 header naming `client`.
fn proxied_stream(client: &str) -> Vec<u8> {
    format!(
        "PROXY TCP4 {client} 10.0.0.1 40000 80\r\n\
         GET /api/queues/q/stream HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n"
    )
    .into_bytes()
}

/// Connections that never finish their PROXY header (half send nothing, half part of one)
/// fill the gateway's sockets; a browser's connection, header and all, still gets its place,
/// and the stream already open stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sockets_waiting_for_a_proxy_header_are_shed_before_streams() -> anyhow::Result<()> {
    let mut stack = Stack::start(StackOptions {
        gateways: 0,
        ..Default::default()
    })
    .await?;
    let mut cfg = usher_testkit::config::gateway(&stack.redis.url());
    cfg.proxy_protocol = true;
    cfg.max_sockets = 12;
    cfg.health_reserve_sockets = 2;
    // No socket below is closed by its deadline: only shedding frees one.
    cfg.header_timeout_secs = 300;
    stack.gateways.push(stack::gateway_with(cfg).await?);
    stack.create_queue("q", PAUSED).await?;
    let addr = stack.gateways[0].addr;

    let mut open = raw::send(None, addr, &proxied_stream("192.0.2.1")).await?;
    let r = raw::read_response(&mut open, Some(b"event: waiting"), T).await?;
    assert!(r.text().contains("event: waiting"), "{}", r.text());

    let mut waiting_for_header = Vec::new();
    for i in 0..12 {
        let Ok(mut s) = raw::connect_from(None, addr).await else {
            continue;
        };
        if i % 2 == 1 {
            let _ = s.write_all(b"PROXY TCP4 192.0").await;
        }
        waiting_for_header.push(s);
    }
    // The browser's first tries may land in the reserve or past the cap (answered `retry:`
    // or closed, as `EventSource` would retry); each one tells the old waits to give way.
    eventually(
        "a browser gets a place past the connections without a header",
        async || {
            let Ok(mut s) = raw::send(None, addr, &proxied_stream("192.0.2.2")).await else {
                return false;
            };
            raw::read_response(&mut s, Some(b"event: waiting"), Duration::from_secs(2))
                .await
                .is_ok_and(|r| r.text().contains("event: waiting"))
        },
    )
    .await?;
    assert_eq!(stack.waiting("q").await?, 2);
    // The stream already open was not shed.
    assert!(
        !raw::closed_within(&mut open, Duration::from_millis(200)).await,
        "the open stream was closed"
    );
    drop(waiting_for_header);
    Ok(())
}
