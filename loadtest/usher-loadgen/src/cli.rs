//! Command line (every flag is also an `USHER_LOADGEN_*` environment variable).

use std::path::PathBuf;

use clap::Parser;

const ABOUT: &str = "Puts real SSE load on usher gateways: many browser-like waiting-room clients";

const LONG_ABOUT: &str = "\
Puts real SSE load on usher gateways: many browser-like waiting-room clients.

Every connection behaves like a browser's EventSource: it opens
`GET /api/queues/{queue}/stream` over plain HTTP/1.1, reads the event stream,
waits the last `retry:` and reconnects with `Last-Event-ID` (to the next gateway,
as a load balancer would) when the stream ends or fails, gives up on a non-200
answer, and closes on `admitted` or `closed`.

The coordinator (this process) starts --workers copies of itself; each worker
holds its share of the connections and reports progress once per second over
its stdout. The coordinator merges them, prints a progress line on stderr every
second, a summary table on stdout at the end, and optionally writes a JSON
report and an SVG plot.

Measured: join latency (request start -> first `waiting` event), position-update
delay (receipt of each later `waiting` event - its `as_of_ms`), admission latency
(receipt of `admitted` - its `admitted_at`), FIFO violations (a place admitted
strictly later than a higher place), duplicate admissions (a token or a place
admitted twice), missing admissions (with --until-admitted), errors by kind and
reconnects. Also CPU stalls: one probe thread per CPU, pinned to it, records
the windows of 20 ms or more in which that CPU ran nothing at all (on a virtual
machine, the host stopping a vCPU); latency measured during one is the
machine's, not the servers'.

Only loopback gateways (127.0.0.0/8, ::1, localhost) are accepted unless
--allow-remote is given (a staging load balancer, say). Targets are plain
http:// only: put the load on the plain-HTTP side of the load balancer, or on
the gateways directly; https:// is not supported. To go past one machine's
ports and cores, run it on several machines at once (loadtest/README.md).

Exit status: 0 on success; 1 on a usage or runtime error; 3 when a duplicate
admission or a FIFO violation was seen; 4 when --until-admitted was given and
some connection was never admitted.";

#[derive(Debug, Clone, Parser)]
#[command(name = "usher-loadgen", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Args {
    /// Gateway base URLs, comma-separated (`http://host:port`). New connections are spread
    /// over them round-robin; a reconnect goes to the next one. Loopback addresses only,
    /// unless --allow-remote.
    #[arg(
        long,
        env = "USHER_LOADGEN_GATEWAYS",
        value_delimiter = ',',
        default_value = "http://127.0.0.1:8080,http://127.0.0.1:8090"
    )]
    pub gateways: Vec<String>,

    /// Queue to join (it must exist and be open; create it on the dispatcher with
    /// `PUT /admin/queues/{queue}`).
    #[arg(long, env = "USHER_LOADGEN_QUEUE", default_value = "demo")]
    pub queue: String,

    /// Total number of connections (browsers), over all workers.
    #[arg(long, env = "USHER_LOADGEN_CONNECTIONS", default_value_t = 1000)]
    pub connections: u64,

    /// New connections per second, in total over all workers; 0 opens them as fast as
    /// possible.
    #[arg(long, env = "USHER_LOADGEN_JOIN_RATE", default_value_t = 500.0)]
    pub join_rate: f64,

    /// Join times from an arrival curve instead: a CSV of `second,joins` lines (the format
    /// usher-size and usher-rehearse read; seconds increasing, a `second,joins` header, blank
    /// lines and `#` comments allowed). Each second's joins start evenly spread over it, and
    /// the connections are the curve's total (--connections and --join-rate are not used).
    #[arg(long, env = "USHER_LOADGEN_ARRIVALS", value_name = "CSV")]
    pub arrivals: Option<PathBuf>,

    /// Share of the browsers still waiting that leave in each minute of waiting, 0 to 1: each
    /// connection's patience is drawn from --seed and its index; one that runs out while it
    /// waits leaves the line (`DELETE /api/queues/{queue}/tickets/{ticket}`) and closes. 0:
    /// nobody leaves.
    #[arg(
        long,
        env = "USHER_LOADGEN_LEAVE_PER_MINUTE",
        value_name = "SHARE",
        default_value_t = 0.0
    )]
    pub leave_per_minute: f64,

    /// Seed of the connections' patience (--leave-per-minute): the same seed, the same leaves.
    #[arg(long, env = "USHER_LOADGEN_SEED", default_value_t = 1)]
    pub seed: u64,

    /// Worker processes. Each process holds at most ~19,000 connections (the machine's hard
    /// open-files limit is 20,000), so use at least connections / 19,000.
    #[arg(long, env = "USHER_LOADGEN_WORKERS", default_value_t = 1)]
    pub workers: u32,

    /// Source addresses for the client sockets: a range (`127.0.0.2-127.0.0.40`), a comma
    /// list, or both (`127.0.0.2-127.0.0.9,127.0.0.20`). Each socket binds to the next one
    /// (port 0), so every address brings its own ~28k ephemeral ports. Loopback only, unless
    /// --allow-remote (then any address of this machine). Unset: the OS picks.
    #[arg(long, env = "USHER_LOADGEN_SOURCE_IPS")]
    pub source_ips: Option<String>,

    /// Allow gateways that are not on this machine: any IP address or host name (resolved
    /// once at the start; `Host` keeps the name). Without it only loopback targets are
    /// accepted, so a typo never loads a machine nobody meant to load. Point it at staging,
    /// never at production during a sale.
    #[arg(long, env = "USHER_LOADGEN_ALLOW_REMOTE")]
    pub allow_remote: bool,

    /// Hard stop in seconds: the run ends by itself after this long (counted from the first
    /// connection), whatever state the connections are in.
    #[arg(long, env = "USHER_LOADGEN_DURATION", default_value_t = 60)]
    pub duration: u64,

    /// Stop as soon as every connection has been admitted (or has finished otherwise), at
    /// the latest after --duration; connections never admitted are reported as missing.
    /// Without it the run lasts --duration (or until every connection has finished).
    #[arg(long, env = "USHER_LOADGEN_UNTIL_ADMITTED")]
    pub until_admitted: bool,

    /// Write the JSON report (every number, the command line, the start time and a
    /// per-second timeline) to this file.
    #[arg(long, env = "USHER_LOADGEN_REPORT")]
    pub report: Option<PathBuf>,

    /// Write an SVG plot (connections over time, latency distributions) to this file.
    #[arg(long, env = "USHER_LOADGEN_PLOT")]
    pub plot: Option<PathBuf>,

    /// No progress lines on stderr (the summary is still printed on stdout).
    #[arg(long, env = "USHER_LOADGEN_QUIET")]
    pub quiet: bool,

    /// Seconds to wait for a TCP connection and the response head before counting a
    /// `connect_timeout` error and retrying.
    #[arg(long, env = "USHER_LOADGEN_CONNECT_TIMEOUT", default_value_t = 10)]
    pub connect_timeout: u64,

    /// Seconds without a single byte on an open stream before counting an `idle_timeout` error
    /// and reconnecting. A gateway leaves no stream silent longer than its keepalive period
    /// (`USHER_KEEPALIVE_SECS`, 15 s by default), so the default of 60 s allows for a slow
    /// machine, not for a missing keepalive.
    #[arg(long, env = "USHER_LOADGEN_IDLE_TIMEOUT", default_value_t = 60)]
    pub idle_timeout: u64,

    /// Reconnection delay used until the server sends `retry:` (browsers use about 3 s).
    #[arg(long, env = "USHER_LOADGEN_DEFAULT_RETRY_MS", default_value_t = 3000)]
    pub default_retry_ms: u64,

    /// Milliseconds a connection stays open, idle, after its stream ended (admitted or
    /// closed) before the load generator closes it: each one lingers a spread-out 50–150% of
    /// this, like a browser's pool of idle connections (0 closes at once). Without it, the
    /// load generator's own teardown of thousands of connections lands on this machine's
    /// cores in the same milliseconds as the admissions it measures.
    #[arg(long, env = "USHER_LOADGEN_LINGER_MS", default_value_t = 5000)]
    pub linger_ms: u64,

    /// Internal: run as worker number N (set by the coordinator).
    #[arg(long, hide = true)]
    pub worker_index: Option<u32>,

    /// Internal: number of workers in the run (set by the coordinator).
    #[arg(long, hide = true)]
    pub worker_count: Option<u32>,

    /// Internal: the run's start (ms since the epoch) shared by all workers.
    #[arg(long, hide = true)]
    pub epoch_ms: Option<u64>,
}
