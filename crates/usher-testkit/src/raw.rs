//! HTTP/1.x over a plain TCP socket, byte for byte: for tests of what a browser's HTTP stack
//! never sends (slow or malformed requests, HTTP/1.0, PROXY protocol headers) and of
//! connections from other loopback addresses (`127.0.0.x`, each a client address of its own).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Connects to `addr` from `local` (any port), or from the default address.
pub async fn connect_from(local: Option<IpAddr>, addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = local {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    socket.connect(addr).await
}

/// Connects and sends `request` whole.
pub async fn send(
    local: Option<IpAddr>,
    addr: SocketAddr,
    request: &[u8],
) -> anyhow::Result<TcpStream> {
    let mut sock = connect_from(local, addr).await?;
    sock.write_all(request).await?;
    Ok(sock)
}

/// A response as read off the socket.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    /// Lower-case names.
    pub headers: Vec<(String, String)>,
    /// The body as sent (a chunked body still has its chunk framing).
    pub body: Vec<u8>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).with_context(|| format!("not JSON: {}", self.text()))
    }
}

/// The end of a chunked body as the gateway writes it.
const LAST_CHUNK: &[u8] = b"\r\n0\r\n\r\n";

/// Reads one response within `timeout` (scaled by [`crate::wait::patience`]): its head, then its body — `content-length` bytes,
/// a chunked body up to its last chunk, or everything until the server closes. When `until`
/// appears in the body first (an event on a stream that stays open), stops there.
pub async fn read_response(
    sock: &mut TcpStream,
    until: Option<&[u8]>,
    timeout: Duration,
) -> anyhow::Result<Response> {
    crate::wait::within("a whole response", timeout, read(sock, until)).await?
}

async fn read(sock: &mut TcpStream, until: Option<&[u8]>) -> anyhow::Result<Response> {
    let mut buf = Vec::new();
    let (status, headers, head_len) = loop {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut res = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(n) = res.parse(&buf)? {
            let hs = res
                .headers
                .iter()
                .map(|h| {
                    (
                        h.name.to_ascii_lowercase(),
                        String::from_utf8_lossy(h.value).into_owned(),
                    )
                })
                .collect::<Vec<_>>();
            break (res.code.unwrap_or(0), hs, n);
        }
        if sock.read_buf(&mut buf).await? == 0 {
            anyhow::bail!("closed before a response head ({} bytes)", buf.len());
        }
    };
    let mut body = buf.split_off(head_len);
    let find =
        |h: &[(String, String)], n: &str| h.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    let length = find(&headers, "content-length").and_then(|v| v.trim().parse::<usize>().ok());
    let chunked = find(&headers, "transfer-encoding").is_some_and(|v| v.contains("chunked"));
    loop {
        let done = match length {
            Some(n) => body.len() >= n,
            None if chunked => body.ends_with(LAST_CHUNK) || body == b"0\r\n\r\n",
            None => false,
        };
        let seen = until.is_some_and(|u| body.windows(u.len()).any(|w| w == u));
        if done || seen {
            break;
        }
        if sock.read_buf(&mut body).await? == 0 {
            break;
        }
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

/// Whether the server closes (or resets) the connection within `timeout`, reading and
/// dropping anything it sends first.
pub async fn closed_within(sock: &mut TcpStream, timeout: Duration) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(timeout, async {
        loop {
            match sock.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}
