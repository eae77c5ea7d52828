//! The event `usher-floor` writes: an `admitted`-sized SSE frame in HTTP chunked framing, its
//! burst and send time carried in the event id.

/// The SSE frame of burst `burst` started at `t0_us` (both in its id, `<burst>.<t0_us>`),
/// padded to `size` bytes (not padded when it is already that long).
pub fn frame(burst: u32, t0_us: u64, size: usize) -> Vec<u8> {
    let head = format!("event: admitted\nid: {burst}.{t0_us}\ndata: {{\"pad\":\"");
    let tail = "\"}\n\n";
    let pad = size.saturating_sub(head.len() + tail.len());
    let mut out = Vec::with_capacity(head.len() + pad + tail.len());
    out.extend_from_slice(head.as_bytes());
    out.resize(out.len() + pad, b'x');
    out.extend_from_slice(tail.as_bytes());
    out
}

/// `frame` in HTTP chunked framing: `<hex len>\r\n<frame>\r\n`.
pub fn chunk(burst: u32, t0_us: u64, size: usize) -> Vec<u8> {
    let f = frame(burst, t0_us, size);
    let mut out = format!("{:x}\r\n", f.len()).into_bytes();
    out.extend_from_slice(&f);
    out.extend_from_slice(b"\r\n");
    out
}

/// `(burst, t0_us)` from an event id `<burst>.<t0_us>`.
pub fn stamp(id: &str) -> Option<(u32, u64)> {
    let (burst, t0) = id.split_once('.')?;
    Some((burst.parse().ok()?, t0.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use usher_loadgen::http::{BodyDecoder, Framing};
    use usher_sse::Item;

    #[test]
    fn chunks_round_trip() {
        let c = chunk(3, 1_700_000_000_123_456, 600);
        assert_eq!(frame(3, 1, 600).len(), 600);
        assert_eq!(c.len(), 3 + 2 + 600 + 2);
        let (mut body, mut sse) = (
            BodyDecoder::new(&Framing::Chunked),
            usher_sse::Parser::new(),
        );
        let mut items = Vec::new();
        // In two pieces, as a read may return them.
        for piece in [&c[..100], &c[100..]] {
            body.decode(piece, &mut |p| sse.push_into(p, &mut items))
                .expect("a valid chunk");
        }
        let [Item::Event(e)] = items.as_slice() else {
            panic!("one event: {items:?}")
        };
        assert_eq!(stamp(&e.id), Some((3, 1_700_000_000_123_456)));
        assert_eq!(stamp("25"), None);
        assert!(BodyDecoder::new(&Framing::Chunked)
            .decode(b"zz\r\n", &mut |_| {})
            .is_err());
    }
}
