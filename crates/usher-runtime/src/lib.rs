//! What every usher process sets up before it serves anything: the tokio runtime, logging and
//! traces, transparent huge pages off, the open-files soft limit raised to the hard limit,
//! and a future that resolves on SIGINT/SIGTERM. The binaries' thin `main.rs` files call
//! these, then hand a listener and `shutdown_signal()` to their crate's `run`. HTTP itself
//! lives in `usher-http`.
//!
//! Layout: `process` (`runtime`, `disable_transparent_huge_pages`, `raise_open_files_limit`,
//! `shutdown_signal`), `logging` (`LogFormat`, `init_tracing`), `traces` (OpenTelemetry
//! export, `traceparent` carry, span links), `precise` (a sleep to about a tenth of a
//! millisecond).

mod logging;
pub mod precise;
mod process;
pub mod traces;

pub use logging::{init_tracing, LogFormat};
pub use process::{
    disable_transparent_huge_pages, open_files_limit, raise_open_files_limit, runtime,
    shutdown_signal,
};
pub use traces::{SpanLink, TracesGuard};
