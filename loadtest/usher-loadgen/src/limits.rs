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

/// Grows this process' descriptor table to hold `n` descriptors now, while it has one thread.
///
/// The kernel grows the table in powers of two as descriptors are opened, and in a process
/// with several threads (a worker has its stdin watcher) each growth waits for an RCU grace
/// period (`synchronize_rcu` in `expand_fdtable`) while the thread opening the socket sleeps
/// and reads nothing. Workers were sampled asleep there while opening their first thousands
/// of connections, and the first second of a 10,000 joins/s run had 11–257 joins over 20 ms;
/// with the table grown up front, 0–81. One early growth costs 8 bytes per descriptor.
pub fn reserve_descriptors(n: u64) {
    let top = n.saturating_sub(1).min(1 << 20) as i32;
    // The lowest free descriptor at or above `top`: the table grows to hold it, and stays.
    drop(rustix::io::fcntl_dupfd_cloexec(std::io::stderr(), top));
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
