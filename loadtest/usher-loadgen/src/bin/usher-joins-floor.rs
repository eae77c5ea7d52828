//! `usher-joins-floor`: this machine's floor for joins. See `usher-joins-floor --help`.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{ensure, Context};
use clap::Parser;
use usher_core::store::Store;
use usher_loadgen::joins_floor::{self, Before, FloorSettings};

/// The same allocator as the gateway and the load generator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const ABOUT: &str = "A stand-in for a gateway that answers every stream with one fixed `waiting` \
                     event: this machine's floor for joins";

const LONG_ABOUT: &str = "\
A stand-in for a gateway that answers every stream with one fixed `waiting`
event: this machine's floor for joins.

It serves `GET /api/queues/{queue}/stream` as a gateway does on the wire (200,
`text/event-stream`, chunked; `retry:` and a `waiting` event with the gateway's
fields and a ticket-shaped id, head and event in one write), then holds the
stream open until the client hangs up, with a `: keepalive` comment every
--keepalive-secs. No Redis, no queue, no tickets: every stream gets the same
place. `/healthz` and `/readyz` answer 200; anything else 404.

It runs on the gateway's runtime setup (`--worker-threads`, the same listener
with its accept backlog and TCP_NODELAY), so usher-loadgen driven against it at
a given rate measures what joins cost this machine without usher's logic: the
kernel's accept, receive and send, the runtime's wake-ups, and the load
generator itself. A gateway's join latency at the same rate, divided by this,
is usher's share.

With --redis, every stream is answered only after one `PING` to that Redis (a
shared connection that pipelines the stand-in's round trips): the round-trip
floor, a lower bound on what a join costs that keeps its place in Redis
before answering (a `PING` writes nothing, and the stand-in never waits for a
call under way). A gateway's join latency over this one is what usher adds on top of the round
trip. It will not start while that Redis cannot be reached; a stream whose
`PING` fails is closed unanswered.

With --join, every stream is answered only after usher's own join takes a
place for it in that Redis, in the queue its path names (the join script
through usher-core's store, one place a call, the calls pipelined on one
connection, for gateway index 0, which no gateway is ever given): the
join floor, what the gateway's Redis work costs with none of its logic (no
batching of joins into one call, no tickets, hub or limits). The queue must
exist and be open (create it paused, so that nobody is admitted); a stream
whose join fails or takes no place (the queue closed or unknown) is closed
unanswered. It will not start while that Redis cannot be reached.

With --burn-us, every stream is answered only after the stand-in has spent
that much CPU on it, spinning on its own thread (after the Redis wait, if
any): the CPU floor. Given the CPU a gateway spends per join beyond a plain
stand-in's, it costs the machine what the gateways' share of usher's joins
costs it (not Redis's), with none of usher's waits: a gateway's join latency
over this one is what usher adds beyond its gateways' CPU.

Prints `listening on http://ADDR` on stdout once it accepts connections; runs
until SIGINT or SIGTERM. Loopback addresses only.";

#[derive(Debug, Parser)]
#[command(name = "usher-joins-floor", version, about = ABOUT, long_about = LONG_ABOUT)]
struct Args {
    /// Address to listen on (loopback only; port 0 picks a free port).
    #[arg(
        long,
        env = "USHER_JOINS_FLOOR_LISTEN",
        default_value = "127.0.0.1:8300"
    )]
    listen: SocketAddr,

    /// Runtime worker threads (0 = one per core), as the gateway's `--worker-threads`.
    #[arg(long, env = "USHER_JOINS_FLOOR_WORKER_THREADS", default_value_t = 1)]
    worker_threads: usize,

    /// The `retry:` sent before the event, in ms (the gateway's default).
    #[arg(long, env = "USHER_JOINS_FLOOR_RETRY_MS", default_value_t = 3000)]
    retry_ms: u64,

    /// Seconds between keepalive comments on a held stream (the gateway's default period;
    /// 0: none).
    #[arg(long, env = "USHER_JOINS_FLOOR_KEEPALIVE_SECS", default_value_t = 15)]
    keepalive_secs: u64,

    /// A Redis URL: every stream then waits for one `PING` round trip to it (one shared,
    /// pipelining connection) before it is answered, a lower bound on what a join that keeps
    /// its place in Redis costs. Unset: no Redis.
    #[arg(long, env = "USHER_JOINS_FLOOR_REDIS", conflicts_with = "join")]
    redis: Option<String>,

    /// A Redis URL: every stream then waits for usher's own join to take a place for it in
    /// the queue its path names, in that Redis (one place a call, one pipelining
    /// connection), before it is answered. The queue must exist and be open.
    #[arg(long, env = "USHER_JOINS_FLOOR_JOIN")]
    join: Option<String>,

    /// Microseconds of CPU spent on every stream before it is answered (a spin on the
    /// stand-in's thread, by the thread's own CPU clock); 0: none.
    #[arg(long, env = "USHER_JOINS_FLOOR_BURN_US", default_value_t = 0)]
    burn_us: u64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    ensure!(
        args.listen.ip().is_loopback(),
        "--listen {} is not a loopback address",
        args.listen
    );
    usher_runtime::disable_transparent_huge_pages();
    let rt = usher_runtime::runtime(args.worker_threads).context("cannot start the runtime")?;
    rt.block_on(async {
        let before = match (&args.redis, &args.join) {
            (Some(url), _) => Before::Ping(
                redis::Client::open(url.as_str())
                    .with_context(|| format!("bad --redis {url}"))?
                    // No response timeout: a slow round trip is what the floor measures, and
                    // with redis-rs's default (500 ms) the slowest would be closed unanswered
                    // and drop out of the figures.
                    .get_multiplexed_async_connection_with_config(
                        &redis::AsyncConnectionConfig::new().set_response_timeout(None),
                    )
                    .await
                    .with_context(|| format!("cannot reach Redis at {url}"))?,
            ),
            // The gateway's own store, with its response timeout: a join slower than that
            // fails on a gateway too.
            (None, Some(url)) => Before::Join(
                Store::connect(url)
                    .await
                    .with_context(|| format!("cannot reach Redis at {url}"))?,
            ),
            (None, None) => Before::Nothing,
        };
        let settings = FloorSettings {
            retry_ms: args.retry_ms,
            keepalive: (args.keepalive_secs > 0).then(|| Duration::from_secs(args.keepalive_secs)),
            before,
            burn: (args.burn_us > 0).then(|| Duration::from_micros(args.burn_us)),
        };
        let listener = usher_http::listen(args.listen)
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let addr = listener.local_addr()?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on http://{addr}")?;
        out.flush()?;
        drop(out);
        joins_floor::serve(listener, settings, usher_runtime::shutdown_signal()).await;
        anyhow::Ok(())
    })?;
    // Held streams end here, with the runtime.
    drop(rt);
    Ok(())
}
