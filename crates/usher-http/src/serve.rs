//! Listening sockets and serving an axum router until shutdown.

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use tokio::net::TcpListener;

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

#[cfg(test)]
mod tests {
    use super::listen;

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
