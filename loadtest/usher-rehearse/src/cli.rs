//! Command line: every flag is also an `USHER_REHEARSE_*` environment variable.

use std::path::PathBuf;

use clap::Parser;
use usher_size::arrivals::Shape;

const LONG_ABOUT: &str = "\
Rehearses a sale before it happens. Given how the crowd arrives (--shape, --crowd and
--duration, or a CSV of `second,joins` with --arrivals), how browsers behave (who leaves
while waiting, who never shows up once admitted, how long a booking takes, who reconnects)
and the queue's settings exactly as `PUT /admin/queues/{queue}` takes them (--settings: a
JSON file of that body: rate, adaptive curve, max_active, passthrough, lanes, inventory
settings, a scheduled opens_at), it runs the sale through usher's real Lua scripts on a real
redis-server, driven by the dispatcher's own admission code on a virtual clock: a day of a
sale takes minutes.

The Redis at --redis must be a scratch server: the rehearsal refuses one that holds any
queue, and leaves its data there when it ends (look at it, or flush it).

Each second's joins are spread evenly across it (as usher-loadgen --arrivals spreads them), through one simulated gateway.
Every tick (--tick-ms of virtual time, the dispatcher's USHER_TICK_MS) the dispatcher's
admission code ticks the queue; the rehearsal reads the admissions from the gateway's
stream as a gateway would. An admitted browser arrives a second later (the booking
service's first check of its session) unless it is a no-show, and books (consumes its
session, one item of --inventory) after its booking time.

It writes, into --out: rehearsal.json (every figure below, per second and per arrival
minute), waits.svg (wait percentiles and the ETA shown at join against the actual wait, by
arrival minute), timeline.svg (admissions per second, active sessions and the line over
time) and index.html (a one-page summary with both plots): when the line empties, who is
still waiting when the inventory runs out, and Redis' peak memory and commands.
Everything random (the behaviours) is drawn from --seed: the same inputs give the same
rehearsal.

Exit status: 0 when the rehearsal ran; 1 when an input is refused (the message names the
flag, the CSV line or the setting) or Redis fails; 2 for a flag clap refuses.";

/// A sale to rehearse: arrivals, behaviours, settings, and where to write the results.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "usher-rehearse",
    version,
    about = "Rehearses a sale on a real redis-server with a virtual clock: waits, ETAs, admissions, Redis cost",
    long_about = LONG_ABOUT
)]
pub struct Args {
    /// The scratch Redis to rehearse on (`redis://127.0.0.1:6379`): it must hold no queue.
    #[arg(long, env = "USHER_REHEARSE_REDIS", value_name = "URL")]
    pub redis: String,

    /// The queue's settings: a JSON file holding exactly the body `PUT /admin/queues/{queue}`
    /// takes (`{"admit_per_second": 50, "max_active": 2000}`), checked the same way.
    #[arg(long, env = "USHER_REHEARSE_SETTINGS", value_name = "JSON")]
    pub settings: PathBuf,

    /// The rehearsed queue's id.
    #[arg(long, env = "USHER_REHEARSE_QUEUE", default_value = "rehearsal")]
    pub queue: String,

    /// People expected, spread over --duration by --shape. Not with --arrivals.
    #[arg(
        long,
        env = "USHER_REHEARSE_CROWD",
        value_name = "PEOPLE",
        required_unless_present = "arrivals",
        conflicts_with = "arrivals"
    )]
    pub crowd: Option<u64>,

    /// How the crowd arrives: `spike` (an even rate over --duration), `ramp` (a rate rising
    /// from 0 to twice the average), `two-waves` (half the crowd over the first quarter, half
    /// over the third).
    #[arg(
        long,
        env = "USHER_REHEARSE_SHAPE",
        value_enum,
        default_value = "spike"
    )]
    pub shape: Shape,

    /// Seconds the shape is spread over (at most a day).
    #[arg(long, env = "USHER_REHEARSE_DURATION", value_name = "SECONDS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub duration: u64,

    /// A CSV of `second,joins` lines instead of a shape (seconds increasing; a `second,joins`
    /// header, blank lines and `#` comments are allowed).
    #[arg(long, env = "USHER_REHEARSE_ARRIVALS", value_name = "CSV")]
    pub arrivals: Option<PathBuf>,

    /// Share of the people still waiting that leave in each minute of waiting, 0 to 1 (0.05:
    /// one in twenty gives up per minute).
    #[arg(
        long,
        env = "USHER_REHEARSE_LEAVE_PER_MINUTE",
        value_name = "SHARE",
        default_value_t = 0.0
    )]
    pub leave_per_minute: f64,

    /// Share of admitted browsers that never show up at the booking service, 0 to 1: their
    /// sessions end by `arrival_seconds` (when set) or expire.
    #[arg(
        long,
        env = "USHER_REHEARSE_NO_SHOW",
        value_name = "SHARE",
        default_value_t = 0.0
    )]
    pub no_show: f64,

    /// How long a booking takes once the browser arrives, in seconds: `120`, or a range
    /// `60-180` drawn evenly. The session is consumed then (one item of --inventory).
    #[arg(
        long,
        env = "USHER_REHEARSE_BOOKING_SECONDS",
        value_name = "SECONDS",
        default_value = "120"
    )]
    pub booking_seconds: String,

    /// Share of waiting browsers whose connection drops once, 0 to 1, at a moment drawn in
    /// their first minute of waiting; each is away for --away-seconds, then resumes.
    #[arg(
        long,
        env = "USHER_REHEARSE_RECONNECT",
        value_name = "SHARE",
        default_value_t = 0.0
    )]
    pub reconnect: f64,

    /// Seconds a dropped browser stays away before it resumes (past the queue's
    /// `grace_seconds`, its place is dropped).
    #[arg(
        long,
        env = "USHER_REHEARSE_AWAY_SECONDS",
        value_name = "SECONDS",
        default_value_t = 5
    )]
    pub away_seconds: u64,

    /// Items on sale: the simulated booking service reports what is left every second, and
    /// each booking takes one. Unset: no inventory is reported.
    #[arg(long, env = "USHER_REHEARSE_INVENTORY", value_name = "ITEMS")]
    pub inventory: Option<u64>,

    /// The simulated backend of an `adaptive` queue: the active sessions it serves at load
    /// 1.0. Its load (active sessions ÷ this) is reported every second. Needed with
    /// `adaptive` in --settings.
    #[arg(long, env = "USHER_REHEARSE_BACKEND_CAPACITY", value_name = "SESSIONS")]
    pub backend_capacity: Option<u64>,

    /// Shares of joins per lane of the queue (`members=0.2`, comma-separated; the rest go to
    /// the default lane). Needs `lanes` in --settings.
    #[arg(
        long,
        env = "USHER_REHEARSE_LANE_SHARES",
        value_name = "LANE=SHARE",
        value_delimiter = ','
    )]
    pub lane_shares: Vec<String>,

    /// When second 0 of the arrival curve is, on the virtual clock (RFC 3339). A scheduled
    /// `opens_at` in --settings is on the same clock.
    #[arg(
        long,
        env = "USHER_REHEARSE_START",
        value_name = "TIME",
        default_value = "2030-01-01T00:00:00Z"
    )]
    pub start: String,

    /// Milliseconds of virtual time between two dispatcher ticks (USHER_TICK_MS).
    #[arg(long, env = "USHER_REHEARSE_TICK_MS", value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub tick_ms: u64,

    /// The rehearsal stops after this many virtual seconds even if people still wait.
    #[arg(long, env = "USHER_REHEARSE_MAX_SECONDS", value_name = "SECONDS", default_value_t = 86_400, value_parser = clap::value_parser!(u64).range(1..=172_800))]
    pub max_seconds: u64,

    /// Seed of every random draw (who leaves when, who is a no-show, booking times, who
    /// reconnects): the same seed and inputs give the same rehearsal.
    #[arg(long, env = "USHER_REHEARSE_SEED", default_value_t = 1)]
    pub seed: u64,

    /// Directory for rehearsal.json, waits.svg, timeline.svg and index.html (created).
    #[arg(long, env = "USHER_REHEARSE_OUT", value_name = "DIR")]
    pub out: PathBuf,
}
