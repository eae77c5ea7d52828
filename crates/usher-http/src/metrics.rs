//! Prometheus metrics, the same plumbing on every server: one recorder per process and the
//! `GET /metrics` route that renders it in the Prometheus text format.
//!
//! Each server names its own series in its own `metrics` module and records them with the
//! [`metrics`] facade macros; this module only installs the recorder those macros write to.
//! The recorder is global to the process and installed once ([`install`] may be called by
//! every server a process runs, as the tests do: they then share one registry). The exporter
//! has no HTTP listener of its own: the servers serve the rendering on their own port.

use std::sync::OnceLock;
use std::time::Duration;

use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use utoipa_axum::router::OpenApiRouter;

/// The `content-type` of the Prometheus text exposition format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// The buckets, in seconds, of every histogram whose name ends in `_seconds`: from 1 ms to 2 s,
/// the span of a tick and of a Redis call, from a healthy one to one near the tick's limit.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0,
];

/// The buckets, in seconds, of every histogram whose name starts with `usher_redis_`: from
/// 100 µs (a command on a healthy loopback Redis) to 5 s (the longest a blocking stream read
/// waits by design).
pub const REDIS_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// How often histogram samples recorded between two scrapes are folded into the buckets, so
/// a process nobody scrapes does not hold them all.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Installs the process's recorder (the first call does; later calls return the same handle).
/// The first call must be made inside a tokio runtime for the periodic upkeep to run.
pub fn install() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            // Only an empty bucket list is refused, and the lists above are not empty. A
            // prefix matcher is tried before a suffix matcher, so Redis latencies get theirs.
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Prefix("usher_redis_".into()), REDIS_BUCKETS)
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!(
                    "another metrics recorder was installed first; /metrics stays empty"
                );
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let h = handle.clone();
                rt.spawn(async move {
                    let mut every = tokio::time::interval(UPKEEP_EVERY);
                    loop {
                        every.tick().await;
                        h.run_upkeep();
                    }
                });
            }
            handle
        })
        .clone()
}

/// `GET /metrics`: the process's series in the Prometheus text format. `before` runs before
/// each rendering, to set the gauges that are read off the server's state at scrape time
/// rather than kept up to date on every change. Described in the server's API description
/// ([`crate::openapi`]).
pub fn metrics_routes<S, F>(before: F) -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn() + Clone + Send + Sync + 'static,
{
    let handle = install();
    OpenApiRouter::new().routes(crate::openapi::route::<
        crate::openapi::__path_metrics,
        _,
        _,
        _,
    >(move || {
        let handle = handle.clone();
        let before = before.clone();
        async move {
            before();
            ([("content-type", CONTENT_TYPE)], handle.render()).into_response()
        }
    }))
}
