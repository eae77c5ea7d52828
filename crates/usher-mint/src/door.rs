//! Door tokens: what a gateway hands a browser it lets through its open door while Redis is
//! unreachable (a queue's `on_outage: "open"`; `usher_core::door` tells the whole story).
//!
//! The dispatcher signs one per queue and window, ahead, with the same key as entry tokens,
//! so a booking service verifies it against the same JWKS. Claims: `aud` = the queue, `door`
//! = the window's start (seconds since the epoch), `nbf`/`exp` = the window widened by a small
//! skew (and `exp` by the session lifetime the dispatcher passes: [`DoorClaims::lasting`]), `iat`, `jti` = `<queue>.door.<window start>` and `sub` = `"door"`: a door token names
//! no place. It is a **bearer pass for its window**: every browser let through in that window
//! carries the same token, and it cannot be consumed once (there is no record to consume).

use serde::{Deserialize, Serialize};

use crate::token::SigningKey;

/// A door token's `sub`: no place.
pub const DOOR_SUBJECT: &str = "door";

/// The claims of a door token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoorClaims {
    /// Always [`DOOR_SUBJECT`].
    pub sub: String,
    /// The queue.
    pub aud: String,
    /// When it was signed (seconds since the epoch).
    pub iat: u64,
    /// The window's start less the skew (seconds since the epoch).
    pub nbf: u64,
    /// The window's end plus the skew (seconds since the epoch).
    pub exp: u64,
    /// `<queue>.door.<window start>`.
    pub jti: String,
    /// The window's start (seconds since the epoch): marks the token as a door token.
    pub door: u64,
}

impl DoorClaims {
    /// The claims of `queue`'s door token for the window `[from_s, until_s)`, signed at
    /// `iat_s`, accepted `skew_s` either side of the window.
    pub fn new(queue: &str, from_s: u64, until_s: u64, iat_s: u64, skew_s: u64) -> Self {
        Self {
            sub: DOOR_SUBJECT.to_owned(),
            aud: queue.to_owned(),
            iat: iat_s,
            nbf: from_s.saturating_sub(skew_s),
            exp: until_s + skew_s,
            jti: format!("{queue}.door.{from_s}"),
            door: from_s,
        }
    }

    /// The same claims good `session_s` longer: a browser let through at the end of the
    /// window still has a whole session to book in (the dispatcher passes the queue's token
    /// lifetime).
    pub fn lasting(mut self, session_s: u64) -> Self {
        self.exp += session_s;
        self
    }

    /// Whether the token is good at `now_s` (inside `nbf..exp`).
    pub fn within(&self, now_s: u64) -> bool {
        self.nbf <= now_s && now_s < self.exp
    }
}

impl SigningKey {
    /// Signs a door token.
    pub fn mint_door(&self, claims: &DoorClaims) -> String {
        self.mint(claims)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keyring::KeyRing;

    #[test]
    fn a_door_token_verifies_as_one_and_an_entry_token_does_not() {
        let key =
            SigningKey::from_pkcs8_pem(&SigningKey::generate_pem().expect("pem")).expect("key");
        let claims = DoorClaims::new("show", 600, 1200, 550, 30);
        assert!(claims.within(570) && claims.within(1229));
        assert!(!claims.within(569) && !claims.within(1230));
        // Lasting a session longer: a browser let through at 1199 has 300 s to book.
        let lasting = claims.clone().lasting(300);
        assert!(lasting.within(1529) && !lasting.within(1530));
        assert_eq!(lasting.nbf, claims.nbf);
        let ring = KeyRing::single(key.clone());
        let t = key.mint_door(&claims);
        assert_eq!(ring.verify_door(&t).expect("door"), claims);
        // Two ride in every `state` of an open-door queue: keep them small.
        let now = DoorClaims::new(
            "concert-2026",
            1_795_750_800,
            1_795_751_400,
            1_795_751_157,
            30,
        );
        assert!(
            key.mint_door(&now).len() < 400,
            "{}",
            key.mint_door(&now).len()
        );
        let entry = key.mint(&crate::token::Claims {
            sub: "4".into(),
            aud: "show".into(),
            iat: 1,
            exp: 2,
            jti: "show.4".into(),
        });
        assert!(ring.verify_door(&entry).is_err(), "no door claim");
    }
}
