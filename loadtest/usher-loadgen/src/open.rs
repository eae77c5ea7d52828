//! Opening a stream: the TCP connection from a source address, the request, and the response
//! head; and [`read_with`], how every read of a worker goes through one buffer.

use std::net::{IpAddr, SocketAddr};

use std::cell::RefCell;
use std::pin::Pin;
use std::task::Poll;

use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

use crate::http::{self, Head};
use crate::plan::Gateway;

/// The step at which opening a stream failed (counted as an error of that kind).
#[derive(Debug)]
pub enum OpenError {
    Socket,
    Bind,
    Connect,
    Io,
    Eof,
    Http,
}

impl OpenError {
    pub fn kind(&self) -> &'static str {
        match self {
            OpenError::Socket => "socket",
            OpenError::Bind => "bind",
            OpenError::Connect => "connect",
            OpenError::Io => "io",
            OpenError::Eof => "eof_before_head",
            OpenError::Http => "parse",
        }
    }
}

/// A TCP connection to `target` with `TCP_NODELAY`, from `source` when given (bound first, so
/// every source address brings its own ephemeral ports). For senders of several small writes
/// (`usher-floor`); a stream's browser side uses [`dial`].
pub async fn connect(target: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, OpenError> {
    let stream = dial(target, source).await?;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// [`connect`] without `TCP_NODELAY`: a browser's stream connection sends one request and
/// then only reads, and Nagle's algorithm never holds back a connection's first write (it
/// only waits while earlier data is unacknowledged), so the option would change nothing on
/// the wire and cost a system call per join.
pub async fn dial(target: SocketAddr, source: Option<IpAddr>) -> Result<TcpStream, OpenError> {
    let sock = if target.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|_| OpenError::Socket)?;
    if let Some(ip) = source {
        sock.bind(SocketAddr::new(ip, 0))
            .map_err(|_| OpenError::Bind)?;
    }
    sock.connect(target).await.map_err(|_| OpenError::Connect)
}

/// An open stream: the connection, its response head, and the body bytes that came with the
/// head.
pub struct Opened {
    pub stream: TcpStream,
    pub head: Head,
    pub body: Vec<u8>,
}

/// Connects to `gw` from `source`, sends the request for `path` (with `?pow=` when a solution
/// is given and no ticket) and reads the response head. A head that came in one read (the
/// usual case) is parsed in the scratch buffer; only one split over reads is gathered.
pub async fn open(
    path: &str,
    gw: &Gateway,
    source: Option<IpAddr>,
    ticket: Option<&str>,
    pow: Option<&str>,
) -> Result<Opened, OpenError> {
    let mut stream = dial(gw.addr, source).await?;
    let req = match pow.filter(|_| ticket.is_none()) {
        Some(solution) => {
            let sep = if path.contains('?') { '&' } else { '?' };
            http::request(&format!("{path}{sep}pow={solution}"), &gw.host, ticket)
        }
        None => http::request(path, &gw.host, ticket),
    };
    stream.write_all(&req).await.map_err(|_| OpenError::Io)?;
    // The head so far, when it did not come whole in one read.
    let mut partial = Vec::new();
    loop {
        let step = read_with(&mut stream, |bytes| {
            if bytes.is_empty() {
                return Err(OpenError::Eof);
            }
            let whole = if partial.is_empty() {
                bytes
            } else {
                partial.extend_from_slice(bytes);
                &partial[..]
            };
            match http::parse_head(whole) {
                Ok(Some(head)) => {
                    let body = whole[head.len..].to_vec();
                    Ok(Some((head, body)))
                }
                Ok(None) => {
                    if partial.is_empty() {
                        partial.extend_from_slice(bytes);
                    }
                    Ok(None)
                }
                Err(_) => Err(OpenError::Http),
            }
        })
        .await
        .map_err(|_| OpenError::Io)??;
        if let Some((head, body)) = step {
            return Ok(Opened { stream, head, body });
        }
    }
}

/// Size of a worker thread's read buffer: a read takes what the socket has, up to this.
pub const SCRATCH: usize = 16 * 1024;

thread_local! {
    /// The thread's read buffer. Every connection of a worker reads into it and handles what
    /// it read before it yields (see [`read_with`]), so no connection keeps a buffer of its
    /// own between events (2 KiB each before), and the one buffer stays in the CPU's cache.
    static SCRATCH_BUF: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH].into_boxed_slice());
}

/// Waits until `stream` is readable, reads what it has into the thread's scratch buffer and
/// returns `f` of those bytes (empty at end of stream). `f` runs before the task yields, so
/// the buffer is never held across an `.await`; it must not call `read_with` itself.
pub async fn read_with<R>(
    stream: &mut TcpStream,
    mut f: impl FnMut(&[u8]) -> R,
) -> std::io::Result<R> {
    std::future::poll_fn(|cx| {
        SCRATCH_BUF.with_borrow_mut(|buf| {
            let mut rb = ReadBuf::new(buf);
            // `TcpStream::poll_read`: a read that fills less than the buffer marks the socket
            // not ready, so a quiet socket costs no second (empty) read.
            match Pin::new(&mut *stream).poll_read(cx, &mut rb) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => Poll::Ready(Ok(f(rb.filled()))),
            }
        })
    })
    .await
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;
    use crate::http::Framing;

    /// A head split over two writes is gathered; the body bytes that came with its end are
    /// returned with it; later reads go through the scratch buffer, and end of stream reads
    /// as no bytes.
    #[tokio::test]
    async fn a_head_split_over_reads_and_the_body_after_it() -> anyhow::Result<()> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let server = tokio::spawn(async move {
            let (mut sock, _) = listener.accept().await?;
            let mut req = vec![0u8; 1024];
            let n = sock.read(&mut req).await?;
            req.truncate(n);
            sock.write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/eve")
                .await?;
            sock.flush().await?;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            sock.write_all(b"nt-stream\r\n\r\nretry: 5\n\n").await?;
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            sock.write_all(b"data: x\n\n").await?;
            anyhow::Ok(req)
        });
        let gw = Gateway {
            url: format!("http://{addr}"),
            addr,
            host: addr.to_string(),
        };
        let mut o = open(
            "/api/queues/q/stream",
            &gw,
            None,
            Some("q.1.t"),
            Some("p.1"),
        )
        .await
        .map_err(|e| anyhow::anyhow!("open: {}", e.kind()))?;
        assert_eq!(o.head.status, 200);
        assert_eq!(o.head.framing, Framing::Close);
        assert_eq!(o.head.content_type.as_deref(), Some("text/event-stream"));
        assert_eq!(o.body, b"retry: 5\n\n");
        let next = read_with(&mut o.stream, <[u8]>::to_vec).await?;
        assert_eq!(next, b"data: x\n\n");
        let req = String::from_utf8(server.await??)?;
        // A reconnect carries its ticket and no proof of work.
        assert!(
            req.starts_with("GET /api/queues/q/stream HTTP/1.1\r\n"),
            "{req}"
        );
        assert!(req.contains("Last-Event-ID: q.1.t\r\n"), "{req}");
        assert_eq!(
            read_with(&mut o.stream, <[u8]>::len).await?,
            0,
            "end of stream"
        );
        Ok(())
    }
}
