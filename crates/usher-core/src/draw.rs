//! The draw of a scheduled sale: its seed, the commitment published before anyone joins, each
//! entrant's public hash, and the order the draw places entrants in.
//!
//! The rule, byte for byte (docs/policies.md, "Scheduled sale and the draw", shows it in Python):
//! * the seed is 32 random bytes; `commitment` = lowercase hex of SHA-256(seed bytes);
//! * an entrant's hash = lowercase hex of SHA-256(the ticket string, UTF-8), 64 characters;
//! * each entrant's key = HMAC-SHA256(key = the 32 seed bytes, message = its hash as the 64
//!   ASCII bytes of its lowercase hex); with a public randomness beacon (a drand round named
//!   in advance), the HMAC key is the seed bytes followed by the beacon's bytes;
//! * entrants are placed in ascending order of their keys compared as bytes (ties, which
//!   need a SHA-256 collision, fall back to the hashes' order);
//! * in two groups: first the entrants whose browsers were there when the draw began, then
//!   those whose browsers had gone away ([`Presence`]), each group in the order above. A
//!   pre-queue stuffed with joins that then hang up lands behind every real browser.
//!
//! A ticket is a bearer credential for its place, so only its hash is ever published.

use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Bytes in a draw seed.
pub const SEED_LEN: usize = 32;

/// A draw's secret seed, fixed when the sale is scheduled and revealed at the draw.
#[derive(Clone, PartialEq, Eq)]
pub struct Seed([u8; SEED_LEN]);

impl Seed {
    /// A fresh random seed (the operating system's generator).
    pub fn generate() -> Self {
        let mut b = [0u8; SEED_LEN];
        rand::rngs::OsRng.fill_bytes(&mut b);
        Self(b)
    }

    /// A seed from its lowercase or uppercase hex; `None` unless it is 32 bytes of hex.
    pub fn from_hex(s: &str) -> Option<Self> {
        let mut b = [0u8; SEED_LEN];
        hex::decode_to_slice(s, &mut b).ok()?;
        Some(Self(b))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Lowercase hex of SHA-256 of the seed's bytes: published as soon as the sale is
    /// scheduled, so the seed cannot be changed once anyone joined.
    pub fn commitment(&self) -> String {
        hex::encode(Sha256::digest(self.0))
    }

    /// `entrants` in drawn order (each with whatever the caller keeps beside its hash), with
    /// the bytes of a public randomness `beacon` mixed in when the sale names one.
    pub fn order<T>(
        &self,
        beacon: Option<&[u8]>,
        entrants: Vec<(EntrantHash, T)>,
    ) -> Vec<(EntrantHash, T)> {
        self.order_after(beacon, entrants, None)
    }

    /// Like [`Seed::order`], keeping only the entrants drawn after `after` (the last entrant a
    /// draw interrupted half-way recorded): the rest of the order, so the record stays in
    /// drawn order when another replica finishes the draw. Entrants that would come before
    /// `after` (they joined after the interrupted read) are left out; the draw puts them FIFO
    /// behind the drawn ones, as it does every entrant its read missed.
    pub fn order_after<T>(
        &self,
        beacon: Option<&[u8]>,
        entrants: Vec<(EntrantHash, T)>,
        after: Option<&EntrantHash>,
    ) -> Vec<(EntrantHash, T)> {
        let mut key = self.0.to_vec();
        key.extend_from_slice(beacon.unwrap_or_default());
        let after = after.map(|h| (sort_key(&key, h), *h));
        let mut keyed: Vec<_> = entrants
            .into_iter()
            .map(|(h, t)| (sort_key(&key, &h), h, t))
            .filter(|(k, h, _)| after.is_none_or(|a| (*k, *h) > a))
            .collect();
        keyed.sort_by_key(|a| (a.0, a.1));
        keyed.into_iter().map(|(_, h, t)| (h, t)).collect()
    }
}

/// Whether an entrant's browser was there when the draw began: the draw places every present
/// entrant before every absent one. A gateway records a pre-queue browser's disconnect, and
/// a resume clears it (`store::places`); the draw fixes the groups when it begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Presence {
    Present,
    Absent,
}

/// A draw's order: the present entrants, then the absent ones, each group in the seed's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrawnOrder<T> {
    /// Every entrant in drawn order (with what the caller keeps beside its hash).
    pub entrants: Vec<(EntrantHash, T)>,
    /// How many of `entrants`, at the end, are absent.
    pub absent: usize,
}

impl Seed {
    /// The draw's order of `present` and `absent` entrants (see the module's rule), going on
    /// after `after` (the last entrant recorded, and its group) when a draw interrupted
    /// half-way is taken up again: a present `after` leaves the rest of the present group
    /// and the whole absent group; an absent one only the rest of the absent group.
    pub fn draw<T>(
        &self,
        beacon: Option<&[u8]>,
        present: Vec<(EntrantHash, T)>,
        absent: Vec<(EntrantHash, T)>,
        after: Option<(Presence, &EntrantHash)>,
    ) -> DrawnOrder<T> {
        let (mut entrants, absent) = match after {
            Some((Presence::Absent, h)) => (Vec::new(), self.order_after(beacon, absent, Some(h))),
            Some((Presence::Present, h)) => (
                self.order_after(beacon, present, Some(h)),
                self.order(beacon, absent),
            ),
            None => (self.order(beacon, present), self.order(beacon, absent)),
        };
        let n = absent.len();
        entrants.extend(absent);
        DrawnOrder {
            entrants,
            absent: n,
        }
    }
}

fn sort_key(key: &[u8], entrant: &EntrantHash) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    m.update(entrant.to_hex().as_bytes());
    m.finalize().into_bytes().into()
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seed(<secret until the draw>)")
    }
}

/// Why a scheduled sale's published draw was voided. A closed set; its wire form (the draw
/// record's `voided.reason`, the `draw_void` event's `reason`) is the snake_case name.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum VoidReason {
    /// Redis lost the queue before its draw ran, and the queue was configured again without
    /// the seed behind the published commitment (`draw_seed` in `USHER_QUEUES_FILE`).
    RedisDataLost,
}

impl VoidReason {
    /// The wire name, as serde writes it (and as Redis stores it).
    pub fn as_str(self) -> &'static str {
        match self {
            VoidReason::RedisDataLost => "redis_data_lost",
        }
    }

    /// From its wire name; `None` for any other text.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "redis_data_lost" => Some(VoidReason::RedisDataLost),
            _ => None,
        }
    }
}

/// SHA-256 of an entrant's ticket: what the draw publishes instead of the ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntrantHash(pub [u8; 32]);

impl EntrantHash {
    pub fn of_ticket(ticket: &str) -> Self {
        Self(Sha256::digest(ticket.as_bytes()).into())
    }

    /// From its 32 raw bytes (as stored); `None` for any other length.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        b.try_into().ok().map(Self)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_commitment_is_the_seeds_sha256() {
        let seed = Seed::from_hex(&"00".repeat(32)).expect("32 bytes");
        // SHA-256 of 32 zero bytes.
        assert_eq!(
            seed.commitment(),
            "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925"
        );
        assert_eq!(Seed::from_hex(&seed.to_hex()), Some(seed));
        assert_eq!(Seed::from_hex("abcd"), None);
        assert_ne!(Seed::generate(), Seed::generate());
    }

    #[test]
    fn the_order_is_a_permutation_fixed_by_the_seed() {
        let entrants: Vec<_> = (0..50)
            .map(|i| (EntrantHash::of_ticket(&format!("q.{i}.mac")), i))
            .collect();
        let a = Seed::generate();
        let once = a.order(None, entrants.clone());
        let mut reversed = entrants.clone();
        reversed.reverse();
        assert_eq!(
            a.order(None, reversed),
            once,
            "the input order does not matter"
        );
        let mut ids: Vec<_> = once.iter().map(|e| e.1).collect();
        ids.sort_unstable();
        assert_eq!(ids, (0..50).collect::<Vec<_>>());
        assert_ne!(Seed::generate().order(None, entrants.clone()), once);
        assert_ne!(
            a.order(Some(b"beacon"), entrants),
            once,
            "a beacon changes the order"
        );
    }

    #[test]
    fn absent_entrants_come_after_every_present_one() {
        let hashes: Vec<_> = (0..30)
            .map(|i| (EntrantHash::of_ticket(&format!("q.{i}.mac")), i))
            .collect();
        let (present, absent): (Vec<_>, Vec<_>) = hashes.into_iter().partition(|e| e.1 % 3 != 0);
        let seed = Seed::generate();
        let whole = seed.draw(None, present.clone(), absent.clone(), None);
        assert_eq!(whole.absent, absent.len());
        let mut want = seed.order(None, present.clone());
        want.extend(seed.order(None, absent.clone()));
        assert_eq!(
            whole.entrants, want,
            "each group in the seed's order, present first"
        );
        // Taken up again after a present entrant, then after an absent one.
        let cut = 5;
        let rest = seed.draw(
            None,
            present.clone(),
            absent.clone(),
            Some((Presence::Present, &whole.entrants[cut - 1].0)),
        );
        assert_eq!(rest.entrants, whole.entrants[cut..].to_vec());
        assert_eq!(rest.absent, absent.len());
        let cut = whole.entrants.len() - 3;
        let rest = seed.draw(
            None,
            present,
            absent,
            Some((Presence::Absent, &whole.entrants[cut - 1].0)),
        );
        assert_eq!(rest.entrants, whole.entrants[cut..].to_vec());
        assert_eq!(rest.absent, 3);
    }

    #[test]
    fn the_rest_of_an_order_continues_it() {
        let entrants: Vec<_> = (0..40)
            .map(|i| (EntrantHash::of_ticket(&format!("q.{i}.mac")), i))
            .collect();
        let seed = Seed::generate();
        let whole = seed.order(Some(b"beacon"), entrants.clone());
        // Interrupted after 15: the rest, read again, is the whole order's tail.
        let last = whole[14].0;
        let rest = seed.order_after(Some(b"beacon"), entrants, Some(&last));
        assert_eq!(rest, whole[15..].to_vec());
        // An entrant ordered before the interruption point, read only now, is left out.
        let early: Vec<_> = whole[..15].to_vec();
        assert!(seed
            .order_after(Some(b"beacon"), early, Some(&last))
            .is_empty());
    }
}
