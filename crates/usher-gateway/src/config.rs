//! Gateway configuration: every flag is also a `USHER_*` environment variable.

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::time::Duration;

use crate::ticket::{TicketKey, TicketKeyError};
use clap::Parser;
use usher_core::ids::ServerId;
use usher_core::store::RedisArgs;
use usher_pow::{ChallengeSecret, ShortSecret};
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

    /// How to reach Redis (URL, standalone or cluster, TLS files).
    #[command(flatten)]
    pub redis: RedisArgs,

    /// This gateway's identity: names its Redis Stream and its consumer. 1–128 characters of
    /// letters, digits, `.`, `-`, `_`. Defaults to a random id unique to this process.
    #[arg(long, env = "USHER_SERVER_ID")]
    pub server_id: Option<ServerId>,

    /// Key (at least 32 bytes of text) that signs tickets; every gateway must share it. When
    /// unset, a development key is generated, shared with the other gateways through Redis, and
    /// a warning is logged.
    #[arg(long, env = "USHER_TICKET_KEY", hide_env_values = true)]
    pub ticket_key: Option<String>,

    /// Keepalive period in seconds: no stream stays silent longer than this; a silent one gets a
    /// `: keepalive` comment once per period (keeps proxies from closing idle streams).
    /// Comments are spread over the period, not sent to every stream at once.
    #[arg(long, env = "USHER_KEEPALIVE_SECS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(KEEPALIVE_SECS))]
    pub keepalive_secs: u64,

    /// Reconnection delay (ms) sent to browsers in the `retry:` field.
    #[arg(long, env = "USHER_RETRY_MS", default_value_t = 3000, value_parser = clap::value_parser!(u64).range(RETRY_MS))]
    pub retry_ms: u64,

    /// Milliseconds between heartbeats to the gateway registry. The registry entry lapses
    /// after five missed heartbeats; the stream after thirty.
    #[arg(long, env = "USHER_HEARTBEAT_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(HEARTBEAT_MS))]
    pub heartbeat_ms: u64,

    /// Most browsers held at once. Past it, new streams answer `200` with a jittered `retry:`
    /// and end, so the browser tries again (often on another gateway). Keep it below the
    /// process's open-file limit: the binary refuses to start with it set above that limit
    /// (taken after raising the soft limit to the hard one), and lowers the default to nine
    /// tenths of `--max-sockets` where the default is above that.
    #[arg(long, env = "USHER_MAX_CONNECTIONS", default_value_t = 18_000)]
    pub max_connections: u64,

    /// On SIGTERM: milliseconds between failing `/readyz` (so the load balancer stops sending
    /// new browsers) and starting to end open streams.
    #[arg(long, env = "USHER_DRAIN_DELAY_MS", default_value_t = 2000, value_parser = clap::value_parser!(u64).range(DRAIN_DELAY_MS))]
    pub drain_delay_ms: u64,

    /// On SIGTERM: open streams are ended spread over this many seconds, each with a jittered
    /// `retry:`, so browsers reconnect to the other gateways gradually and resume their places.
    /// The process exits at the latest 5 s after the window.
    #[arg(long, env = "USHER_DRAIN_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(DRAIN_SECS))]
    pub drain_secs: u64,

    /// Runtime worker threads; 0 = one per core. Use 1 when several usher processes share a
    /// few cores (the scheduler then does no cross-thread wake-ups).
    #[arg(long, env = "USHER_WORKER_THREADS", default_value_t = 0)]
    pub worker_threads: usize,

    /// Trusted proxies in front of the gateway that append the address they saw to
    /// `X-Forwarded-For` (ingress-nginx, an ALB, nginx: 1 each). The client is the entry this
    /// many from the right; entries further left are written by the client and never believed.
    /// `0` (the default): the socket's peer address is the client, and the header is ignored.
    #[arg(long, env = "USHER_TRUSTED_PROXY_HOPS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(TRUSTED_PROXY_HOPS))]
    pub trusted_proxy_hops: u64,

    /// Every connection starts with a PROXY protocol v1 or v2 header (an AWS NLB with proxy
    /// protocol on, HAProxy `send-proxy`): the client is the address it names. A connection
    /// without a valid header within the head timeout is closed, so set this only when the
    /// load balancer always sends one. `1`/`true` or `0`/`false`.
    #[arg(long, env = "USHER_PROXY_PROTOCOL", default_value = "false", action = clap::ArgAction::Set, value_parser = clap::builder::BoolishValueParser::new())]
    pub proxy_protocol: bool,

    /// Joins (streams without a ticket: each takes a new place) per second one client address
    /// may make, on average; `0` turns the limit off. Resumes draw nothing. Over it, the stream
    /// answers `200` with a jittered `retry:`. An IPv6 address counts as its prefix (`--ipv6-prefix`).
    #[arg(long, env = "USHER_IP_JOIN_RATE", default_value_t = 5)]
    pub ip_join_rate: u32,

    /// Joins one client address may make at once before the rate applies (the token bucket's
    /// size); `0` turns the join limit off. The default lets a carrier-grade NAT put a crowd
    /// in line at a sale's opening.
    #[arg(long, env = "USHER_IP_JOIN_BURST", default_value_t = 100)]
    pub ip_join_burst: u32,

    /// Status polls and leaves (`GET /api/queues/{queue}/status`,
    /// `DELETE /api/queues/{queue}/tickets/{ticket}`) per second one client address may send,
    /// on average; `0` turns the limit off. Over it they answer `429` with `Retry-After`,
    /// before the ticket or a proof is looked at. On a queue with `bind: "browser_key"` each
    /// one that is served keeps its proof's id in Redis for 130 s, and a stream resume there
    /// draws from this bucket too (after its proof's key is checked): this rate times 130,
    /// plus the burst, bounds the proofs one address keeps there through this gateway. The page
    /// uses the stream, not these routes: the default leaves room for about 100 clients
    /// behind one address that poll every 5 s. An IPv6 address counts as its prefix
    /// (`--ipv6-prefix`). Invitations posted for a join code
    /// (`POST /api/queues/{queue}/invitation`) draw from this bucket too.
    #[arg(long, env = "USHER_IP_POLL_RATE", default_value_t = 20)]
    pub ip_poll_rate: u32,

    /// Status polls and leaves one client address may send at once before the rate applies
    /// (the token bucket's size); `0` turns the limit off.
    #[arg(long, env = "USHER_IP_POLL_BURST", default_value_t = 200)]
    pub ip_poll_burst: u32,

    /// Streams one client address may hold open on this gateway; `0` turns the limit off.
    #[arg(long, env = "USHER_IP_MAX_STREAMS", default_value_t = 1000)]
    pub ip_max_streams: u32,

    /// Places one client address may hold through this gateway, connected or kept alive by
    /// resuming (a place counts until admitted or closed, or for the queue's grace period
    /// after its last stream here ended, as long as Redis keeps it in line); `0` turns the
    /// limit off. Past it, joins and resumes of other places answer a jittered `retry:`.
    #[arg(long, env = "USHER_IP_MAX_PLACES", default_value_t = 1000)]
    pub ip_max_places: u32,

    /// Sockets one client address may hold open on this gateway at once, streams and other
    /// requests together; `0` turns the limit off. Past it a new connection from that address
    /// is closed at once. Counted on the socket's peer, or on the address a PROXY protocol
    /// header names; off behind `--trusted-proxy-hops` (the proxy holds the client's sockets:
    /// cap them there). The default leaves room for `--ip-max-streams` browsers behind one
    /// carrier-grade NAT address, each with a page load or a status call under way.
    #[arg(long, env = "USHER_IP_MAX_SOCKETS", default_value_t = 1200)]
    pub ip_max_sockets: u32,

    /// Bits of an IPv6 address that name one client for the per-IP limits: a subscriber
    /// holds a whole prefix (commonly a /56; a /48 for some, a /64 for others) and can use any
    /// address in it. 56 counts a /48 as 256 clients; 48 is stricter, 64 looser.
    #[arg(long, env = "USHER_IPV6_PREFIX", default_value_t = crate::client::DEFAULT_IPV6_PREFIX, value_parser = clap::value_parser!(u8).range(IPV6_PREFIX))]
    pub ipv6_prefix: u8,

    /// Most client sockets open at once, streams and others. The last
    /// `--health-reserve-sockets` of them serve only `/healthz`, `/readyz` and `/metrics`
    /// (other requests answer `429`, streams a jittered `retry:`); past the cap a new
    /// connection is closed at once. Keep it below the process's open-file limit: the binary
    /// refuses to start with it set above that limit (taken after raising the soft limit),
    /// and lowers the default to fit.
    #[arg(long, env = "USHER_MAX_SOCKETS", default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_sockets: u64,

    /// Sockets at the top of `--max-sockets` kept for health checks and metrics scrapes,
    /// which get a short head timeout there (`2 s`) so slow clients cannot hold them.
    #[arg(long, env = "USHER_HEALTH_RESERVE_SOCKETS", default_value_t = 64)]
    pub health_reserve_sockets: u64,

    /// Seconds a client has to send a whole request head (and a PROXY protocol header),
    /// counted from the connection's start, or from the first byte of a later request on a
    /// keep-alive connection. A slower client is disconnected.
    #[arg(long, env = "USHER_HEADER_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(TIMEOUT_SECS))]
    pub header_timeout_secs: u64,

    /// Accepted so that settings shared with the dispatcher still parse; it bounds nothing on
    /// the gateway, whose routes take no request body (one announced is answered `413` at its
    /// head, before any of it is read).
    #[arg(long, env = "USHER_BODY_TIMEOUT_SECS", default_value_t = 10, value_parser = clap::value_parser!(u64).range(TIMEOUT_SECS))]
    pub body_timeout_secs: u64,

    /// Seconds a keep-alive connection may sit idle between requests before it is closed.
    #[arg(long, env = "USHER_IDLE_TIMEOUT_SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(TIMEOUT_SECS))]
    pub idle_timeout_secs: u64,

    /// Log format: `text` or `json`. Filter with `RUST_LOG` (default `info`).
    #[arg(long, env = "USHER_LOG_FORMAT", default_value = "text")]
    pub log_format: LogFormat,

    /// A template directory that replaces the built-in waiting-room page served at
    /// `GET /q/{queue}`. It holds `index.html` (with the placeholders `{{lang}}`, `{{title}}`,
    /// `{{config}}` and `{{v}}`), `i18n/<lang>.json` (one file of strings per language; `en`
    /// is required) and any assets (`.js`, `.css`, `.svg`, `.png`, `.webp`, `.ico`, `.woff2`),
    /// served at `/q/assets/<name>`. It is read once at startup. The built-in page (the
    /// repository's `crates/usher-gateway/page/`) is the documented example.
    #[arg(long, env = "USHER_PAGE_DIR")]
    pub page_dir: Option<std::path::PathBuf>,

    /// Seconds a gateway keeps the browsers of a queue that Redis lost (restarted empty,
    /// flushed) while waiting for the queue to be configured again (by the dispatcher's
    /// `USHER_QUEUES_FILE`, or an operator): once it is, their places are put back in their
    /// order. Past this window they get `place_lost`.
    #[arg(long, env = "USHER_RESTORE_WINDOW_SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub restore_window_secs: u64,

    /// Key (at least 32 bytes of text) that signs proof-of-work puzzles (queues with
    /// `challenge: "pow"`); every gateway must share it, so a puzzle fetched from one is
    /// accepted by all. When unset, one is generated, shared with the other gateways through
    /// Redis (`usher:challenge-secret`) and written back after a Redis loss.
    #[arg(long, env = "USHER_CHALLENGE_SECRET", hide_env_values = true)]
    pub challenge_secret: Option<String>,

    /// Seconds a proof-of-work puzzle this gateway issues stays good. Long enough for a slow
    /// phone to solve it and join; a solution is good for one place whatever its age. The
    /// expiry is signed into the puzzle, so every gateway holds it to the issuer's expiry and
    /// the settings may differ between gateways.
    #[arg(long, env = "USHER_CHALLENGE_TTL_SECS", default_value_t = 120, value_parser = clap::value_parser!(u64).range(CHALLENGE_TTL_SECS))]
    pub challenge_ttl_secs: u64,
}

// The accepted ranges, shared by the command line (clap rejects a bad flag or variable) and
// [`Config::validate`] (which also checks a `Config` built in code, as tests and embedders do:
// a zero period would panic a timer instead of failing with a message).
const KEEPALIVE_SECS: RangeInclusive<u64> = 1..=300;
const RETRY_MS: RangeInclusive<u64> = 100..=600_000;
const HEARTBEAT_MS: RangeInclusive<u64> = 100..=60_000;
const DRAIN_DELAY_MS: RangeInclusive<u64> = 0..=120_000;
const DRAIN_SECS: RangeInclusive<u64> = 0..=3600;
const TRUSTED_PROXY_HOPS: RangeInclusive<u64> = 0..=16;
const TIMEOUT_SECS: RangeInclusive<u64> = 1..=300;
const IPV6_PREFIX: RangeInclusive<i64> = 16..=128;
const CHALLENGE_TTL_SECS: RangeInclusive<u64> = 1..=usher_pow::MAX_PUZZLE_TTL_SECS;

/// A configuration that cannot work. Each error names the variable and its bad value (a
/// secret's length only).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} = {value} is out of range: it must be {min} to {max}")]
    OutOfRange {
        var: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    #[error("USHER_TICKET_KEY: {0}")]
    TicketKey(#[from] TicketKeyError),
    #[error("USHER_CHALLENGE_SECRET: {0}")]
    ChallengeSecret(#[from] ShortSecret),
    #[error(
        "{var} = {value} is above this process's open-files limit of {limit}: every socket is a \
         file, so the process would run out of files before reaching the cap; raise the limit \
         (`ulimit -n`, systemd's LimitNOFILE, the container's nofile) or lower {var}"
    )]
    AboveOpenFiles {
        var: &'static str,
        value: u64,
        limit: u64,
    },
}

/// Files a gateway keeps back from its open-files limit when it lowers a default socket cap:
/// its Redis connections, the listener, logs and the trace exporter.
pub const FILES_KEPT_BACK: u64 = 100;

/// Which caps the operator set by flag or environment (not left at their defaults).
#[derive(Clone, Copy, Debug, Default)]
pub struct CapsGiven {
    pub max_connections: bool,
    pub max_sockets: bool,
}

/// A default cap lowered to fit the open-files limit, as [`Config::fit_open_files`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapLowered {
    pub var: &'static str,
    pub from: u64,
    pub to: u64,
    pub limit: u64,
}

impl std::fmt::Display for CapLowered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} lowered from its default {} to {} to fit this process's open-files limit of {}; \
             set it (and the limit) to hold more",
            self.var, self.from, self.to, self.limit
        )
    }
}

impl Config {
    /// Checks what clap checks on the command line, for a `Config` built in code too, and the
    /// ticket key, before anything connects.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (var, value, range) in [
            ("USHER_KEEPALIVE_SECS", self.keepalive_secs, KEEPALIVE_SECS),
            ("USHER_RETRY_MS", self.retry_ms, RETRY_MS),
            ("USHER_HEARTBEAT_MS", self.heartbeat_ms, HEARTBEAT_MS),
            ("USHER_DRAIN_DELAY_MS", self.drain_delay_ms, DRAIN_DELAY_MS),
            ("USHER_DRAIN_SECS", self.drain_secs, DRAIN_SECS),
            (
                "USHER_TRUSTED_PROXY_HOPS",
                self.trusted_proxy_hops,
                TRUSTED_PROXY_HOPS,
            ),
            (
                "USHER_HEADER_TIMEOUT_SECS",
                self.header_timeout_secs,
                TIMEOUT_SECS,
            ),
            (
                "USHER_BODY_TIMEOUT_SECS",
                self.body_timeout_secs,
                TIMEOUT_SECS,
            ),
            (
                "USHER_IDLE_TIMEOUT_SECS",
                self.idle_timeout_secs,
                TIMEOUT_SECS,
            ),
            ("USHER_MAX_SOCKETS", self.max_sockets, 1..=u64::MAX),
            ("USHER_IPV6_PREFIX", u64::from(self.ipv6_prefix), 16..=128),
            (
                "USHER_CHALLENGE_TTL_SECS",
                self.challenge_ttl_secs,
                CHALLENGE_TTL_SECS,
            ),
        ] {
            if !range.contains(&value) {
                return Err(ConfigError::OutOfRange {
                    var,
                    value,
                    min: *range.start(),
                    max: *range.end(),
                });
            }
        }
        self.ticket_key()?;
        self.challenge_secret()?;
        Ok(())
    }

    /// Parses flags and environment as `Config::parse` does, and notes which caps the
    /// operator set: [`Config::fit_open_files`] refuses a given cap above the open-files limit
    /// but lowers a default one.
    pub fn parse_noting_caps() -> (Config, CapsGiven) {
        use clap::{parser::ValueSource, CommandFactory, FromArgMatches};
        let matches = Config::command().get_matches();
        let cfg = Config::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        let given = |id: &str| {
            matches!(
                matches.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
        };
        let caps = CapsGiven {
            max_connections: given("max_connections"),
            max_sockets: given("max_sockets"),
        };
        (cfg, caps)
    }

    /// Fits the caps on streams and sockets to the process's open-files `limit` (`None`:
    /// unlimited or unknown), read after the soft limit was raised to the hard one
    /// (`usher_runtime::raise_open_files_limit`). A cap above it would never be reached: the
    /// process would run out of descriptors first, and `accept` would fail with `EMFILE`
    /// where the cap answers with a `retry:`.
    ///
    /// A cap the operator set above the limit is refused: they asked for something this
    /// process cannot give. A cap left at its default is lowered to fit instead, so the
    /// defaults start anywhere (a laptop's 4,096 files too): sockets to the limit less
    /// [`FILES_KEPT_BACK`] (the process's other files), and streams, where they are above
    /// that, to nine tenths of the sockets (the defaults' own ratio).
    /// Returns what was lowered, for the binary to log. The binary runs this at start; a
    /// `Config` run in-process (tests) does not, since its limit is the host process's.
    pub fn fit_open_files(
        &mut self,
        limit: Option<u64>,
        given: CapsGiven,
    ) -> Result<Vec<CapLowered>, ConfigError> {
        let Some(limit) = limit else {
            return Ok(Vec::new());
        };
        for (var, value, was_given) in [
            (
                "USHER_MAX_CONNECTIONS",
                self.max_connections,
                given.max_connections,
            ),
            ("USHER_MAX_SOCKETS", self.max_sockets, given.max_sockets),
        ] {
            if was_given && value > limit {
                return Err(ConfigError::AboveOpenFiles { var, value, limit });
            }
        }
        let mut lowered = Vec::new();
        let sockets_fit = limit.saturating_sub(FILES_KEPT_BACK).max(limit / 2).max(1);
        if !given.max_sockets && self.max_sockets > sockets_fit {
            lowered.push(CapLowered {
                var: "USHER_MAX_SOCKETS",
                from: self.max_sockets,
                to: sockets_fit,
                limit,
            });
            self.max_sockets = sockets_fit;
        }
        if !given.max_connections && self.max_connections > self.max_sockets {
            let to = (self.max_sockets * 9 / 10).max(1);
            lowered.push(CapLowered {
                var: "USHER_MAX_CONNECTIONS",
                from: self.max_connections,
                to,
                limit,
            });
            self.max_connections = to;
        }
        Ok(lowered)
    }

    /// The configured puzzle secret; `None` when unset (one is shared through Redis).
    pub fn challenge_secret(&self) -> Result<Option<ChallengeSecret>, ConfigError> {
        let secret = self
            .challenge_secret
            .as_ref()
            .map(|k| ChallengeSecret::new(k.as_bytes()));
        Ok(secret.transpose()?)
    }

    /// How long a proof-of-work puzzle stays good.
    pub fn challenge_ttl(&self) -> Duration {
        Duration::from_secs(self.challenge_ttl_secs)
    }

    /// The configured ticket key; `None` when unset (a development key is used).
    pub fn ticket_key(&self) -> Result<Option<TicketKey>, ConfigError> {
        let key = self
            .ticket_key
            .as_ref()
            .map(|k| TicketKey::new(k.as_bytes()));
        Ok(key.transpose()?)
    }

    pub fn keepalive(&self) -> Duration {
        Duration::from_secs(self.keepalive_secs)
    }
    /// How long the browsers of a queue Redis lost are kept for it to come back.
    pub fn restore_window(&self) -> Duration {
        Duration::from_secs(self.restore_window_secs)
    }

    pub fn heartbeat(&self) -> Duration {
        Duration::from_millis(self.heartbeat_ms)
    }
    pub fn header_timeout(&self) -> Duration {
        Duration::from_secs(self.header_timeout_secs)
    }
    pub fn body_timeout(&self) -> Duration {
        Duration::from_secs(self.body_timeout_secs)
    }
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs(self.idle_timeout_secs)
    }
    pub fn registry_ttl(&self) -> Duration {
        self.heartbeat() * 5
    }
    pub fn stream_ttl(&self) -> Duration {
        self.heartbeat() * 30
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The defaults, as the binary parses them, against `redis_url`.
    fn config(redis_url: &str) -> Config {
        let mut cfg = Config::try_parse_from(["usher-gateway"]).expect("defaults parse");
        cfg.redis = RedisArgs::standalone(redis_url);
        cfg
    }

    #[test]
    fn the_defaults_are_valid() {
        assert!(config("redis://127.0.0.1:1").validate().is_ok());
    }

    #[test]
    fn errors_name_the_variable_and_the_bad_value() {
        let mut cfg = config("redis://127.0.0.1:1");
        cfg.keepalive_secs = 0;
        let e = cfg.validate().expect_err("a zero period");
        assert_eq!(
            e.to_string(),
            "USHER_KEEPALIVE_SECS = 0 is out of range: it must be 1 to 300"
        );
        let mut cfg = config("redis://127.0.0.1:1");
        cfg.heartbeat_ms = 60_001;
        let e = cfg.validate().expect_err("too slow a heartbeat");
        assert!(
            e.to_string().starts_with("USHER_HEARTBEAT_MS = 60001 "),
            "{e}"
        );
        let mut cfg = config("redis://127.0.0.1:1");
        cfg.ticket_key = Some("short".into());
        let e = cfg.validate().expect_err("a short key");
        assert!(e.to_string().starts_with("USHER_TICKET_KEY: "), "{e}");
        assert!(e.to_string().contains("got 5"), "{e}");
    }

    #[test]
    fn given_caps_above_the_open_files_limit_are_refused_and_defaults_lowered() {
        let both = CapsGiven {
            max_connections: true,
            max_sockets: true,
        };
        let mut cfg = config("redis://127.0.0.1:1");
        assert!(cfg
            .fit_open_files(None, both)
            .expect("unlimited")
            .is_empty());
        assert!(
            cfg.clone()
                .fit_open_files(Some(20_100), CapsGiven::default())
                .expect("the defaults fit 20,100")
                .is_empty(),
            "and stay as they are"
        );
        // At 20,000 files the sockets' default keeps 100 files back; the streams' fits.
        let mut at_20k = cfg.clone();
        let lowered = at_20k
            .fit_open_files(Some(20_000), CapsGiven::default())
            .expect("fits");
        assert_eq!(
            (at_20k.max_connections, at_20k.max_sockets),
            (18_000, 19_900)
        );
        assert_eq!(lowered.len(), 1, "{lowered:?}");
        let e = cfg
            .clone()
            .fit_open_files(Some(1_024), both)
            .expect_err("18,000 streams in 1,024 files");
        assert!(
            e.to_string().starts_with(
                "USHER_MAX_CONNECTIONS = 18000 is above this process's open-files limit of 1024"
            ),
            "{e}"
        );
        let mut streams_only = cfg.clone();
        streams_only.max_connections = 900;
        let e = streams_only
            .fit_open_files(Some(1_024), both)
            .expect_err("20,000 sockets");
        assert!(
            e.to_string().starts_with("USHER_MAX_SOCKETS = 20000 "),
            "{e}"
        );
        // Left at their defaults, both caps are lowered to fit, keeping files back.
        let lowered = cfg
            .fit_open_files(Some(4_096), CapsGiven::default())
            .expect("defaults fit");
        assert_eq!((cfg.max_sockets, cfg.max_connections), (3_996, 3_596));
        assert_eq!(lowered.len(), 2, "{lowered:?}");
        assert!(
            lowered[0].to_string().starts_with(
                "USHER_MAX_SOCKETS lowered from its default 20000 to 3996 to fit this process's open-files limit of 4096"
            ),
            "{}",
            lowered[0]
        );
        assert_eq!(lowered[1].var, "USHER_MAX_CONNECTIONS");
        // A given streams cap within the limit is kept while the sockets' default is lowered.
        let mut cfg = config("redis://127.0.0.1:1");
        cfg.max_connections = 2_000;
        let given_streams = CapsGiven {
            max_connections: true,
            max_sockets: false,
        };
        cfg.fit_open_files(Some(4_096), given_streams)
            .expect("fits");
        assert_eq!((cfg.max_sockets, cfg.max_connections), (3_996, 2_000));
    }

    #[test]
    fn the_command_line_uses_the_same_ranges() {
        let bad = Config::try_parse_from(["usher-gateway", "--keepalive-secs", "0"]);
        assert!(bad.is_err());
        let ok = Config::try_parse_from(["usher-gateway", "--keepalive-secs", "300"]);
        assert!(ok.is_ok_and(|c| c.validate().is_ok()));
    }
}
