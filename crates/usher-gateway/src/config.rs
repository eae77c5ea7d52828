//! Gateway configuration: every flag is also a `USHER_*` environment variable.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use usher_core::ids::ServerId;
use usher_runtime::LogFormat;

/// usher SSE gateway — holds browsers in line and tells them when it is their turn.
///
/// Browsers open `GET /api/queues/{queue}/stream` with a plain `EventSource`. The gateway
/// takes a place in the queue's line (or resumes the place named by `Last-Event-ID` / `?ticket=`),
/// pushes `waiting` events as the line moves and an `admitted` event with the entry token when
/// the dispatcher admits the place. It reads only its own Redis Stream, with a consumer group.
/// Run as many gateways as you need behind a load balancer; they share nothing but Redis.
#[derive(Debug, Clone, Parser)]
#[command(name = "usher-gateway", version, about, long_about)]
pub struct Config {
    /// Address the HTTP server listens on.
    #[arg(long, env = "USHER_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,

    /// Redis URL (`redis://[user:password@]host:port[/db]`).
    #[arg(
        long,
        env = "USHER_REDIS_URL",
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,

    /// This gateway's identity: names its Redis Stream and its consumer. 1–128 characters of
    /// letters, digits, `.`, `-`, `_`. Defaults to a random id unique to this process.
    #[arg(long, env = "USHER_SERVER_ID")]
    pub server_id: Option<ServerId>,

    /// Key (at least 32 bytes of text) that signs tickets; every gateway must share it. When
    /// unset, a development key is generated, shared with the other gateways through Redis, and
    /// a warning is logged.
    #[arg(long, env = "USHER_TICKET_KEY", hide_env_values = true)]
    pub ticket_key: Option<String>,

    /// Keepalive period in seconds: a stream silent for half of it gets a `: keepalive` comment
    /// once per period (keeps proxies from closing idle streams; none stays silent longer than
    /// 1.5 periods). Comments are spread over the period, not sent to every stream at once.
    #[arg(long, env = "USHER_KEEPALIVE_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=300))]
    pub keepalive_secs: u64,

    /// Reconnection delay (ms) sent to browsers in the `retry:` field.
    #[arg(long, env = "USHER_RETRY_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub retry_ms: u64,

    /// Milliseconds between heartbeats to the gateway registry. The registry entry lapses
    /// after five missed heartbeats; the stream after thirty.
    #[arg(long, env = "USHER_HEARTBEAT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub heartbeat_ms: u64,

    /// Most browsers held at once. Past it, new streams answer `200` with a jittered `retry:`
    /// and end, so the browser tries again (often on another gateway). Keep it below the
    /// process's open-file limit.
    #[arg(long, env = "USHER_MAX_CONNECTIONS", default_value_t = 18_000)]
    pub max_connections: u64,

    /// On SIGTERM: milliseconds between failing `/readyz` (so the load balancer stops sending
    /// new browsers) and starting to end open streams.
    #[arg(long, env = "USHER_DRAIN_DELAY_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(0..=120_000))]
    pub drain_delay_ms: u64,

    /// On SIGTERM: open streams are ended spread over this many seconds, each with a jittered
    /// `retry:`, so browsers reconnect to the other gateways gradually and resume their places.
    /// The process exits at the latest 5 s after the window.
    #[arg(long, env = "USHER_DRAIN_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    pub drain_secs: u64,

    /// Runtime worker threads; 0 = one per core. Use 1 when several usher processes share a
    /// few cores (the scheduler then does no cross-thread wake-ups).
    #[arg(long, env = "USHER_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Log format: `text` or `json`. Filter with `RUST_LOG` (default `info`).
    #[arg(long, env = "USHER_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,
}

impl Config {
    pub fn keepalive(&self) -> Duration {
        Duration::from_secs(self.keepalive_secs)
    }
    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }
    pub fn registry_ttl(&self) -> Duration {
        self.heartbeat() * 5
    }
    pub fn stream_ttl(&self) -> Duration {
        self.heartbeat() * 30
    }

    /// A configuration for tests: ephemeral port, fast heartbeat.
    pub fn for_tests(redis_url: &str) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            redis_url: redis_url.to_owned(),
            server_id: None,
            ticket_key: None,
            keepalive_secs: 15,
            retry_ms: 1000,
            heartbeat_ms: 500,
            max_connections: 18_000,
            drain_delay_ms: 200,
            drain_secs: 1,
            worker_threads: 0,
            log_format: LogFormat::Text,
        }
    }
}
