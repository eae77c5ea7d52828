//! The validated run configuration: targets (loopback only unless the operator allows remote
//! ones), source addresses, and the limits that keep every process under the open-files cap.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::time::Duration;

use serde::Serialize;
use usher_core::ids::QueueId;

use crate::cli::Args;

/// Connections one process may hold (the hard open-files limit here is 20,000; the rest is
/// headroom for the runtime, stdio and the odd reconnect in flight).
pub const MAX_PER_PROCESS: u64 = 19_000;
/// Upper bounds that keep every run bounded.
pub const MAX_CONNECTIONS: u64 = 2_000_000;
pub const MAX_WORKERS: u32 = 256;
pub const MAX_DURATION_SECS: u64 = 24 * 3600;
pub const MAX_SOURCE_IPS: usize = 65_536;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> PlanError {
    PlanError::Invalid(msg.into())
}

/// Which addresses a run may use. Loopback by default, so a mistyped address never sends
/// load to a machine nobody meant; `--allow-remote` says the operator means it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// 127.0.0.0/8, ::1 and `localhost` only.
    Loopback,
    /// Any address or host name (resolved once, when the run starts).
    Remote,
}

impl Reach {
    pub fn of(allow_remote: bool) -> Self {
        if allow_remote {
            Reach::Remote
        } else {
            Reach::Loopback
        }
    }
}

/// One gateway: where to connect and what to send as `Host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Gateway {
    pub url: String,
    pub addr: SocketAddr,
    pub host: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub gateways: Vec<Gateway>,
    pub queue: String,
    pub connections: u64,
    pub join_rate: f64,
    pub workers: u32,
    pub source_ips: Vec<IpAddr>,
    pub duration_secs: u64,
    pub until_admitted: bool,
    pub connect_timeout_secs: u64,
    pub idle_timeout_secs: u64,
    pub default_retry_ms: u64,
    pub linger_ms: u64,
    /// `--arrivals`: each connection's start from a curve instead of `join_rate`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<crate::arrivals::Arrivals>,
    /// `--leave-per-minute` and its `--seed` (`crate::leaving`).
    pub leave_per_minute: f64,
    pub seed: u64,
}

impl Plan {
    pub fn from_args(a: &Args) -> Result<Self, PlanError> {
        // An arrival curve brings its own count of connections (`crate::arrivals`).
        let arrivals = match &a.arrivals {
            Some(path) => Some(crate::arrivals::Arrivals::load(path).map_err(invalid)?),
            None => None,
        };
        let connections = arrivals.as_ref().map_or(a.connections, |c| c.total());
        if !(0.0..=1.0).contains(&a.leave_per_minute) {
            return Err(invalid("--leave-per-minute must be a share from 0 to 1"));
        }
        if a.gateways.is_empty() {
            return Err(invalid("--gateways: give at least one gateway URL"));
        }
        let reach = Reach::of(a.allow_remote);
        let gateways = a
            .gateways
            .iter()
            .map(|g| parse_gateway(g.trim(), reach))
            .collect::<Result<Vec<_>, _>>()?;
        QueueId::new(a.queue.clone())
            .map_err(|e| invalid(format!("--queue {:?}: {e}", a.queue)))?;
        if connections == 0 || connections > MAX_CONNECTIONS {
            return Err(invalid(format!(
                "--connections must be between 1 and {MAX_CONNECTIONS}"
            )));
        }
        if !(a.join_rate.is_finite() && (a.join_rate == 0.0 || a.join_rate >= 0.01)) {
            return Err(invalid(
                "--join-rate must be 0 (unpaced) or at least 0.01 connections per second",
            ));
        }
        if a.workers == 0 || a.workers > MAX_WORKERS {
            return Err(invalid(format!(
                "--workers must be between 1 and {MAX_WORKERS}"
            )));
        }
        let per_worker = connections.div_ceil(u64::from(a.workers));
        if per_worker > MAX_PER_PROCESS {
            let need = connections.div_ceil(MAX_PER_PROCESS);
            return Err(invalid(format!(
                "--connections {} over --workers {} is {per_worker} connections per process, \
                 but one process may hold at most {MAX_PER_PROCESS} (the hard open-files limit \
                 is about 20,000); use --workers {need} or more",
                connections, a.workers
            )));
        }
        if a.duration == 0 || a.duration > MAX_DURATION_SECS {
            return Err(invalid(format!(
                "--duration must be between 1 and {MAX_DURATION_SECS} seconds"
            )));
        }
        if a.connect_timeout == 0 || a.idle_timeout == 0 {
            return Err(invalid("--connect-timeout and --idle-timeout must be > 0"));
        }
        let source_ips = match &a.source_ips {
            Some(s) if !s.trim().is_empty() => parse_source_ips(s, reach)?,
            _ => Vec::new(),
        };
        if let Some(ip) = source_ips.first() {
            if gateways.iter().any(|g| g.addr.is_ipv4() != ip.is_ipv4()) {
                return Err(invalid(
                    "--source-ips and --gateways must be of the same address family",
                ));
            }
        }
        Ok(Self {
            gateways,
            queue: a.queue.clone(),
            connections,
            join_rate: a.join_rate,
            arrivals,
            leave_per_minute: a.leave_per_minute,
            seed: a.seed,
            workers: a.workers,
            source_ips,
            duration_secs: a.duration,
            until_admitted: a.until_admitted,
            connect_timeout_secs: a.connect_timeout,
            idle_timeout_secs: a.idle_timeout,
            default_retry_ms: a.default_retry_ms,
            linger_ms: a.linger_ms,
        })
    }

    /// Connections handled by worker `index` (global indices `index, index + W, ...`).
    pub fn assigned(&self, index: u32) -> u64 {
        let w = u64::from(self.workers);
        let i = u64::from(index);
        self.connections / w + u64::from(i < self.connections % w)
    }

    pub fn duration(&self) -> Duration {
        Duration::from_secs(self.duration_secs)
    }

    pub fn stream_path(&self) -> String {
        format!("/api/queues/{}/stream", self.queue)
    }
}

/// `http://host[:port][/]`: with [`Reach::Loopback`] a loopback host (an IP literal or
/// `localhost`); with [`Reach::Remote`] any IP or host name, resolved here once (the first
/// address; `Host` keeps the name, as a load balancer routing on it expects).
pub fn parse_gateway(url: &str, reach: Reach) -> Result<Gateway, PlanError> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        invalid(format!(
            "gateway {url:?}: only plain http:// URLs are supported (e.g. http://127.0.0.1:8080)"
        ))
    })?;
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.is_empty() || authority.contains('/') || authority.contains('@') {
        return Err(invalid(format!(
            "gateway {url:?}: give a base URL without a path, like http://127.0.0.1:8080"
        )));
    }
    let (host, port) = split_host_port(authority)
        .ok_or_else(|| invalid(format!("gateway {url:?}: cannot parse host and port")))?;
    if reach == Reach::Remote {
        let addr = (host, port)
            .to_socket_addrs()
            .map_err(|e| invalid(format!("gateway {url:?}: cannot resolve {host}: {e}")))?
            .next()
            .ok_or_else(|| invalid(format!("gateway {url:?}: {host} has no address")))?;
        return Ok(Gateway {
            url: url.to_owned(),
            addr,
            host: authority.to_owned(),
        });
    }
    let ip: IpAddr = if host.eq_ignore_ascii_case("localhost") {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        host.parse().map_err(|_| {
            invalid(format!(
                "gateway {url:?}: the host must be a loopback IP address or localhost \
                 (no name lookups without --allow-remote)"
            ))
        })?
    };
    if !ip.is_loopback() {
        return Err(invalid(format!(
            "gateway {url:?}: {ip} is not a loopback address; usher-loadgen targets \
             127.0.0.0/8 or ::1 unless --allow-remote is given"
        )));
    }
    Ok(Gateway {
        url: url.to_owned(),
        addr: SocketAddr::new(ip, port),
        host: authority.to_owned(),
    })
}

fn split_host_port(authority: &str) -> Option<(&str, u16)> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => 80,
            None => return None,
        };
        return Some((host, port));
    }
    match authority.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((h, p.parse().ok()?)),
        Some(_) => None,
        None => Some((authority, 80)),
    }
}

/// `127.0.0.2-127.0.0.40`, `127.0.0.2,127.0.0.3`, `::1`, or a mix of ranges and addresses:
/// loopback ones, or with [`Reach::Remote`] any of this machine's addresses.
pub fn parse_source_ips(s: &str, reach: Reach) -> Result<Vec<IpAddr>, PlanError> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if let Some((a, b)) = part.split_once('-') {
            let parse = |x: &str| {
                x.trim().parse::<Ipv4Addr>().map_err(|_| {
                    invalid(format!(
                        "--source-ips: {part:?} is not an IPv4 range like 127.0.0.2-127.0.0.40"
                    ))
                })
            };
            let (a, b) = (u32::from(parse(a)?), u32::from(parse(b)?));
            if a > b {
                return Err(invalid(format!(
                    "--source-ips: range {part:?} is backwards"
                )));
            }
            if (b - a) as usize >= MAX_SOURCE_IPS {
                return Err(invalid(format!(
                    "--source-ips: at most {MAX_SOURCE_IPS} addresses"
                )));
            }
            out.extend((a..=b).map(|n| IpAddr::V4(Ipv4Addr::from(n))));
        } else {
            let ip: IpAddr = part
                .parse()
                .map_err(|_| invalid(format!("--source-ips: {part:?} is not an IP address")))?;
            out.push(ip);
        }
        if out.len() > MAX_SOURCE_IPS {
            return Err(invalid(format!(
                "--source-ips: at most {MAX_SOURCE_IPS} addresses"
            )));
        }
    }
    if out.is_empty() {
        return Err(invalid("--source-ips: no address given"));
    }
    if let Some(ip) = out.iter().find(|ip| !ip.is_loopback()) {
        if reach == Reach::Loopback {
            return Err(invalid(format!(
                "--source-ips: {ip} is not a loopback address (127.0.0.0/8 or ::1; others need \
                 --allow-remote)"
            )));
        }
    }
    if out.iter().any(|ip| ip.is_ipv4() != out[0].is_ipv4()) {
        return Err(invalid("--source-ips: do not mix IPv4 and IPv6"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateways_must_be_loopback() {
        let g = parse_gateway("http://127.0.0.1:8080", Reach::Loopback).expect("valid");
        assert_eq!(g.addr, "127.0.0.1:8080".parse().expect("addr"));
        assert_eq!(g.host, "127.0.0.1:8080");
        assert!(parse_gateway("http://127.3.4.5:80/", Reach::Loopback).is_ok());
        assert!(parse_gateway("http://[::1]:8080", Reach::Loopback).is_ok());
        assert_eq!(
            parse_gateway("http://localhost", Reach::Loopback)
                .expect("valid")
                .addr
                .port(),
            80
        );
        for bad in [
            "http://10.0.0.1:8080",
            "http://192.168.1.2:80",
            "http://example.com:80",
            "https://127.0.0.1:443",
            "127.0.0.1:8080",
            "http://127.0.0.1:8080/api",
            "http://[2001:db8::1]:80",
        ] {
            assert!(
                parse_gateway(bad, Reach::Loopback).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn remote_gateways_need_allow_remote() {
        let err = parse_gateway("http://10.0.0.1:8080", Reach::Loopback)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("--allow-remote"), "{err}");
        let g = parse_gateway("http://10.0.0.1:8080/", Reach::Remote).expect("allowed");
        assert_eq!(g.addr, "10.0.0.1:8080".parse().expect("addr"));
        assert_eq!(g.host, "10.0.0.1:8080");
        // A name is resolved once; `Host` keeps the name.
        let g = parse_gateway("http://localhost:9", Reach::Remote).expect("resolves");
        assert!(g.addr.ip().is_loopback());
        assert_eq!(g.host, "localhost:9");
        for bad in [
            "https://10.0.0.1:443",
            "10.0.0.1:8080",
            "http://10.0.0.1:8080/api",
            "http://user@10.0.0.1:80",
            "http://no-such-host.invalid:80",
        ] {
            assert!(parse_gateway(bad, Reach::Remote).is_err(), "{bad} accepted");
        }
        assert!(parse_source_ips("10.0.0.5-10.0.0.6", Reach::Loopback).is_err());
        assert_eq!(
            parse_source_ips("10.0.0.5-10.0.0.6", Reach::Remote)
                .expect("allowed")
                .len(),
            2
        );
    }

    #[test]
    fn source_ip_ranges_and_lists() {
        let ips =
            parse_source_ips("127.0.0.2-127.0.0.4,127.0.1.1", Reach::Loopback).expect("valid");
        let want: Vec<IpAddr> = ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.1.1"]
            .iter()
            .map(|s| s.parse().expect("ip"))
            .collect();
        assert_eq!(ips, want);
        assert!(parse_source_ips("127.0.0.9-127.0.0.2", Reach::Loopback).is_err());
        assert!(parse_source_ips("10.0.0.1", Reach::Loopback).is_err());
        assert!(parse_source_ips("127.0.0.1,::1", Reach::Loopback).is_err());
        assert!(parse_source_ips("127.0.0.0-127.255.255.255", Reach::Loopback).is_err());
    }

    #[test]
    fn connections_are_split_over_workers() {
        let args = Args {
            gateways: vec!["http://127.0.0.1:1".into()],
            queue: "q".into(),
            connections: 10,
            join_rate: 0.0,
            arrivals: None,
            leave_per_minute: 0.0,
            seed: 1,
            workers: 3,
            source_ips: None,
            allow_remote: false,
            duration: 5,
            until_admitted: false,
            report: None,
            plot: None,
            quiet: true,
            connect_timeout: 1,
            idle_timeout: 1,
            default_retry_ms: 100,
            linger_ms: 0,
            worker_index: None,
            worker_count: None,
            epoch_ms: None,
        };
        let p = Plan::from_args(&args).expect("valid");
        assert_eq!((p.assigned(0), p.assigned(1), p.assigned(2)), (4, 3, 3));
        let too_many = Args {
            connections: 40_000,
            workers: 2,
            ..args
        };
        let err = Plan::from_args(&too_many).expect_err("refused").to_string();
        assert!(err.contains("--workers 3"), "{err}");
        // An arrival curve brings its own count; a bad one is refused naming the line.
        let curve = tempfile::NamedTempFile::new().expect("a temporary file");
        std::fs::write(curve.path(), "second,joins\n0,2\n3,4\n").expect("written");
        let from_curve = Args {
            arrivals: Some(curve.path().to_owned()),
            ..too_many.clone()
        };
        assert_eq!(Plan::from_args(&from_curve).expect("valid").connections, 6);
        std::fs::write(curve.path(), "0,2\n3;4\n").expect("written");
        let err = Plan::from_args(&from_curve)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
