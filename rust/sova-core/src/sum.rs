//! Floating-point sums in the orders the simulator's recorded outputs were computed in.
//!
//! The kernels moved here from numpy keep numpy's summation orders so that every result,
//! and so the simulator's pinned outputs (scripts/golden-hashes.json), stay bit for bit
//! the same: a running sum where numpy used `cumsum` or `bincount`, and numpy's pairwise
//! sum where it used `add.reduceat`.

/// Elements per pairwise block, as numpy's `PW_BLOCKSIZE`.
const BLOCK: usize = 128;

/// numpy's pairwise sum of a contiguous float64 run (the inner loop of `np.add.reduce`):
/// sequential below 8 elements, eight interleaved accumulators up to 128, halves above.
pub fn numpy_pairwise(a: &[f64]) -> f64 {
    let n = a.len();
    if n < 8 {
        let mut res = 0.0;
        for x in a {
            res += x;
        }
        res
    } else if n <= BLOCK {
        let mut r = [a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]];
        let whole = n - n % 8;
        let mut i = 8;
        while i < whole {
            for (j, acc) in r.iter_mut().enumerate() {
                *acc += a[i + j];
            }
            i += 8;
        }
        let mut res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for x in &a[whole..] {
            res += x;
        }
        res
    } else {
        let mut half = n / 2;
        half -= half % 8;
        numpy_pairwise(&a[..half]) + numpy_pairwise(&a[half..])
    }
}

/// `np.add.reduceat` of one non-empty segment: its first element plus the pairwise sum of
/// the rest.
pub fn numpy_reduceat_segment(a: &[f64]) -> f64 {
    match a.split_first() {
        Some((first, rest)) => first + numpy_pairwise(rest),
        None => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_runs_are_sequential() {
        // 0.1 + 0.2 + 0.3 left to right is 0.6000000000000001; any other order gives 0.6
        assert_eq!(numpy_pairwise(&[0.1, 0.2, 0.3]), 0.1 + 0.2 + 0.3);
        assert_eq!(numpy_pairwise(&[]), 0.0);
    }

    #[test]
    fn eight_and_more_use_eight_accumulators() {
        // 1e16 absorbs a lone 1.0 but not the 2.0 that the accumulator of lane 1 builds
        // from two 1.0s (positions 1 and 9), which a left-to-right sum would lose
        let mut a = vec![0.0; 16];
        a[0] = 1e16;
        a[1] = 1.0;
        a[9] = 1.0;
        let sequential = a.iter().fold(0.0, |s, x| s + x);
        assert_eq!(sequential, 1e16);
        assert_eq!(numpy_pairwise(&a), 1e16 + 2.0);
    }

    #[test]
    fn reduceat_starts_from_the_first_element() {
        assert_eq!(numpy_reduceat_segment(&[2.5]), 2.5);
        assert_eq!(numpy_reduceat_segment(&[]), 0.0);
        let a: Vec<f64> = (0..300).map(|k| 0.1 * k as f64).collect();
        assert_eq!(numpy_reduceat_segment(&a), a[0] + numpy_pairwise(&a[1..]));
    }
}
