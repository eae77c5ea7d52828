//! Log output: the format flag and the global `tracing` subscriber.

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

/// Installs the global `tracing` subscriber. `RUST_LOG` filters (default `info`).
pub fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match format {
        LogFormat::Text => b.try_init(),
        LogFormat::Json => b.json().try_init(),
    };
}
