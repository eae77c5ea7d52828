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

/// One dispatched event, borrowed from the parser: valid until the next byte is pushed. What
/// [`Parser::push_with`] hands out, so a reader that looks at each event once (the load
/// generator) copies nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EventRef<'a> {
    /// `event:` field; `message` when absent.
    pub event: &'a str,
    pub data: &'a str,
    /// The last event id seen on the stream so far.
    pub id: &'a str,
}

impl EventRef<'_> {
    /// An owned copy.
    pub fn to_event(&self) -> Event {
        Event {
            event: self.event.to_owned(),
            data: self.data.to_owned(),
            id: self.id.to_owned(),
        }
    }
}

/// What [`Parser::push_with`] produced: an [`Item`] borrowed from the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemRef<'a> {
    Event(EventRef<'a>),
    /// A `retry:` field (milliseconds).
    Retry(u64),
    /// A comment line (`: text`), without the colon and leading spaces.
    Comment(&'a str),
}

impl ItemRef<'_> {
    /// An owned copy.
    pub fn to_item(&self) -> Item {
        match *self {
            ItemRef::Event(e) => Item::Event(e.to_event()),
            ItemRef::Retry(ms) => Item::Retry(ms),
            ItemRef::Comment(c) => Item::Comment(c.to_owned()),
        }
    }
}

/// Feed bytes in any chunking; get complete items out.
///
/// The field buffers (`event`, `data`, the last id) are kept and cleared between events, not
/// handed out, so a long stream allocates nothing per event once they have grown to its
/// largest event (see [`Parser::push_with`]).
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

    /// [`Parser::push`] into a caller's vector.
    pub fn push_into(&mut self, bytes: &[u8], out: &mut Vec<Item>) {
        self.push_with(bytes, &mut |item| out.push(item.to_item()));
    }

    /// Parses `bytes` and calls `f` with each complete item, borrowed from the parser (copy
    /// what outlives the call). Complete lines are parsed straight from `bytes`; only a line
    /// still incomplete at the end is copied, to wait for the rest. An event whose data is one
    /// `data:` line, ended in the same `bytes` (the usual event: one write of the server's),
    /// hands out that line where it lies: its data is copied nowhere, however large.
    pub fn push_with(&mut self, bytes: &[u8], f: &mut impl FnMut(ItemRef<'_>)) {
        let mut bytes = bytes;
        if self.pending_cr {
            self.pending_cr = false;
            if bytes.first() == Some(&b'\n') {
                bytes = &bytes[1..];
            }
        }
        // The current event's one data line, while it is its only one, borrowed from `bytes`.
        let mut lone: Option<&str> = None;
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
                match text_of(text) {
                    std::borrow::Cow::Borrowed(line) => self.borrowed_line(line, &mut lone, f),
                    owned => {
                        self.keep_lone(&mut lone);
                        self.line(&owned, f);
                    }
                }
            } else {
                self.keep_lone(&mut lone);
                let mut buf = std::mem::take(&mut self.buf);
                buf.extend_from_slice(text);
                self.line(&text_of(&buf), f);
                buf.clear();
                self.buf = buf;
            }
            bytes = rest;
        }
        // The event goes on in the next chunk: its data line is kept like any other.
        self.keep_lone(&mut lone);
        self.buf.extend_from_slice(bytes);
    }

    /// A complete line borrowed from the chunk being parsed: a first `data:` line is held as
    /// `lone` rather than copied, and the blank line after it hands the event out with it.
    fn borrowed_line<'b>(
        &mut self,
        line: &'b str,
        lone: &mut Option<&'b str>,
        f: &mut impl FnMut(ItemRef<'_>),
    ) {
        if line.is_empty() {
            if let Some(data) = lone.take() {
                self.hand_out(data, f);
                return;
            }
        } else if let Some(value) = data_value(line) {
            if !self.has_data {
                *lone = Some(value);
                self.has_data = true;
                return;
            }
            // A second data line: the first one joins the copied data before it.
            self.keep_lone(lone);
        }
        self.line(line, f);
    }

    /// Hands out the event being read, with `data`, and starts the next one (its `event`
    /// name and `has_data` reset; the caller keeps or clears the data buffer).
    fn hand_out(&mut self, data: &str, f: &mut impl FnMut(ItemRef<'_>)) {
        f(ItemRef::Event(EventRef {
            event: if self.event.is_empty() {
                "message"
            } else {
                &self.event
            },
            data,
            id: &self.last_id,
        }));
        self.event.clear();
        self.has_data = false;
    }

    /// Copies a held `lone` data line into the event's data, as any data line is kept.
    fn keep_lone(&mut self, lone: &mut Option<&str>) {
        if let Some(value) = lone.take() {
            self.data.push_str(value);
            self.data.push('\n');
        }
    }

    fn line(&mut self, line: &str, f: &mut impl FnMut(ItemRef<'_>)) {
        if line.is_empty() {
            if self.has_data {
                let data = std::mem::take(&mut self.data);
                self.hand_out(data.strip_suffix('\n').unwrap_or(&data), f);
                // The buffer is kept for the next event (cleared).
                self.data = data;
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return;
        }
        if let Some(c) = line.strip_prefix(':') {
            f(ItemRef::Comment(c.trim_start()));
            return;
        }
        let (field, value) = field_of(line);
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
                    f(ItemRef::Retry(ms));
                }
            }
            _ => {}
        }
    }
}

/// A field line's name and value: before the first `:` and after it, one leading space
/// dropped; a line without `:` is a name with an empty value.
fn field_of(line: &str) -> (&str, &str) {
    match line.split_once(':') {
        Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
        None => (line, ""),
    }
}

/// The value of a `data` field line (what [`Parser::line`] appends to the data), or `None` for
/// any other line.
fn data_value(line: &str) -> Option<&str> {
    let (field, value) = field_of(line);
    (field == "data").then_some(value)
}

/// A line as text: borrowed when it is valid UTF-8 (the usual case, checked by the fast
/// `from_utf8`), invalid sequences replaced by U+FFFD otherwise, as a browser decodes.
fn text_of(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
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

    /// However the stream is cut (in two anywhere, or a byte at a time), and whether an
    /// event's one data line is handed out where it lies or copied, the items are the same:
    /// one data line, several, an empty one, a bare `data`, one split over two chunks, events
    /// between comments and other fields, and an event left open at the end.
    #[test]
    fn a_lone_data_line_borrowed_or_copied_reads_the_same() {
        let text = b"data: one\n\nevent: e\ndata\n\ndata:\n\ndata:  two spaces\nid: i\n\n\
            data: a\n: comment between\ndata: b\n\nid: j\ndata: {\"big\":\"xxxxxxxxxxxxxxxx\"}\n\n\
            event: x\nretry: 5\ndata: last\n\ndata: open";
        let expected = [
            ("message", "one", ""),
            ("e", "", ""),
            ("message", "", ""),
            ("message", " two spaces", "i"),
            ("message", "a\nb", "i"),
            ("message", "{\"big\":\"xxxxxxxxxxxxxxxx\"}", "j"),
            ("x", "last", "j"),
        ];
        let events = |items: &[Item]| -> Vec<(String, String, String)> {
            items
                .iter()
                .filter_map(|i| match i {
                    Item::Event(e) => Some((e.event.clone(), e.data.clone(), e.id.clone())),
                    _ => None,
                })
                .collect()
        };
        let want: Vec<_> = expected
            .iter()
            .map(|(e, d, i)| (e.to_string(), d.to_string(), i.to_string()))
            .collect();
        let whole = Parser::new().push(text);
        assert_eq!(events(&whole), want);
        assert!(whole.contains(&Item::Retry(5)));
        for split in 1..text.len() {
            let mut p = Parser::new();
            let mut items = p.push(&text[..split]);
            items.extend(p.push(&text[split..]));
            assert_eq!(items, whole, "split at {split}");
            // The open event completes with the rest of it.
            let mut last = Vec::new();
            p.push_into(b" end\n\n", &mut last);
            assert_eq!(
                events(&last),
                vec![("message".into(), "open end".into(), "j".into())]
            );
        }
        let mut p = Parser::new();
        let mut items = Vec::new();
        for b in text.iter() {
            p.push_into(std::slice::from_ref(b), &mut items);
        }
        assert_eq!(items, whole);
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

    #[test]
    fn borrowed_items_match_the_owned_ones_event_after_event() {
        let text =
            b"retry: 10\n\nevent: waiting\nid: t1\ndata: {\"p\":2}\n\n: hi\n\ndata: a\ndata: b\n\n";
        let mut p = Parser::new();
        let mut borrowed = Vec::new();
        // Twice over one parser: the second stream's events reuse the first one's buffers and
        // must not keep anything of them (the `event:` name above all).
        for _ in 0..2 {
            p.push_with(text, &mut |item| borrowed.push(item.to_item()));
        }
        let once = Parser::new().push(text);
        assert_eq!(borrowed.len(), 2 * once.len());
        assert_eq!(borrowed[..once.len()], once[..]);
        assert_eq!(
            borrowed[once.len()..]
                .iter()
                .filter_map(|i| match i {
                    Item::Event(e) => Some((e.event.as_str(), e.data.as_str(), e.id.as_str())),
                    _ => None,
                })
                .collect::<Vec<_>>(),
            vec![("waiting", "{\"p\":2}", "t1"), ("message", "a\nb", "t1")]
        );
    }
}
