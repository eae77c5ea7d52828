//! OpenTelemetry traces: the OTLP exporter behind the `tracing` spans, and the few span
//! operations the servers need (a W3C `traceparent` to carry a span across a Redis stream,
//! a parent set from one, a link to another span).
//!
//! Traces are on when `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`)
//! is set, and off otherwise: no exporter, no span data, and every function here a no-op.
//! The SDK reads the standard variables itself: `OTEL_TRACES_SAMPLER`,
//! `OTEL_TRACES_SAMPLER_ARG`, `OTEL_SERVICE_NAME` (the binary's name when unset),
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (`http/protobuf`, the default, or `http/json`; `grpc` is
//! not built in and refused at start-up rather than sent to the wrong port), and the OTLP
//! headers and timeout variables. The exporter has no TLS client: an `https://` endpoint is
//! refused at start-up too (run a collector next to the servers and let it forward).
//!
//! Spans are exported in batches from the SDK's own thread, so exporting never blocks a
//! request; [`TracesGuard`] flushes what is left when the process ends.

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The variables that turn traces on.
const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
];
/// The W3C trace-context header, the one key of a carried context.
const TRACEPARENT: &str = "traceparent";

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL={0:?} is not supported: use http/protobuf (port 4318) or http/json")]
    Protocol(String),
    #[error("{0}={1:?}: only http:// collectors are supported (no TLS client is built in); run a collector next to the servers")]
    Https(&'static str, String),
    #[error("cannot build the OTLP exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Flushes and stops the exporter when dropped (at the end of `main`, outside the runtime:
/// the exporter's HTTP client must not be dropped inside one).
#[must_use = "traces are flushed when the guard is dropped"]
#[derive(Debug, Default)]
pub struct TracesGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TracesGuard {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown() {
                eprintln!("traces: flushing at exit failed: {e}");
            }
        }
    }
}

/// Set when `init_tracing` installs the OTLP layer: see [`exporting`].
static EXPORTING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this process exports traces (its subscriber has the OTLP layer).
///
/// For a span made on a hot path only to be exported: with traces off, an `info` span is
/// still made for the log layer, which formats its fields and keeps it in the registry while
/// it lives (a `join` span per join put the `tracing` functions at 2.6% of a gateway's samples
/// during joins; 0.6% without it: CHANGELOG.md).
pub fn exporting() -> bool {
    EXPORTING.load(std::sync::atomic::Ordering::Relaxed)
}

/// Notes that the OTLP layer is installed ([`exporting`]).
pub(crate) fn mark_exporting() {
    EXPORTING.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the environment asks for traces.
fn enabled() -> bool {
    ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
}

/// The tracer provider, when the environment asks for traces. `service`: the service name
/// unless `OTEL_SERVICE_NAME` gives one.
pub(crate) fn provider(service: &str) -> Result<Option<SdkTracerProvider>, TracesError> {
    if !enabled() {
        return Ok(None);
    }
    for var in ENDPOINT_VARS {
        if let Ok(url) = std::env::var(var) {
            if url.trim().to_ascii_lowercase().starts_with("https://") {
                return Err(TracesError::Https(var, url));
            }
        }
    }
    // Chosen here: the exporter's own default is http/json when that is compiled in, and
    // the specification's default is http/protobuf.
    let protocol = match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL")
        .unwrap_or_default()
        .as_str()
    {
        "" | "http/protobuf" => Protocol::HttpBinary,
        "http/json" => Protocol::HttpJson,
        other => return Err(TracesError::Protocol(other.to_owned())),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(protocol)
        .build()?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(service.to_owned());
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}

/// The `tracing` layer that turns spans into OpenTelemetry spans of `provider`, and the
/// guard that flushes them.
pub(crate) fn layer<S>(
    provider: SdkTracerProvider,
    service: &str,
) -> (
    tracing_opentelemetry::OpenTelemetryLayer<S, opentelemetry_sdk::trace::Tracer>,
    TracesGuard,
)
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let tracer = provider.tracer(service.to_owned());
    (
        tracing_opentelemetry::layer().with_tracer(tracer),
        TracesGuard {
            provider: Some(provider),
        },
    )
}

/// The W3C `traceparent` of `span`, to carry it to another process; `None` when traces are
/// off or the span is not sampled (nothing to link to).
pub fn traceparent(span: &Span) -> Option<String> {
    let cx = span.context();
    if !cx.span().span_context().is_sampled() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&cx, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` (not yet entered) a child of the span a `traceparent` names. A malformed
/// value is ignored: the span starts a trace of its own.
pub fn set_parent(span: &Span, traceparent: &str) {
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        // Fails only when traces are off or the span was entered already: nothing to do.
        let _ = span.set_parent(cx);
    }
}

/// A reference to a span that has ended, kept to link later spans to it (a browser's join
/// span, linked from its delivery). Boxed: a connection holds an `Option<SpanLink>` for its
/// whole life, and with traces off that is one pointer-sized `None`, not a span context.
#[derive(Debug, Clone)]
pub struct SpanLink(Box<SpanContext>);

impl SpanLink {
    /// `span`'s reference; `None` when traces are off.
    pub fn of(span: &Span) -> Option<Self> {
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| Self(Box::new(sc)))
    }

    /// Links `span` to the span this refers to.
    pub fn add_to(&self, span: &Span) {
        span.add_link((*self.0).clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_traces_off_nothing_is_carried_or_kept() {
        let span = tracing::info_span!("join");
        assert!(traceparent(&span).is_none());
        assert!(SpanLink::of(&span).is_none());
        // A malformed context is ignored rather than failing the span.
        set_parent(&span, "not-a-traceparent");
        assert_eq!(
            std::mem::size_of::<Option<SpanLink>>(),
            std::mem::size_of::<usize>()
        );
    }
}
