//! usher-pow: the proof-of-work puzzles a queue with `challenge: "pow"` asks of every join:
//! the signed puzzle, the solution check and a solver. The setting, the refusal reasons and
//! the checked [`Proof`] the join script spends are `usher_core::challenge`'s.
//!
//! A **puzzle** is `2.<queue>.<expires ms>.<difficulty>.<id>.<mac>`: a version, the queue it
//! is good for, when it expires, the leading zero bits asked, 96 random bits (the id the
//! spent-set remembers, unpadded base64url) and an HMAC-SHA256 (128 bits kept, unpadded
//! base64url) under the secret every gateway shares, so a puzzle fetched from one gateway is
//! accepted by any other. The issuing gateway signs the expiry in (its puzzle lifetime flag),
//! so every gateway holds a puzzle to the same expiry, and the spent-set remembers a solution
//! until then whichever gateway spent it: gateways with different lifetimes (a rolling
//! change of the flag) never reopen a spent solution. (Version 1 signed the issue time, and
//! each gateway added its own lifetime.)
//!
//! A **solution** is `<puzzle>.<nonce>`, the nonce a decimal `u64`, such that
//! SHA-256(`<puzzle>.<nonce>`) starts with at least `difficulty` zero bits. Finding one takes
//! 2^difficulty hashes on average; checking one takes one hash and one MAC, which is why a
//! gateway checks it before asking Redis anything. A solution is good for one place: the join
//! script spends its id (see `usher_core::keys`, `spent`).

use std::fmt;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::{Digest, Sha256};

use usher_core::challenge::{Proof, Refusal};
use usher_core::ids::QueueId;

/// Longest a puzzle may live, in seconds (the gateways' `USHER_CHALLENGE_TTL_SECS` at most).
pub const MAX_PUZZLE_TTL_SECS: u64 = 3600;
/// How far a signed expiry may lie beyond the longest lifetime from now: the gateways'
/// clocks may differ by this much. A puzzle expiring later (issued by a gateway whose clock
/// runs far ahead) is refused, so no solution is held in the spent-set for longer.
const CLOCK_SKEW_MS: u64 = 60_000;
/// Shortest accepted challenge secret, in bytes.
pub const MIN_SECRET_LEN: usize = 32;

/// The version a puzzle starts with.
const VERSION: &str = "2";
/// MAC bytes kept (128 bits).
const MAC_LEN: usize = 16;
/// Random id bytes (96 bits).
const ID_LEN: usize = 12;

/// The HMAC key every gateway shares to sign and check puzzles. Its `Debug` never prints it.
#[derive(Clone)]
pub struct ChallengeSecret(Vec<u8>);

/// A challenge secret shorter than [`MIN_SECRET_LEN`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the challenge secret must be at least {MIN_SECRET_LEN} bytes long (got {0})")]
pub struct ShortSecret(pub usize);

impl ChallengeSecret {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Result<Self, ShortSecret> {
        let bytes = bytes.into();
        if bytes.len() < MIN_SECRET_LEN {
            return Err(ShortSecret(bytes.len()));
        }
        Ok(Self(bytes))
    }

    /// A fresh random secret, hex encoded (64 characters).
    pub fn generate_hex() -> String {
        let mut b = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut b);
        hex::encode(b)
    }

    fn mac(&self, body: &str) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        m.update(b"usher-pow\0");
        m.update(body.as_bytes());
        m
    }
}

impl fmt::Debug for ChallengeSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ChallengeSecret(<redacted>)")
    }
}

/// A puzzle's content (see the module documentation for its text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Puzzle {
    pub queue: QueueId,
    /// When the puzzle is refused from (ms since the epoch), signed in by the issuer.
    pub expires_ms: u64,
    pub difficulty: u8,
    /// 96 random bits, unpadded base64url (16 characters).
    pub id: String,
}

impl Puzzle {
    /// A new puzzle for `queue`, good until `expires_ms`.
    pub fn new(queue: QueueId, difficulty: u8, expires_ms: u64) -> Self {
        let mut id = [0u8; ID_LEN];
        rand::thread_rng().fill_bytes(&mut id);
        Self {
            queue,
            expires_ms,
            difficulty,
            id: URL_SAFE_NO_PAD.encode(id),
        }
    }

    fn body(&self) -> String {
        format!(
            "{VERSION}.{}.{}.{}.{}",
            self.queue, self.expires_ms, self.difficulty, self.id
        )
    }

    /// The signed puzzle text a browser solves.
    pub fn sign(&self, secret: &ChallengeSecret) -> String {
        let body = self.body();
        let tag = secret.mac(&body).finalize().into_bytes();
        format!("{body}.{}", URL_SAFE_NO_PAD.encode(&tag[..MAC_LEN]))
    }

    /// The puzzle `text` names, when its MAC is genuine (compared in constant time).
    pub fn verify(secret: &ChallengeSecret, text: &str) -> Option<Self> {
        let (body, tag) = text.rsplit_once('.')?;
        let mut parts = body.split('.');
        let (v, queue, expires, difficulty, id) = (
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
            parts.next()?,
        );
        if v != VERSION || parts.next().is_some() {
            return None;
        }
        let tag = URL_SAFE_NO_PAD.decode(tag).ok()?;
        if tag.len() != MAC_LEN {
            return None;
        }
        secret.mac(body).verify_truncated_left(&tag).ok()?;
        let id_ok = id.len() == 16
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        Some(Self {
            queue: QueueId::new(queue).ok()?,
            expires_ms: expires.parse().ok()?,
            difficulty: difficulty.parse().ok()?,
            id: id_ok.then(|| id.to_owned())?,
        })
    }
}

/// Checks a solution (`<puzzle>.<nonce>`) for `queue` at `now_ms`: the MAC, the queue, the
/// puzzle's signed expiry, then the hash. Everything but whether it was spent already, which
/// only Redis knows.
pub fn check_solution(
    secret: &ChallengeSecret,
    queue: &QueueId,
    solution: &str,
    now_ms: u64,
) -> Result<Proof, Refusal> {
    let (text, nonce) = solution.rsplit_once('.').ok_or(Refusal::Invalid)?;
    let nonce_ok = !nonce.is_empty()
        && nonce.len() <= 20
        && nonce.bytes().all(|b| b.is_ascii_digit())
        && nonce.parse::<u64>().is_ok();
    if !nonce_ok {
        return Err(Refusal::Invalid);
    }
    let p = Puzzle::verify(secret, text).ok_or(Refusal::Invalid)?;
    if &p.queue != queue {
        return Err(Refusal::Invalid);
    }
    let expires_ms = p.expires_ms;
    if now_ms >= expires_ms {
        return Err(Refusal::Expired);
    }
    if expires_ms > now_ms.saturating_add(MAX_PUZZLE_TTL_SECS * 1000 + CLOCK_SKEW_MS) {
        return Err(Refusal::Invalid);
    }
    let hash = Sha256::digest(solution.as_bytes());
    if leading_zero_bits(&hash) < u32::from(p.difficulty) {
        return Err(Refusal::Invalid);
    }
    Ok(Proof {
        id: p.id,
        difficulty: p.difficulty,
        expires_ms,
    })
}

/// Leading zero bits of `bytes`.
pub fn leading_zero_bits(bytes: &[u8]) -> u32 {
    let mut n = 0;
    for &b in bytes {
        if b != 0 {
            return n + b.leading_zeros();
        }
        n += 8;
    }
    n
}

/// Finds a nonce for `puzzle` at `difficulty` by counting up from `start` (a bot farm's and
/// the load generator's solver; the page has its own, in JavaScript). Returns the nonce and
/// the hashes tried.
pub fn solve(puzzle: &str, difficulty: u8, start: u64) -> (u64, u64) {
    let mut prefix = Sha256::new();
    prefix.update(puzzle.as_bytes());
    prefix.update(b".");
    let mut buf = itoa_buf();
    let mut nonce = start;
    loop {
        let digits = decimal(nonce, &mut buf);
        let hash = prefix.clone().chain_update(digits).finalize();
        if leading_zero_bits(&hash) >= u32::from(difficulty) {
            return (nonce, nonce - start + 1);
        }
        nonce = nonce.wrapping_add(1);
    }
}

fn itoa_buf() -> [u8; 20] {
    [0; 20]
}

/// `n` in decimal, written into the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> ChallengeSecret {
        ChallengeSecret::new(vec![7u8; 32]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn q() -> QueueId {
        QueueId::new("concert").unwrap_or_else(|e| panic!("{e}"))
    }

    fn solved(p: &Puzzle) -> String {
        let text = p.sign(&secret());
        let (nonce, _) = solve(&text, p.difficulty, 0);
        format!("{text}.{nonce}")
    }

    #[test]
    fn a_solved_puzzle_is_accepted_once_checked() {
        let p = Puzzle::new(q(), 8, 121_000);
        let s = solved(&p);
        let proof = check_solution(&secret(), &q(), &s, 2_000);
        assert_eq!(
            proof,
            Ok(Proof {
                id: p.id.clone(),
                difficulty: 8,
                expires_ms: 121_000
            })
        );
        let hash = Sha256::digest(s.as_bytes());
        assert!(leading_zero_bits(&hash) >= 8);
    }

    #[test]
    fn stale_forged_foreign_and_unsolved_solutions_are_refused() {
        let p = Puzzle::new(q(), 8, 121_000);
        let s = solved(&p);
        let check = |s: &str, now| check_solution(&secret(), &q(), s, now);
        assert_eq!(check(&s, 121_000), Err(Refusal::Expired));
        let other = ChallengeSecret::new(vec![8u8; 32]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            check_solution(&other, &q(), &s, 2_000),
            Err(Refusal::Invalid)
        );
        let elsewhere = QueueId::new("other").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            check_solution(&secret(), &elsewhere, &s, 2_000),
            Err(Refusal::Invalid)
        );
        // A signed expiry beyond the longest lifetime (a clock far ahead) is refused.
        let far = Puzzle::new(q(), 8, 2_000 + MAX_PUZZLE_TTL_SECS * 1000 + 60_001);
        assert_eq!(check(&solved(&far), 2_000), Err(Refusal::Invalid));
        // A later expiry or a harder difficulty written over the signed ones breaks the MAC.
        let later = s.replacen(".121000.", ".999999.", 1);
        assert_eq!(check(&later, 2_000), Err(Refusal::Invalid));
        let tampered = s.replacen(".8.", ".9.", 1);
        assert_eq!(check(&tampered, 2_000), Err(Refusal::Invalid));
        // A nonce that does not reach the difficulty (one that is at most 2^-20 likely to).
        let text = Puzzle::new(q(), 20, 121_000).sign(&secret());
        let (good, _) = solve(&text, 20, 0);
        let bad = (0..good).find(|n| {
            let h = Sha256::digest(format!("{text}.{n}").as_bytes());
            leading_zero_bits(&h) < 20
        });
        if let Some(n) = bad {
            assert_eq!(check(&format!("{text}.{n}"), 2_000), Err(Refusal::Invalid));
        }
        for junk in [
            "",
            ".",
            "x.1",
            &format!("{s}x"),
            &format!("{s}.1"),
            "1.a.b.c.d.e.f",
        ] {
            assert_eq!(check(junk, 2_000), Err(Refusal::Invalid), "{junk}");
        }
        assert_eq!(
            check(&format!("{}.+1", p.sign(&secret())), 2_000),
            Err(Refusal::Invalid)
        );
    }

    #[test]
    fn bits_digits_and_secrets() {
        assert_eq!(leading_zero_bits(&[0, 0x10, 0xff]), 11);
        assert_eq!(leading_zero_bits(&[0, 0]), 16);
        let mut buf = itoa_buf();
        assert_eq!(decimal(0, &mut buf), b"0");
        assert_eq!(decimal(u64::MAX, &mut buf), u64::MAX.to_string().as_bytes());
        assert!(ChallengeSecret::new(vec![0u8; 31]).is_err());
        assert_eq!(
            format!("{:?}", secret()),
            "ChallengeSecret(<redacted>)".to_owned()
        );
    }
}
