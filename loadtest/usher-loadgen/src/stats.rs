//! Latency histograms (HDR, microseconds), their wire form between processes, and summaries.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Quantiles drawn in the plot and listed in the report's distributions.
pub const DISTRIBUTION_QUANTILES: &[f64] = &[
    0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.925, 0.95, 0.975, 0.99, 0.995,
    0.999, 0.9995, 0.9999, 1.0,
];

/// A latency histogram in microseconds (3 significant digits, grows as needed).
#[derive(Debug, Clone)]
pub struct Hist(Histogram<u64>);

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

impl Hist {
    pub fn new() -> Self {
        // 3 significant figures over 1 µs .. 1 h; auto-resizes beyond that.
        let mut h = Histogram::new_with_bounds(1, 3_600_000_000, 3)
            .or_else(|_| Histogram::new(3))
            .unwrap_or_else(|_| unreachable!("3 significant figures are valid"));
        h.auto(true);
        Self(h)
    }

    pub fn record_us(&mut self, us: u64) {
        self.0.saturating_record(us.max(1));
    }

    pub fn len(&self) -> u64 {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `[value, count]` pairs of the non-empty buckets (what workers send the coordinator).
    pub fn to_buckets(&self) -> Vec<(u64, u64)> {
        self.0
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    pub fn add_buckets(&mut self, buckets: &[(u64, u64)]) {
        for &(v, n) in buckets {
            // Auto-resizing histograms only refuse values above u64 range limits.
            let _ = self.0.record_n(v.max(1), n);
        }
    }

    pub fn ms_at(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        self.0.value_at_quantile(q) as f64 / 1000.0
    }

    pub fn summary(&self) -> LatencySummary {
        let empty = self.0.is_empty();
        let ms = |us: u64| {
            if empty {
                0.0
            } else {
                round_to(us as f64 / 1000.0, 3)
            }
        };
        LatencySummary {
            count: self.0.len(),
            min_ms: ms(self.0.min()),
            mean_ms: if empty {
                0.0
            } else {
                round_to(self.0.mean() / 1000.0, 3)
            },
            p50_ms: ms(self.0.value_at_quantile(0.5)),
            p90_ms: ms(self.0.value_at_quantile(0.9)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            p999_ms: ms(self.0.value_at_quantile(0.999)),
            max_ms: ms(self.0.max()),
        }
    }

    /// `[quantile, ms]` at [`DISTRIBUTION_QUANTILES`]; empty when nothing was recorded.
    pub fn distribution(&self) -> Vec<(f64, f64)> {
        if self.0.is_empty() {
            return Vec::new();
        }
        DISTRIBUTION_QUANTILES
            .iter()
            .map(|&q| (q, round_to(self.ms_at(q), 3)))
            .collect()
    }
}

/// `x` rounded to `places` decimal places (for the report's figures).
pub fn round_to(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ms: f64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

/// A stable 64-bit hash, so workers send token fingerprints instead of whole tokens: eight
/// bytes at a time (the tail zero-padded, the length mixed in), each word folded in by a full
/// 64×64→128-bit multiplication whose high half is folded back down, so a difference in any
/// bit of a word reaches every bit of the state (a plain multiplication carries differences
/// upward only, and two words could cancel each other). Read a word at a time because it
/// runs on every `admitted` event inside the burst being measured: byte by byte, a 400-byte
/// token was a chain of 400 dependent multiplications.
pub fn fingerprint(s: &str) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    fn fold(h: u64, word: u64) -> u64 {
        let m = u128::from(h ^ word) * u128::from(K);
        (m as u64) ^ ((m >> 64) as u64)
    }
    let bytes = s.as_bytes();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut word = [0u8; 8];
        word.copy_from_slice(w);
        h = fold(h, u64::from_le_bytes(word));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut word = [0u8; 8];
        word[..rest.len()].copy_from_slice(rest);
        h = fold(h, u64::from_le_bytes(word));
    }
    fold(h, K)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_round_trip_and_merge() {
        let mut a = Hist::new();
        for us in 1..=1000 {
            a.record_us(us * 100);
        }
        let mut b = Hist::new();
        b.add_buckets(&a.to_buckets());
        b.add_buckets(&a.to_buckets());
        assert_eq!(b.len(), 2000);
        let (sa, sb) = (a.summary(), b.summary());
        assert_eq!(
            (sa.p50_ms, sa.p99_ms, sa.max_ms),
            (sb.p50_ms, sb.p99_ms, sb.max_ms)
        );
        assert!((sa.p50_ms - 50.0).abs() < 0.1, "{}", sa.p50_ms);
        assert!((sa.max_ms - 100.0).abs() < 0.1, "{}", sa.max_ms);
        assert_eq!(Hist::new().summary(), LatencySummary::default());
        assert_eq!(a.distribution().len(), DISTRIBUTION_QUANTILES.len());
    }

    #[test]
    fn fingerprints_differ() {
        assert_ne!(fingerprint("a.b.c"), fingerprint("a.b.d"));
        assert_eq!(fingerprint("x"), fingerprint("x"));
        // A zero-padded tail is not the same text: the length is mixed in.
        assert_ne!(fingerprint("x"), fingerprint("x\0"));
        assert_ne!(fingerprint(""), fingerprint("\0"));
        // Tokens that differ in one character anywhere (first word, middle, tail) differ, and
        // 100,000 distinct token-like texts give 100,000 distinct fingerprints.
        let base = "eyJhbGciOiJFZERTQSJ9.".repeat(20);
        for i in 0..base.len() {
            let mut t = base.clone().into_bytes();
            t[i] ^= 1;
            let t = String::from_utf8(t).expect("ASCII");
            assert_ne!(fingerprint(&t), fingerprint(&base), "byte {i}");
        }
        // Two differences in neighbouring words do not cancel out (they did with a plain
        // multiply-and-rotate: the top bit of one word's difference landed where the next
        // word's could undo it).
        for i in 0..base.len() - 16 {
            for (j, bit) in [(i + 4, 0x08), (i + 9, 0x01), (i + 15, 0x40)] {
                let mut t = base.clone().into_bytes();
                t[i] ^= 0x40;
                t[j] ^= bit;
                let t = String::from_utf8(t).expect("ASCII");
                assert_ne!(fingerprint(&t), fingerprint(&base), "bytes {i} and {j}");
            }
        }
        let seen: std::collections::HashSet<u64> = (0..100_000u32)
            .map(|i| fingerprint(&format!("{base}{i}")))
            .collect();
        assert_eq!(seen.len(), 100_000);
    }
}
