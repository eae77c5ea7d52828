//! A streaming parser for `text/event-stream` (the WHATWG "server-sent events" format), used by
//! the tests and the load generator to read usher's streams exactly as a browser would.

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Event {
    /// `event:` field; `message` when absent.
    pub event: String,
    pub data: String,
    /// The last event id seen on the stream so far (ids persist across events, as in browsers).
    pub id: String,
}

/// What [`Parser::push`] produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Event(Event),
    /// A `retry:` field (milliseconds).
    Retry(u64),
    /// A comment line (`: text`).
    Comment(String),
}

/// Feed bytes in any chunking; get complete items out.
#[derive(Debug, Default)]
pub struct Parser {
    buf: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    last_id: String,
    /// A `\r` ended the previous chunk: swallow a `\n` that starts the next one.
    pending_cr: bool,
}

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, bytes: &[u8]) -> Vec<Item> {
        let mut out = Vec::new();
        self.push_into(bytes, &mut out);
        out
    }

    /// [`Parser::push`] into a caller's vector. Complete lines are parsed straight from
    /// `bytes`; only a line still incomplete at the end is copied, to wait for the rest.
    pub fn push_into(&mut self, bytes: &[u8], out: &mut Vec<Item>) {
        let mut bytes = bytes;
        if self.pending_cr {
            self.pending_cr = false;
            if bytes.first() == Some(&b'\n') {
                bytes = &bytes[1..];
            }
        }
        while let Some(i) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            let (text, mut rest) = (&bytes[..i], &bytes[i + 1..]);
            if bytes[i] == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    Some(_) => {}
                    None => self.pending_cr = true,
                }
            }
            if self.buf.is_empty() {
                self.line(&String::from_utf8_lossy(text), out);
            } else {
                let mut buf = std::mem::take(&mut self.buf);
                buf.extend_from_slice(text);
                self.line(&String::from_utf8_lossy(&buf), out);
                buf.clear();
                self.buf = buf;
            }
            bytes = rest;
        }
        self.buf.extend_from_slice(bytes);
    }

    fn line(&mut self, line: &str, out: &mut Vec<Item>) {
        if line.is_empty() {
            if self.has_data {
                let mut data = std::mem::take(&mut self.data);
                if data.ends_with('\n') {
                    data.pop();
                }
                let event = std::mem::take(&mut self.event);
                out.push(Item::Event(Event {
                    event: if event.is_empty() {
                        "message".into()
                    } else {
                        event
                    },
                    data,
                    id: self.last_id.clone(),
                }));
            }
            self.event.clear();
            self.has_data = false;
            return;
        }
        if let Some(c) = line.strip_prefix(':') {
            out.push(Item::Comment(c.trim_start().to_owned()));
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event.clear();
                self.event.push_str(value);
            }
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "id" if !value.contains('\0') => {
                self.last_id.clear();
                self.last_id.push_str(value);
            }
            "retry" => {
                if let Ok(ms) = value.parse() {
                    out.push(Item::Retry(ms));
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_in_any_chunking() {
        let text = b"retry: 3000\n\n: keepalive\n\nevent: waiting\nid: t1\ndata: {\"a\":1}\n\r\nevent: admitted\r\ndata: x\r\ndata: y\r\n\r\n";
        for split in 1..text.len() {
            let mut p = Parser::new();
            let mut items = p.push(&text[..split]);
            items.extend(p.push(&text[split..]));
            assert_eq!(
                items,
                vec![
                    Item::Retry(3000),
                    Item::Comment("keepalive".into()),
                    Item::Event(Event {
                        event: "waiting".into(),
                        data: "{\"a\":1}".into(),
                        id: "t1".into()
                    }),
                    Item::Event(Event {
                        event: "admitted".into(),
                        data: "x\ny".into(),
                        id: "t1".into()
                    }),
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn bare_cr_line_ends_and_byte_at_a_time() {
        let text = b"event: a\rdata: 1\r\rdata: 2\n\r\n: c\r\n\n";
        let whole = Parser::new().push(text);
        assert_eq!(
            whole,
            vec![
                Item::Event(Event {
                    event: "a".into(),
                    data: "1".into(),
                    id: String::new()
                }),
                Item::Event(Event {
                    event: "message".into(),
                    data: "2".into(),
                    id: String::new()
                }),
                Item::Comment("c".into()),
            ]
        );
        let mut p = Parser::new();
        let mut items = Vec::new();
        for b in text.iter() {
            p.push_into(std::slice::from_ref(b), &mut items);
        }
        assert_eq!(items, whole);
    }
}
