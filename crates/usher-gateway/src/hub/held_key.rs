//! The browser key a held place was proven with, on a queue that binds places to the browser
//! (`bind: "browser_key"`). Redis keeps each place's key in `bound`; a Redis data loss takes
//! it with the place, and the gateway holding the browser puts both back together
//! (`Store::restore_places_bound`), so it keeps the key of every place it holds.
//!
//! Kept raw (the 32 bytes of the SHA-256 thumbprint, not its 43 base64url characters) and
//! boxed: a slot of a queue that binds nothing pays one null pointer (8 bytes), a bound one 32
//! bytes more on the heap, against the ~4.5 KiB a held stream costs.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use usher_core::binding::Thumbprint;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HeldKey(Box<[u8; 32]>);

impl HeldKey {
    /// The raw form of `t` (`None` for a thumbprint that is not a base64url SHA-256).
    pub(super) fn of(t: &Thumbprint) -> Option<Self> {
        let raw: [u8; 32] = URL_SAFE_NO_PAD.decode(t.as_str()).ok()?.try_into().ok()?;
        Some(Self(Box::new(raw)))
    }

    /// The thumbprint as Redis and the tokens' `cnf.jkt` spell it.
    pub(super) fn thumbprint(&self) -> Option<Thumbprint> {
        Thumbprint::parse(&URL_SAFE_NO_PAD.encode(&self.0[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thumbprint_round_trips_through_its_raw_bytes() {
        // RFC 7638's example thumbprint.
        let t = Thumbprint::parse("NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs").expect("valid");
        let held = HeldKey::of(&t).expect("a SHA-256 thumbprint");
        assert_eq!(held.thumbprint(), Some(t));
        assert_eq!(
            std::mem::size_of::<Option<HeldKey>>(),
            8,
            "one pointer per slot"
        );
    }
}
