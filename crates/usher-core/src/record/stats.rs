//! The statistics a fairness report is made of. Each is a pure function of plain numbers,
//! tested below on hand-made data whose answer can be checked by hand.

/// Inversions of `seq`: pairs `i < j` with `seq[i] > seq[j]` (a later arrival admitted before
/// an earlier one, when `seq` lists admission ranks in arrival order). The values must be
/// distinct and below `bound`. A Fenwick tree over the values counts, for each element, the
/// larger ones before it: O(n log bound) time, `bound` counters of memory. With `per_item`,
/// each element's count of smaller elements after it (the later arrivals that overtook it)
/// is added to `per_item[i]`.
pub fn inversions(seq: &[u32], bound: usize, mut per_item: Option<&mut [u64]>) -> u64 {
    let mut tree = vec![0u32; bound + 1];
    let mut total = 0u64;
    // From the right: how many smaller values came after each element.
    for (i, &v) in seq.iter().enumerate().rev() {
        let v = v as usize;
        let mut smaller = 0u64;
        let mut k = v;
        while k > 0 {
            smaller += u64::from(tree[k]);
            k &= k - 1;
        }
        let mut k = v + 1;
        while k <= bound {
            tree[k] += 1;
            k += k & k.wrapping_neg();
        }
        total += smaller;
        if let Some(p) = per_item.as_deref_mut() {
            p[i] += smaller;
        }
    }
    total
}

/// Kendall's tau between arrival and admission order for `n` places with `inversions`
/// discordant pairs and no ties (every place has its own arrival and its own admission):
/// 1 − 2 × discordant ÷ pairs, so 1 when the line was served exactly in order, −1 when in
/// reverse. `None` for fewer than two places.
pub fn kendall_tau(n: u64, inversions: u64) -> Option<f64> {
    if n < 2 {
        return None;
    }
    let pairs = n as f64 * (n as f64 - 1.0) / 2.0;
    Some(1.0 - 2.0 * inversions as f64 / pairs)
}

/// The `p`-th percentile (0..=100) of `sorted` (ascending) by nearest rank: the smallest
/// value with at least p % of the values at or below it. `None` when empty.
pub fn percentile(sorted: &[u32], p: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// Replaces each value of `values` (distinct) by its rank among them (0-based), so
/// [`inversions`] can use a tree as large as the list, whatever the values.
pub fn ranks(values: &[u32]) -> Vec<u32> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_unstable_by_key(|&i| values[i]);
    let mut out = vec![0u32; values.len()];
    for (rank, i) in order.into_iter().enumerate() {
        out[i] = u32::try_from(rank).unwrap_or(u32::MAX);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts pairs one by one: the definition, for checking the tree.
    fn brute(seq: &[u32]) -> u64 {
        let mut n = 0;
        for i in 0..seq.len() {
            for j in i + 1..seq.len() {
                if seq[i] > seq[j] {
                    n += 1;
                }
            }
        }
        n
    }

    #[test]
    fn inversions_by_hand() {
        assert_eq!(inversions(&[0, 1, 2, 3], 4, None), 0);
        assert_eq!(inversions(&[3, 2, 1, 0], 4, None), 6);
        // 1 before 0, and 3 before 2: two inversions.
        let mut per = vec![0u64; 4];
        assert_eq!(inversions(&[1, 0, 3, 2], 4, Some(&mut per)), 2);
        assert_eq!(per, vec![1, 0, 1, 0]);
        // The place that arrived first was admitted third: overtaken by two.
        let mut per = vec![0u64; 3];
        assert_eq!(inversions(&[2, 0, 1], 3, Some(&mut per)), 2);
        assert_eq!(per, vec![2, 0, 0]);
        assert_eq!(inversions(&[], 0, None), 0);
    }

    #[test]
    fn inversions_agree_with_counting_pairs() {
        // A fixed pseudo-random permutation (no randomness in tests).
        let mut seq: Vec<u32> = (0..500).collect();
        let mut x = 12345u64;
        for i in (1..seq.len()).rev() {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seq.swap(i, (x >> 33) as usize % (i + 1));
        }
        assert_eq!(inversions(&seq, 500, None), brute(&seq));
    }

    #[test]
    fn tau_by_hand() {
        assert_eq!(kendall_tau(4, 0), Some(1.0));
        assert_eq!(kendall_tau(4, 6), Some(-1.0));
        // 4 places, 6 pairs, 1 discordant: (5 − 1) ÷ 6.
        let t = kendall_tau(4, 1).expect("tau");
        assert!((t - 4.0 / 6.0).abs() < 1e-12);
        assert_eq!(kendall_tau(1, 0), None);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100];
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 90.0), Some(90));
        assert_eq!(percentile(&v, 99.0), Some(100));
        assert_eq!(percentile(&v, 0.0), Some(10));
        assert_eq!(percentile(&[7], 50.0), Some(7));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn ranks_compress_values() {
        assert_eq!(ranks(&[40, 10, 30]), vec![2, 0, 1]);
    }
}
