//! Listening sockets and serving an axum router until shutdown, through hyper's HTTP/1.1
//! server with the limits of [`ServeLimits`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request};
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::limits::{body_deadline, ServeLimits};

/// Largest request head (and read buffer) accepted.
const MAX_HEAD: usize = 16 * 1024;
/// How long open connections get to finish after shutdown starts.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A write to a client that waits longer than this for the client to read ends the
/// connection: a client that stops reading must not hold a socket, and the answer waiting for
/// it, for as long as it acknowledges a zero window (no head or body deadline reaches a
/// connection blocked in a write). Each write has it, so a long answer to a slow reader is
/// not cut while it moves. The gateway's writes use it too.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `app` on `listener` until `shutdown` resolves; handlers can extract
/// `ConnectInfo<SocketAddr>`. Every error answer is JSON ([`crate::json_errors`]); request
/// heads and bodies have deadlines, writes [`WRITE_TIMEOUT`], and connections a cap
/// ([`ServeLimits`]).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ServeLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let body_timeout = limits.body_timeout();
    let app = app
        .layer(axum::middleware::from_fn(move |req: Request, next| {
            body_deadline(body_timeout, req, next)
        }))
        .layer(axum::middleware::from_fn(crate::json_errors));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout())
        .max_buf_size(MAX_HEAD);
    let graceful = GracefulShutdown::new();
    let open = Arc::new(AtomicU64::new(0));
    tokio::pin!(shutdown);
    loop {
        let (sock, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        if open.load(Ordering::Relaxed) >= limits.max_sockets {
            // Closed at once: the descriptor goes back, and the client sees a reset rather
            // than a connection that hangs.
            drop(sock);
            continue;
        }
        let counted = OpenConnection::new(&open);
        let app = app.clone();
        let service = TowerToHyperService::new(tower::service_fn(move |mut req: Request<_>| {
            req.extensions_mut().insert(ConnectInfo(peer));
            app.clone().oneshot(req.map(axum::body::Body::new))
        }));
        let mut io = tokio_io_timeout::TimeoutStream::new(sock);
        io.set_write_timeout(Some(WRITE_TIMEOUT));
        let conn = http.serve_connection(TokioIo::new(Box::pin(io)), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, %peer, "connection ended with an error");
            }
            drop(counted);
        });
    }
    drop(listener);
    if tokio::time::timeout(SHUTDOWN_GRACE, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the shutdown grace period");
    }
    Ok(())
}

/// Counts an open connection for as long as it lives.
struct OpenConnection(Arc<AtomicU64>);

impl OpenConnection {
    fn new(open: &Arc<AtomicU64>) -> Self {
        open.fetch_add(1, Ordering::Relaxed);
        Self(open.clone())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A client that asks for a long answer and reads none of it is cut off after
    /// [`WRITE_TIMEOUT`] (on the paused clock: the write blocks, the runtime idles, the clock
    /// moves on to the deadline): it then reads what the sockets held, and the end, never the
    /// whole answer.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_reads_nothing_is_cut_off_after_the_write_timeout(
    ) -> Result<(), Box<dyn std::error::Error>> {
        const LONG: usize = 64 * 1024 * 1024;
        let listener = listen("127.0.0.1:0".parse()?)?;
        let addr = listener.local_addr()?;
        let app = Router::new().route(
            "/long",
            axum::routing::get(|| async {
                let piece = axum::body::Bytes::from(vec![b'a'; 64 * 1024]);
                let pieces =
                    (0..LONG / piece.len()).map(move |_| Ok::<_, std::io::Error>(piece.clone()));
                axum::body::Body::from_stream(futures::stream::iter(pieces))
            }),
        );
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app, ServeLimits::default(), async move {
            let _ = stopped.await;
        }));
        let mut client = tokio::net::TcpStream::connect(addr).await?;
        client
            .write_all(b"GET /long HTTP/1.1\r\nhost: x\r\n\r\n")
            .await?;
        // Reads nothing for twice the deadline.
        tokio::time::sleep(2 * WRITE_TIMEOUT).await;
        let mut got = Vec::new();
        let read = tokio::time::timeout(WRITE_TIMEOUT, client.read_to_end(&mut got)).await;
        assert!(read.is_ok(), "the server still held the connection");
        assert!(
            got.starts_with(b"HTTP/1.1 200"),
            "{:?}",
            &got[..got.len().min(40)]
        );
        assert!(
            got.len() < LONG,
            "the whole answer arrived: no deadline cut it"
        );
        let _ = stop.send(());
        server.await??;
        Ok(())
    }

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
