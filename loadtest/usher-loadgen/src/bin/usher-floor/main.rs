//! `usher-floor`: this machine's floor for pushing one small event to many loopback TCP
//! connections at once, with no application logic. See `usher-floor --help`.
//!
//! The command line and its limits are in [`args`]; [`frames`] is the event written; [`crew`]
//! the threads that write and read it; [`measure`] runs the bursts; [`report`] prints them.

mod args;
mod crew;
mod frames;
mod measure;
mod report;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use clap::Parser;
use tokio::task::JoinSet;
use usher_loadgen::conn::connect;
use usher_loadgen::limits;
use usher_loadgen::plan::{parse_source_ips, Reach};

use crate::args::Args;
use crate::crew::Crew;
use crate::measure::{measure, Missing};
use crate::report::report;

/// The same allocator as the gateway and the load generator.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// How long opening all the connections may take.
const SETUP_DEADLINE: Duration = Duration::from_secs(60);
/// Connections being opened at once.
const CONNECT_CONCURRENCY: usize = 256;

fn main() {
    let args = Args::parse();
    usher_runtime::disable_transparent_huge_pages();
    let code = match run(&args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("usher-floor: error: {e:#}");
            if e.downcast_ref::<Missing>().is_some() {
                2
            } else {
                1
            }
        }
    };
    std::process::exit(code);
}

fn run(a: &Args) -> anyhow::Result<()> {
    a.check()?;
    let n = a.connections;
    let ips = parse_source_ips(&a.source_ips, Reach::Loopback)?;

    let limit = limits::raise_nofile();
    let most = limit.saturating_sub(limits::HEADROOM) / 2;
    ensure!(
        n as u64 <= most,
        "--connections {n} needs {} open files in this process (two per pair, plus {} \
         headroom), but its open-files limit is {limit}: at most {most} pairs",
        2 * n as u64 + limits::HEADROOM,
        limits::HEADROOM
    );
    // Grow the descriptor table now, while this process has one thread.
    limits::reserve_descriptors(2 * n as u64 + 64);

    let setup_start = Instant::now();
    let setup = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the setup runtime")?;
    let (servers, clients) = setup
        .block_on(async {
            tokio::time::timeout(SETUP_DEADLINE, connect_all(n, &ips))
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "opening {n} connections took more than {} s",
                        SETUP_DEADLINE.as_secs()
                    )
                })?
        })
        .context("setting up the connections")?;
    drop(setup);
    let setup_ms = setup_start.elapsed().as_secs_f64() * 1000.0;

    let mut crew = Crew::start(a, servers, clients)?;
    let measured = measure(a, &crew);
    let hists = crew.finish();
    let m = measured?;
    let hists = hists?;
    report(a, setup_ms, ips.len(), &m, &hists);
    Ok(())
}

/// Opens `n` loopback connections (clients bound to `ips` round-robin), accepting them at
/// the same time; returns the server ends and the client ends, detached from this runtime.
async fn connect_all(
    n: usize,
    ips: &[IpAddr],
) -> anyhow::Result<(Vec<std::net::TcpStream>, Vec<std::net::TcpStream>)> {
    let v6 = ips.first().is_some_and(IpAddr::is_ipv6);
    let bind = if v6 {
        SocketAddr::from((Ipv6Addr::LOCALHOST, 0))
    } else {
        SocketAddr::from((Ipv4Addr::LOCALHOST, 0))
    };
    // Sets TCP_NODELAY on the listener; accepted sockets inherit it, as in the gateway.
    let listener = usher_http::listen(bind).with_context(|| format!("cannot listen on {bind}"))?;
    let target = listener.local_addr()?;
    let accept = async {
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let (s, _) = listener.accept().await.context("accept")?;
            s.set_nodelay(true)?;
            out.push(s.into_std()?);
        }
        anyhow::Ok(out)
    };
    let connect = async {
        let mut set = JoinSet::new();
        let mut out = Vec::with_capacity(n);
        for ip in ips.iter().copied().cycle().take(n) {
            if set.len() >= CONNECT_CONCURRENCY {
                if let Some(r) = set.join_next().await {
                    out.push(r??);
                }
            }
            set.spawn(connect_one(target, ip));
        }
        while let Some(r) = set.join_next().await {
            out.push(r??);
        }
        anyhow::Ok(out)
    };
    tokio::try_join!(accept, connect)
}

async fn connect_one(target: SocketAddr, ip: IpAddr) -> anyhow::Result<std::net::TcpStream> {
    let s = connect(target, Some(ip)).await.map_err(|e| {
        anyhow::anyhow!("cannot connect from {ip} to {target}: {} failed", e.kind())
    })?;
    Ok(s.into_std()?)
}
