//! What every usher process sets up before it serves anything: the tokio runtime, logging and
//! traces,
//! transparent huge pages off, and a future that resolves on SIGINT/SIGTERM. The binaries' thin
//! `main.rs` files call these, then hand a listener and `shutdown_signal()` to their crate's
//! `run`. HTTP itself lives in `usher-http`.
//!
//! Layout: `runtime` (worker threads), `logging` (`LogFormat`, `init_tracing`), `traces`
//! (OpenTelemetry export, `traceparent` carry, span links), `huge_pages`
//! (`disable_transparent_huge_pages`), `signal` (`shutdown_signal`).

mod huge_pages;
mod logging;
mod runtime;
mod signal;
pub mod traces;

pub use huge_pages::disable_transparent_huge_pages;
pub use logging::{init_tracing, LogFormat};
pub use runtime::runtime;
pub use signal::shutdown_signal;
pub use traces::{SpanLink, TracesGuard};
