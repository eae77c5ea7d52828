//! Open-files limit: raise the soft limit to the hard one, and say how many fit.

use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the soft limit in force after.
pub fn raise_nofile() -> u64 {
    let lim = getrlimit(Resource::Nofile);
    if lim.current != lim.maximum {
        let _ = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            },
        );
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// File descriptors kept free for everything but client sockets.
pub const HEADROOM: u64 = 500;

/// The local port range (`ip_local_port_range`): how many ephemeral ports one source
/// address has.
pub fn ephemeral_ports() -> u64 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|x| x.parse::<u64>().ok());
            let lo = it.next()??;
            let hi = it.next()??;
            Some(hi.saturating_sub(lo) + 1)
        })
        .unwrap_or(28_232)
}
