//! Log output and traces: the format flag and the global `tracing` subscriber.
//!
//! Logs go to stdout: text (colours only when stdout is a terminal, so a log file or a
//! collector never receives ANSI escape codes) or JSON (`--log-format json`). `RUST_LOG`
//! filters them (default `info`). Traces are a second layer of the same subscriber
//! ([`crate::traces`]): it sees only usher's own spans at `info` and above, whatever
//! `RUST_LOG` says, so quieting logs never loses traces.

use std::io::IsTerminal;

use tracing_subscriber::filter::{filter_fn, EnvFilter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::traces::{self, TracesError, TracesGuard};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!(
                "unknown log format {other:?} (expected text or json)"
            )),
        }
    }
}

/// Installs the global `tracing` subscriber: logs in `format`, and OpenTelemetry traces when
/// the environment asks for them (`service`: the default service name). Keep the guard until
/// the process ends: dropping it flushes the last spans.
pub fn init_tracing(format: LogFormat, service: &str) -> Result<TracesGuard, TracesError> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer().with_ansi(std::io::stdout().is_terminal());
    let logs = match format {
        LogFormat::Text => fmt.with_filter(filter).boxed(),
        LogFormat::Json => fmt.json().with_filter(filter).boxed(),
    };
    let registry = tracing_subscriber::registry().with(logs);
    let Some(provider) = traces::provider(service)? else {
        let _ = registry.try_init();
        return Ok(TracesGuard::default());
    };
    let (otel, guard) = traces::layer(provider, service);
    let ours = filter_fn(|m| m.target().starts_with("usher") && *m.level() <= tracing::Level::INFO);
    // Marked first: `try_init` can fail after installing the subscriber (a `log` logger set
    // already), and a join span missing from an exported trace is worse than one made for
    // nothing when no subscriber took the layer.
    traces::mark_exporting();
    let _ = registry.with(otel.with_filter(ours)).try_init();
    Ok(guard)
}
