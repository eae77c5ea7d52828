//! Shared secrets: the gateways' ticket key.

use rand::RngCore;

/// Shortest accepted ticket key, in bytes.
pub const MIN_TICKET_KEY_LEN: usize = 32;

#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the ticket key must be at least {MIN_TICKET_KEY_LEN} bytes long (got {0})")]
    TooShort(usize),
}

/// The HMAC key every gateway shares to sign and check tickets. Its `Debug` never prints it.
#[derive(Clone)]
pub struct TicketKey(Vec<u8>);

impl TicketKey {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, SecretError> {
        let bytes = bytes.into();
        if bytes.len() < MIN_TICKET_KEY_LEN {
            return Err(SecretError::TooShort(bytes.len()));
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
