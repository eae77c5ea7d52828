//! The command line of `usher-floor`, and the limits it checks.

use anyhow::ensure;
use clap::Parser;

use crate::frames::frame;

#[derive(Debug, Parser)]
#[command(name = "usher-floor", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Args {
    /// Connection pairs: how many events each burst pushes, one per connection.
    #[arg(long, env = "USHER_FLOOR_CONNECTIONS", default_value_t = 5000)]
    pub connections: usize,

    /// Bursts to run, one every --interval-ms.
    #[arg(long, env = "USHER_FLOOR_BURSTS", default_value_t = 6)]
    pub bursts: u32,

    /// Milliseconds from one burst's start to the next (the first starts one interval after
    /// the connections are set up). A burst that takes longer delays the next one.
    #[arg(long, env = "USHER_FLOOR_INTERVAL_MS", default_value_t = 1000)]
    pub interval_ms: u64,

    /// Size of each event's SSE frame in bytes (`event: admitted`, `id:`, `data:` padded to
    /// this size); the chunked framing around it adds a few bytes to each write.
    #[arg(long, env = "USHER_FLOOR_EVENT_BYTES", default_value_t = 600)]
    pub event_bytes: usize,

    /// Source addresses for the client sockets: a range (`127.0.0.2-127.0.0.61`), a comma
    /// list, or both. Each client binds to the next one, so every address brings its own
    /// ephemeral ports. Loopback only.
    #[arg(
        long,
        env = "USHER_FLOOR_SOURCE_IPS",
        default_value = "127.0.0.2-127.0.0.61"
    )]
    pub source_ips: String,

    /// Sending threads, each with its own single-threaded runtime and an even share of the
    /// connections' server ends.
    #[arg(long, env = "USHER_FLOOR_SENDERS", default_value_t = 1)]
    pub senders: usize,

    /// Receiving threads, each with its own single-threaded runtime and an even share of the
    /// connections' client ends (one task per connection).
    #[arg(long, env = "USHER_FLOOR_RECEIVERS", default_value_t = 1)]
    pub receivers: usize,
}

const ABOUT: &str = "Measures this machine's floor for pushing one small event to many loopback \
                     TCP connections at once, with no application logic";

const LONG_ABOUT: &str = "\
Measures this machine's floor for pushing one small event to many loopback TCP
connections at once, with no application logic: what a gateway admitting N
browsers in one tick cannot beat on this machine, whatever its code does.

It opens --connections TCP connection pairs over loopback (clients bound to
--source-ips round-robin, TCP_NODELAY on both ends), then runs --bursts bursts,
one every --interval-ms. In each burst every sending thread takes a timestamp t0
and writes one event to each of its connections in a loop: an SSE `admitted`
frame of --event-bytes bytes in HTTP chunked framing, like the gateway's, one
write per connection, t0 carried in the event id. Each receiving connection is
a task that reads and decodes the chunks and the SSE event with the load
generator's own decoder and parser, and records now - t0. A burst ends when every connection has its
event; the next one starts at its scheduled time.

Threads: --senders threads write and --receivers threads read, each with its own
single-threaded tokio runtime (a gateway with one worker thread; a
load-generator worker). The connections are split evenly between them.

How to read it: the latency percentiles are the floor for a burst of that many
events on this machine. Of an end-to-end benchmark's admission latency, the part
at or below the floor's is the kernel's TCP send and receive on these CPUs; the
part above it is the application's (dispatcher, gateway, load generator).
`last_write_ms` is how long the sending side took to issue its writes; on
loopback a write also runs the receiving socket's TCP input in the writer's
thread (the softirq runs there), so the sender's CPU per event is most of the
kernel's cost of one event and the receiver's is its wake-up and reads. Bursts
differ from one another (by a third or more on a small VM): read them all, not
just the overall figures. Run it on an otherwise idle machine: `machine.busy_cpu_us_per_event` (all CPUs, the whole
burst phase including the gaps) well above sender + receiver means something
else was running.

Each pair holds two descriptors in this one process: at most
(open-files limit - 500) / 2 pairs.

Output: one JSON object on stdout; a short summary on stderr. Exit status: 0 on
success; 1 on a usage or runtime error; 2 when some event had not arrived 5 s
after its burst started.";

const MAX_THREADS: usize = 64;
const MAX_BURSTS: u32 = 1000;
const MAX_INTERVAL_MS: u64 = 60_000;
const MAX_EVENT_BYTES: usize = 65_536;

impl Args {
    /// Refuses impossible or unreasonable values up front, naming the flag.
    pub fn check(&self) -> anyhow::Result<()> {
        let (a, n) = (self, self.connections);
        ensure!(n >= 1, "--connections must be at least 1");
        ensure!(
            (1..=MAX_BURSTS).contains(&a.bursts),
            "--bursts must be between 1 and {MAX_BURSTS}"
        );
        ensure!(
            (10..=MAX_INTERVAL_MS).contains(&a.interval_ms),
            "--interval-ms must be between 10 and {MAX_INTERVAL_MS}"
        );
        for (flag, v) in [("--senders", a.senders), ("--receivers", a.receivers)] {
            ensure!(
                (1..=MAX_THREADS).contains(&v) && v <= n,
                "{flag} must be between 1 and {MAX_THREADS}, and at most --connections"
            );
        }
        let widest = frame(a.bursts - 1, u64::MAX, 0).len();
        ensure!(
            (widest..=MAX_EVENT_BYTES).contains(&a.event_bytes),
            "--event-bytes must be between {widest} and {MAX_EVENT_BYTES}"
        );
        Ok(())
    }
}
