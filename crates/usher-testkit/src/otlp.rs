//! A tiny OTLP/HTTP trace receiver: a real listener on loopback that decodes the protobuf
//! export requests (`POST /v1/traces`) the binaries send when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! points at it, and keeps every span for the test to inspect, as a collector would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// One span received, with the `service.name` of the process that sent it.
#[derive(Debug, Clone)]
pub struct Received {
    pub service: String,
    pub span: Span,
}

impl Received {
    /// The span attribute `key` as text (strings as they are, numbers formatted).
    pub fn attr(&self, key: &str) -> Option<String> {
        attr(&self.span.attributes, key)
    }
}

fn attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    let v = attrs.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match v.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::DoubleValue(d) => Some(d.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

type Spans = Arc<Mutex<Vec<Received>>>;

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Spans,
    task: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let spans = Spans::default();
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(export))
            .with_state(spans.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { addr, spans, task })
    }

    /// The value for `OTEL_EXPORTER_OTLP_ENDPOINT` (the exporter appends `/v1/traces`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Received>> {
        self.spans.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.lock().clone()
    }

    /// Waits (see [`crate::wait::eventually`]) until `done` holds for the spans received
    /// (`what` says what it means); returns them.
    pub async fn wait_until(
        &self,
        what: &str,
        done: impl Fn(&[Received]) -> bool,
    ) -> anyhow::Result<Vec<Received>> {
        crate::wait::eventually(what, async || {
            let spans = self.spans();
            if done(&spans) {
                Ok(spans)
            } else {
                Err(crate::wait::Seen(
                    spans
                        .iter()
                        .map(|r| r.span.name.clone())
                        .collect::<Vec<_>>(),
                ))
            }
        })
        .await
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `POST /v1/traces`: an `ExportTraceServiceRequest` in protobuf; answered with an empty
/// `ExportTraceServiceResponse` (everything accepted), or 400 for a body that does not decode.
async fn export(State(spans): State<Spans>, body: Bytes) -> axum::response::Response {
    let Ok(req) = ExportTraceServiceRequest::decode(body) else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let mut out = spans.lock().unwrap_or_else(|p| p.into_inner());
    for rs in req.resource_spans {
        let service = rs
            .resource
            .as_ref()
            .and_then(|r| attr(&r.attributes, "service.name"))
            .unwrap_or_default();
        for ss in rs.scope_spans {
            out.extend(ss.spans.into_iter().map(|span| Received {
                service: service.clone(),
                span,
            }));
        }
    }
    (
        [("content-type", "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}
