//! Tickets: what a browser holds for its place.
//!
//! A ticket is `<queue>.<place>.<mac>`: URL-safe (queue ids are `[A-Za-z0-9_-]`, places are
//! decimal, the MAC is unpadded base64url), readable in logs, and signed with HMAC-SHA256 under
//! the key all gateways share, so any gateway can check a ticket another one issued. It is the
//! SSE event id, so `EventSource` sends it back by itself as `Last-Event-ID` when it reconnects.
//!
//! [`TicketKey`], the key, lives here too: only gateways hold it.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;

use usher_core::ids::{PlaceId, QueueId};

/// Shortest accepted ticket key, in bytes.
pub const MIN_TICKET_KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum TicketKeyError {
    #[error("the ticket key must be at least {MIN_TICKET_KEY_LEN} bytes long (got {0})")]
    TooShort(usize),
}

/// The HMAC key every gateway shares to sign and check tickets. Its `Debug` never prints it.
#[derive(Clone)]
pub struct TicketKey(Vec<u8>);

impl TicketKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, TicketKeyError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_TICKET_KEY_LEN {
            return Err(TicketKeyError::TooShort(bytes.len()));
        }
        Ok(Self(bytes))
    }

    /// A fresh random key, hex encoded (64 characters) so it can be stored and configured as text.
    pub fn generate_hex() -> String {
        let mut b = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut b);
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TicketKey(<redacted>)")
    }
}

/// MAC bytes kept (128 bits).
const MAC_LEN: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TicketError {
    #[error("malformed ticket")]
    Malformed,
    #[error("ticket signature is not valid")]
    BadSignature,
    #[error("ticket belongs to another queue")]
    WrongQueue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket;

fn mac(key: &TicketKey, queue: &QueueId, place: PlaceId) -> Hmac<Sha256> {
    // `Hmac::new_from_slice` accepts keys of any length.
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key.as_bytes())
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    m.update(b"usher-ticket-v1\0");
    m.update(queue.as_str().as_bytes());
    m.update(b"\0");
    m.update(place.to_string().as_bytes());
    m
}

impl Ticket {
    /// The ticket string for `place` in `queue`.
    pub fn issue(key: &TicketKey, queue: &QueueId, place: PlaceId) -> String {
        let tag = mac(key, queue, place).finalize().into_bytes();
        format!(
            "{queue}.{place}.{}",
            URL_SAFE_NO_PAD.encode(&tag[..MAC_LEN])
        )
    }

    /// Checks `ticket` and returns the place it names in `queue`.
    pub fn verify(key: &TicketKey, queue: &QueueId, ticket: &str) -> Result<PlaceId, TicketError> {
        let (q, place, tag) = Self::split(ticket)?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| TicketError::Malformed)?;
        if tag.len() != MAC_LEN {
            return Err(TicketError::Malformed);
        }
        mac(key, &q, place)
            .verify_truncated_left(&tag)
            .map_err(|_| TicketError::BadSignature)?;
        if &q != queue {
            return Err(TicketError::WrongQueue);
        }
        Ok(place)
    }

    fn split(ticket: &str) -> Result<(QueueId, PlaceId, &str), TicketError> {
        let mut parts = ticket.rsplitn(3, '.');
        let tag = parts.next().ok_or(TicketError::Malformed)?;
        let place = parts.next().ok_or(TicketError::Malformed)?;
        let queue = parts.next().ok_or(TicketError::Malformed)?;
        let queue = QueueId::new(queue).map_err(|_| TicketError::Malformed)?;
        let place = place.parse().map_err(|_| TicketError::Malformed)?;
        Ok((queue, place, tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> TicketKey {
        TicketKey::new(vec![b; 32]).expect("32-byte key")
    }

    #[test]
    fn round_trip_and_rejections() {
        let q = QueueId::new("show-1").expect("valid");
        let other = QueueId::new("show-2").expect("valid");
        let t = Ticket::issue(&key(1), &q, PlaceId(77));
        assert!(t.starts_with("show-1.77."));
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)));
        assert_eq!(Ticket::verify(&key(1), &q, &t), Ok(PlaceId(77)));
        assert_eq!(
            Ticket::verify(&key(2), &q, &t),
            Err(TicketError::BadSignature)
        );
        assert_eq!(
            Ticket::verify(&key(1), &other, &t),
            Err(TicketError::WrongQueue)
        );
        let forged = t.replace("show-1.77.", "show-1.78.");
        assert_eq!(
            Ticket::verify(&key(1), &q, &forged),
            Err(TicketError::BadSignature)
        );
        for bad in [
            "",
            "abc",
            "show-1.x.AAAA",
            "show-1.77.!!",
            "show-1.77.AAAA",
            "...",
        ] {
            assert_eq!(
                Ticket::verify(&key(1), &q, bad),
                Err(TicketError::Malformed),
                "{bad}"
            );
        }
    }
}
