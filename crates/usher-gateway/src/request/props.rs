//! Property tests: arbitrary and mutated request bytes, and arbitrary tickets, never panic the
//! request-head parser or the ticket parser, every answer they lead to is a well-formed
//! HTTP response (parsed back with `httparse`), and a head read in pieces is the head parsed
//! whole.

use crate::ticket::Ticket;
use crate::ticket::TicketKey;
use proptest::prelude::*;
use usher_core::ids::{PlaceId, QueueId};
use usher_http::ApiError;

use super::*;

/// Requests a browser or a client of the API sends, to mutate.
const VALID: &[&[u8]] = &[
    b"GET /api/queues/q1/stream HTTP/1.1\r\nhost: x\r\naccept: text/event-stream\r\n\r\n",
    b"GET /api/queues/q1/stream?ticket=q1.5.abc HTTP/1.1\r\nhost: x\r\nlast-event-id: q1.5.abc\r\n\r\n",
    b"GET /api/queues/q1/stream HTTP/1.0\r\n\r\n",
    b"GET /api/queues/q1/status?ticket=a%2Eb HTTP/1.1\r\nconnection: close\r\n\r\n",
    b"DELETE /api/queues/q1/tickets/t HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}",
    b"POST /x HTTP/1.1\r\ncontent-length: 5\r\nx-forwarded-for: 1.2.3.4, 5.6.7.8\r\n\r\nhello",
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Truncate(usize),
    /// Repeats the header line at this line index.
    DuplicateLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (
            any::<usize>(),
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 1..16),
                Just(b"\r\ncontent-length: 9".to_vec()),
                Just(b"\r\ntransfer-encoding: chunked".to_vec()),
                Just(b"\r\nlast-event-id: \xff".to_vec()),
                Just(b"\r\n\r\n".to_vec()),
                Just(b"%".to_vec()),
            ]
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        (any::<usize>(), 1usize..8).prop_map(|(i, n)| Mutation::Delete(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::DuplicateLine),
    ]
}

fn apply(mut bytes: Vec<u8>, m: &Mutation) -> Vec<u8> {
    let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
    match m {
        Mutation::Flip(i, b) if !bytes.is_empty() => {
            let n = bytes.len();
            bytes[i % n] ^= b;
        }
        Mutation::Flip(..) => {}
        Mutation::Insert(i, v) => {
            let i = at(*i, bytes.len());
            bytes.splice(i..i, v.iter().copied());
        }
        Mutation::Delete(i, n) => {
            let i = at(*i, bytes.len()).min(bytes.len());
            let end = (i + n).min(bytes.len());
            bytes.drain(i..end);
        }
        Mutation::Truncate(i) => bytes.truncate(at(*i, bytes.len())),
        Mutation::DuplicateLine(i) => {
            let lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
            if lines.len() > 2 {
                let k = 1 + i % (lines.len() - 2);
                let mut out = Vec::with_capacity(bytes.len() * 2);
                for (j, l) in lines.iter().enumerate() {
                    if j > 0 {
                        out.push(b'\n');
                    }
                    out.extend_from_slice(l);
                    if j == k {
                        out.push(b'\n');
                        out.extend_from_slice(l);
                    }
                }
                bytes = out;
            }
        }
    }
    bytes
}

/// `bytes` is one complete HTTP/1.1 response with the given status, whose body is as long as
/// its `content-length` says and is a JSON object with an `error` string.
fn assert_json_error(bytes: &[u8], status: u16) -> Result<(), TestCaseError> {
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut res = httparse::Response::new(&mut headers);
    let parsed = res.parse(bytes);
    let Ok(httparse::Status::Complete(n)) = parsed else {
        return Err(TestCaseError::fail(format!(
            "not a complete response: {parsed:?}"
        )));
    };
    prop_assert_eq!(res.code, Some(status));
    let length = res
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.parse::<usize>().ok());
    prop_assert_eq!(length, Some(bytes.len() - n));
    let v: serde_json::Value = serde_json::from_slice(&bytes[n..])
        .map_err(|e| TestCaseError::fail(format!("body is not JSON: {e}")))?;
    prop_assert!(v["error"].is_string(), "{v}");
    Ok(())
}

/// What the server answers a head that `parse` refused, or checks on one it accepted.
fn check(bytes: &[u8]) -> Result<(), TestCaseError> {
    match parse(bytes) {
        Err(e) => {
            prop_assert!(e.status.is_client_error(), "{:?}", e.status);
            assert_json_error(&error_bytes(&e, None, false), e.status.as_u16())?;
            assert_json_error(&error_bytes(&e, Some(5), true), e.status.as_u16())?;
        }
        Ok(Parsed::Partial) => prop_assert!(bytes.len() < MAX_HEAD),
        Ok(Parsed::Complete(h)) => {
            prop_assert!(h.head_len <= bytes.len());
            prop_assert_eq!(h.content_length, 0);
            prop_assert!(h.minor_version <= 1);
            if let Some((queue, query)) = stream_target(&h.target) {
                let _ = percent_decode(queue);
                if let Err(e) = ticket_param(query) {
                    assert_json_error(&error_bytes(&e, None, false), 400)?;
                }
            }
        }
    }
    Ok(())
}

fn key() -> TicketKey {
    TicketKey::new(b"a test ticket key of at least 32 bytes".to_vec()).expect("a key")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(3000))]

    #[test]
    fn arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..1024)) {
        check(&bytes)?;
    }

    #[test]
    fn arbitrary_text_heads(text in "[A-Z]{0,7} [ -~]{0,40} HTTP/1\\.[0-9]\r\n([a-zA-Z-]{1,12}: [ -~]{0,20}\r\n){0,6}\r\n") {
        check(text.as_bytes())?;
    }

    #[test]
    fn mutated_requests(
        which in 0..VALID.len(),
        mutations in proptest::collection::vec(mutation(), 1..6),
    ) {
        let bytes = mutations.iter().fold(VALID[which].to_vec(), apply);
        check(&bytes)?;
    }

    /// However reads split a request, [`HeadReader`] ends where parsing the whole bytes
    /// would: the same head, or an error of the same status; still waiting only where the
    /// whole bytes hold no complete head.
    #[test]
    fn a_head_read_in_pieces_is_the_head_parsed_whole(
        which in 0..VALID.len(),
        mutations in proptest::collection::vec(mutation(), 0..4),
        cuts in proptest::collection::vec(1usize..64, 1..12),
    ) {
        let bytes = mutations.iter().fold(VALID[which].to_vec(), apply);
        let whole = parse(&bytes);
        let mut reader = HeadReader::default();
        let mut end = 0;
        let mut cuts = cuts.into_iter().cycle();
        let pieces = loop {
            end = (end + cuts.next().unwrap_or(1)).min(bytes.len());
            match reader.feed(&bytes[..end]) {
                Ok(Parsed::Partial) if end < bytes.len() => {}
                outcome => break outcome,
            }
        };
        match (pieces, whole) {
            (Ok(Parsed::Complete(a)), Ok(Parsed::Complete(b))) => prop_assert_eq!(a, b),
            (Err(a), Err(b)) => prop_assert_eq!(a.status, b.status),
            (Ok(Parsed::Partial), w) => prop_assert!(!matches!(w, Ok(Parsed::Complete(_))), "{w:?}"),
            (p, w) => prop_assert!(false, "in pieces {p:?}, whole {w:?}"),
        }
    }

    #[test]
    fn tickets(raw in "[ -~]{0,80}", place in any::<u64>(), cut in any::<usize>(), flip in any::<u8>()) {
        let q = QueueId::new("q1").map_err(|e| TestCaseError::fail(e.to_string()))?;
        let key = key();
        // Arbitrary text: refused with a 400, never a panic.
        let answer = Ticket::verify(&key, &q, &raw).map_err(|e| ApiError::bad_request(e.to_string()));
        if let Err(e) = answer {
            assert_json_error(&error_bytes(&e, None, false), 400)?;
        }
        let _ = ticket_param(&raw);
        // A genuine ticket, mutated: the same place or a refusal.
        let genuine = Ticket::issue(&key, &q, PlaceId(place));
        let mut bytes = genuine.clone().into_bytes();
        if !bytes.is_empty() {
            let i = cut % bytes.len();
            bytes[i] ^= flip;
        }
        let mutated = String::from_utf8_lossy(&bytes).into_owned();
        match Ticket::verify(&key, &q, &mutated) {
            Ok(p) => prop_assert_eq!(p, PlaceId(place)),
            Err(e) => assert_json_error(&error_bytes(&ApiError::bad_request(e.to_string()), None, false), 400)?,
        }
        prop_assert_eq!(Ticket::verify(&key, &q, &genuine).ok(), Some(PlaceId(place)));
    }
}
