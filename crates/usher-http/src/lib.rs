//! HTTP plumbing shared by usher's servers.

use std::future::Future;
use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Router;
use tokio::net::TcpListener;

/// An error answered as `{"error": "..."}` with a status code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
    pub fn bad_request(m: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, m)
    }
    pub fn not_found(m: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, m)
    }
    pub fn unauthorized(m: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, m)
    }
    /// Redis (or another dependency) failed: logged by the caller, answered as 503.
    pub fn unavailable(m: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

/// `/healthz` answers 200 while the process runs; `/readyz` answers 200 when `ready` says so
/// and 503 otherwise.
pub fn health_routes<S, F, Fut>(ready: F) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    F: Fn() -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = bool> + Send + 'static,
{
    Router::new()
        .route("/healthz", axum::routing::get(|| async { "ok\n" }))
        .route(
            "/readyz",
            axum::routing::get(move || {
                let ready = ready.clone();
                async move {
                    if ready().await {
                        (StatusCode::OK, "ready\n")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
                    }
                }
            }),
        )
}

/// Serves `app` on `listener` until `shutdown` resolves; handlers can extract
/// `ConnectInfo<SocketAddr>`.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown)
    .await
}

/// Binds a listener with a deep accept backlog (capped by the kernel's `somaxconn`): a sale's
/// opening minute brings thousands of connections per second, and the default backlog of 1024
/// would turn a burst into SYN retries, i.e. one-second stalls.
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    // Events are written whole and must leave at once: TCP_NODELAY. Accepted sockets inherit
    // it from the listener on Linux, one `setsockopt` less per connection (on other systems
    // the gateway sets it on each connection).
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(16_384)
}

/// The tokio runtime for a binary: `threads` worker threads (0 = one per core). One thread is
/// best when several usher processes share a few cores: no cross-thread wake-ups.
pub fn runtime(threads: usize) -> std::io::Result<tokio::runtime::Runtime> {
    if threads == 1 {
        return tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
    }
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if threads > 1 {
        b.worker_threads(threads);
    }
    b.enable_all().build()
}

/// Turns transparent huge pages off for this process (Linux; elsewhere a no-op).
///
/// mimalloc asks the kernel for huge pages, and the kernel zeroes a whole 2 MiB page on the
/// first touch of any byte in it, and again when a range mimalloc gave back is touched anew.
/// A gateway's memory churns with its connections: at 10,000 joins/s, zeroing huge pages
/// (`clear_page_erms`) took a quarter of the gateways' CPU time (BENCHMARKS.md). Call it in
/// `main` once logging is set up, before the runtime allocates; children inherit it. A
/// failure (an old kernel) is logged and otherwise ignored: huge pages cost time, not
/// correctness.
pub fn disable_transparent_huge_pages() {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    if let Err(e) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::info!(error = %e, "cannot turn transparent huge pages off for this process");
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
    tracing::info!("shutdown signal received");
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_inherit_nodelay() -> std::io::Result<()> {
        let listener = listen("127.0.0.1:0".parse().map_err(std::io::Error::other)?)?;
        let addr = listener.local_addr()?;
        let client = tokio::net::TcpStream::connect(addr).await?;
        let (accepted, _) = listener.accept().await?;
        assert!(!client.nodelay()?, "the client socket is untouched");
        if cfg!(target_os = "linux") {
            assert!(accepted.nodelay()?, "accepted sockets inherit TCP_NODELAY");
        }
        Ok(())
    }
}
