//! Just enough HTTP/1.1 for one streaming GET per connection: the request bytes, the response
//! head (status line and headers, via `httparse`) and body framing (chunked, content-length or
//! close-delimited). No per-connection client object: a few hundred bytes of state.

/// Largest response head accepted.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest chunk-size line (with extensions) or trailer line accepted.
const MAX_LINE: usize = 1024;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HttpError {
    #[error("malformed response head: {0}")]
    Head(String),
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("malformed chunked body: {0}")]
    Chunked(&'static str),
}

/// `GET path HTTP/1.1` asking for an event stream.
pub fn request(path: &str, host: &str, last_event_id: Option<&str>) -> Vec<u8> {
    let mut r = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\
         Cache-Control: no-cache\r\nUser-Agent: usher-loadgen\r\n"
    );
    if let Some(id) = last_event_id {
        r.push_str("Last-Event-ID: ");
        r.push_str(id);
        r.push_str("\r\n");
    }
    r.push_str("\r\n");
    r.into_bytes()
}

/// How the body ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Framing {
    Chunked,
    Length(u64),
    /// Until the server closes the connection.
    Close,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    pub content_type: Option<String>,
    pub framing: Framing,
    /// Bytes of the head (the body starts after them).
    pub len: usize,
}

/// Parses a response head from the start of `buf`; `Ok(None)` when more bytes are needed.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut headers);
    let len = match resp.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(HttpError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(HttpError::Head(e.to_string())),
    };
    let status = resp
        .code
        .ok_or_else(|| HttpError::Head("no status code".into()))?;
    let mut content_type = None;
    let mut chunked = false;
    let mut length = None;
    for h in resp.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value
                .rsplit(',')
                .next()
                .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<u64>()
                    .map_err(|_| HttpError::Head(format!("bad content-length {value:?}")))?,
            );
        } else if h.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(value.to_ascii_lowercase());
        }
    }
    let framing = if chunked {
        Framing::Chunked
    } else if let Some(n) = length {
        Framing::Length(n)
    } else {
        Framing::Close
    };
    Ok(Some(Head {
        status,
        content_type,
        framing,
        len,
    }))
}

/// Turns framed body bytes into payload bytes, in any chunking of the input.
#[derive(Debug)]
pub struct BodyDecoder {
    state: State,
    line: Vec<u8>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Close-delimited: everything is payload.
    Close,
    /// This many payload bytes left (content-length).
    Length(u64),
    /// Reading a chunk-size line.
    Size,
    /// This many bytes of the current chunk left.
    Data(u64),
    /// Reading the CRLF after a chunk's data.
    DataEnd,
    /// After the last chunk: reading trailer lines until an empty one.
    Trailer,
    Done,
}

impl BodyDecoder {
    pub fn new(framing: &Framing) -> Self {
        let state = match framing {
            Framing::Chunked => State::Size,
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(*n),
            Framing::Close => State::Close,
        };
        Self {
            state,
            line: Vec::new(),
        }
    }

    /// The body is complete (last chunk or content-length reached). A close-delimited body
    /// is never complete: it ends when the connection does.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Feeds `input`; payload slices go to `out`. Bytes after the end of the body are ignored.
    pub fn decode(
        &mut self,
        mut input: &[u8],
        out: &mut impl FnMut(&[u8]),
    ) -> Result<(), HttpError> {
        while !input.is_empty() {
            match self.state {
                State::Done => return Ok(()),
                State::Close => {
                    out(input);
                    return Ok(());
                }
                State::Length(left) | State::Data(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(input.len());
                    out(&input[..n]);
                    input = &input[n..];
                    let left = left - n as u64;
                    self.state = match (self.state, left) {
                        (State::Length(_), 0) => State::Done,
                        (State::Length(_), l) => State::Length(l),
                        (_, 0) => State::DataEnd,
                        (_, l) => State::Data(l),
                    };
                }
                State::Size | State::DataEnd | State::Trailer => {
                    let Some(nl) = input.iter().position(|&b| b == b'\n') else {
                        self.push_line(input)?;
                        return Ok(());
                    };
                    // A line whole in `input` is read from there; only a line split across
                    // reads is gathered in `self.line`.
                    let next = if self.line.is_empty() {
                        if nl > MAX_LINE {
                            return Err(HttpError::Chunked("line too long"));
                        }
                        after_line(self.state, &input[..nl])?
                    } else {
                        self.push_line(&input[..nl])?;
                        let next = after_line(self.state, &self.line);
                        self.line.clear();
                        next?
                    };
                    self.state = next;
                    input = &input[nl + 1..];
                }
            }
        }
        Ok(())
    }

    fn push_line(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        if self.line.len() + bytes.len() > MAX_LINE {
            return Err(HttpError::Chunked("line too long"));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }
}

/// The state after a complete chunk-size, data-end or trailer line (without its `\n`).
fn after_line(state: State, line: &[u8]) -> Result<State, HttpError> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    Ok(match state {
        State::Size => match chunk_size(line)? {
            0 => State::Trailer,
            n => State::Data(n),
        },
        State::DataEnd if line.is_empty() => State::Size,
        State::DataEnd => return Err(HttpError::Chunked("no CRLF after data")),
        _ if line.is_empty() => State::Done,
        _ => State::Trailer,
    })
}

fn chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let hex = line.split(|&b| b == b';').next().unwrap_or(&[]);
    let hex = std::str::from_utf8(hex)
        .map_err(|_| HttpError::Chunked("chunk size is not text"))?
        .trim();
    if hex.is_empty() || hex.len() > 15 {
        return Err(HttpError::Chunked("bad chunk size"));
    }
    u64::from_str_radix(hex, 16).map_err(|_| HttpError::Chunked("bad chunk size"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(framing: Framing, body: &[u8], split: usize) -> (Vec<u8>, bool) {
        let mut d = BodyDecoder::new(&framing);
        let mut out = Vec::new();
        for part in [&body[..split], &body[split..]] {
            d.decode(part, &mut |b| out.extend_from_slice(b))
                .expect("valid body");
        }
        (out, d.is_done())
    }

    #[test]
    fn chunked_bodies_in_any_split() {
        let body =
            b"7\r\nretry: \r\n13;ext=1\r\n3000\n\nevent: x\ndata\r\n0\r\nX-T: 1\r\n\r\nGARBAGE";
        for split in 0..body.len() {
            let (out, done) = decode_all(Framing::Chunked, body, split);
            assert_eq!(out, b"retry: 3000\n\nevent: x\ndata", "split {split}");
            assert!(done);
        }
    }

    #[test]
    fn length_and_close_bodies() {
        assert_eq!(
            decode_all(Framing::Length(3), b"abcdef", 1),
            (b"abc".to_vec(), true)
        );
        assert_eq!(
            decode_all(Framing::Close, b"abcdef", 4),
            (b"abcdef".to_vec(), false)
        );
    }

    #[test]
    fn bad_chunks_are_errors() {
        let mut d = BodyDecoder::new(&Framing::Chunked);
        assert!(d.decode(b"zz\r\n", &mut |_| {}).is_err());
        let mut d = BodyDecoder::new(&Framing::Chunked);
        assert!(d.decode(b"2\r\nabX\r\n", &mut |_| {}).is_err());
        let mut d = BodyDecoder::new(&Framing::Chunked);
        assert!(d.decode(&[b'1'; 2000], &mut |_| {}).is_err());
        // The same long line whole in one read, and split over two.
        let mut long = vec![b'1'; 2000];
        long.extend_from_slice(b"\r\n");
        let mut d = BodyDecoder::new(&Framing::Chunked);
        assert_eq!(
            d.decode(&long, &mut |_| {}),
            Err(HttpError::Chunked("line too long"))
        );
        let mut d = BodyDecoder::new(&Framing::Chunked);
        assert!(d.decode(&long[..600], &mut |_| {}).is_ok());
        assert!(d.decode(&long[600..], &mut |_| {}).is_err());
    }

    #[test]
    fn heads() {
        let raw: &[u8] =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nX";
        let h = parse_head(raw).expect("valid").expect("complete");
        assert_eq!(h.status, 200);
        assert_eq!(h.framing, Framing::Chunked);
        assert_eq!(h.content_type.as_deref(), Some("text/event-stream"));
        assert_eq!(h.len, raw.len() - 1);
        assert_eq!(parse_head(b"HTTP/1.1 200 OK\r\n").expect("partial"), None);
        let h = parse_head(b"HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\n{}")
            .expect("valid")
            .expect("complete");
        assert_eq!((h.status, h.framing), (404, Framing::Length(2)));
        let h = parse_head(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n")
            .expect("valid")
            .expect("complete");
        assert_eq!(h.framing, Framing::Close);
        assert!(parse_head(b"NOT HTTP\r\n\r\n").is_err());
    }

    #[test]
    fn requests_carry_last_event_id() {
        let r = String::from_utf8(request("/a", "h:1", Some("q.1.m"))).expect("utf8");
        assert!(r.starts_with("GET /a HTTP/1.1\r\nHost: h:1\r\n"));
        assert!(r.contains("Accept: text/event-stream\r\n"));
        assert!(r.ends_with("Last-Event-ID: q.1.m\r\n\r\n"));
    }
}
