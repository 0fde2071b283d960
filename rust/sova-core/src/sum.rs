//! Floating-point sums in the orders the simulator's recorded outputs were computed in.
//!
//! The kernels moved here from numpy keep numpy's summation orders so that every result,
//! and so the simulator's pinned outputs (scripts/golden-hashes.json), stay bit for bit
//! the same: a running sum where numpy used `cumsum` or `bincount`, and numpy's pairwise
//! sum where it used `add.reduceat`. Where the specification sums with Python's
//! `math.fsum` (the bandwidth step's per-host sums, the Sova allocator's), [`fsum`] is that
//! correctly rounded sum, so any order of the same values gives the same float; it is the
//! core's only one.

use crate::waterfill::{InputError, Layout};

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

/// Python's `math.fsum` (CPython's algorithm: Shewchuk's exact partials, then the sum of
/// the partials rounded once, half-way cases to even): the correctly rounded sum of
/// `values`, `+0.0` for none. Infinities and NaNs add as IEEE floats do; where `math.fsum`
/// raises (an intermediate overflow, `inf + -inf`) this refuses with the same reason.
pub fn fsum(values: impl IntoIterator<Item = f64>) -> Result<f64, InputError> {
    let mut p: Vec<f64> = Vec::new();
    let (mut special, mut inf_sum) = (0.0f64, 0.0f64);
    for given in values {
        let mut x = given;
        let mut i = 0;
        for j in 0..p.len() {
            let mut y = p[j];
            if x.abs() < y.abs() {
                std::mem::swap(&mut x, &mut y);
            }
            let hi = x + y;
            let lo = y - (hi - x);
            if lo != 0.0 {
                p[i] = lo;
                i += 1;
            }
            x = hi;
        }
        p.truncate(i);
        if x != 0.0 {
            if !x.is_finite() {
                if given.is_finite() {
                    return Err(InputError("intermediate overflow in fsum".into()));
                }
                if given.is_infinite() {
                    inf_sum += given;
                }
                special += given;
                p.clear();
            } else {
                p.push(x);
            }
        }
    }
    if special != 0.0 {
        return if inf_sum.is_nan() {
            Err(InputError("-inf + inf in fsum".into()))
        } else {
            Ok(special)
        };
    }
    let Some(mut hi) = p.pop() else {
        return Ok(0.0);
    };
    let mut lo = 0.0;
    // the partials are non-overlapping and rise in magnitude: add from the top until the
    // sum is inexact, then round half-way cases by the sign of what is left below
    while let Some(y) = p.pop() {
        let x = hi;
        hi = x + y;
        lo = y - (hi - x);
        if lo != 0.0 {
            break;
        }
    }
    if let Some(&below) = p.last()
        && ((lo < 0.0 && below < 0.0) || (lo > 0.0 && below > 0.0))
    {
        let y = lo * 2.0;
        let x = hi + y;
        if y == x - hi {
            hi = x;
        }
    }
    Ok(hi)
}

/// [`fsum`] of each link's flows (`0.0` for a link without flows) into `out`.
pub fn links_fsum(layout: &Layout<'_>, values: &[f64], out: &mut [f64]) -> Result<(), InputError> {
    if out.len() != layout.links() {
        return Err(InputError(format!(
            "out: {} values for {} links",
            out.len(),
            layout.links()
        )));
    }
    for (h, o) in out.iter_mut().enumerate() {
        *o = fsum(layout.row(h).map(|f| values[f]))
            .map_err(|e| InputError(format!("link {h}: {e}")))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsum_is_correctly_rounded() {
        // (values, math.fsum of them): cancellation, ties to even across partials, the
        // values a plain left-to-right sum gets wrong
        let u = f64::EPSILON; // 2^-52
        let table: [(&[f64], f64); 7] = [
            (&[], 0.0),
            (&[0.1, 0.2, 0.3], 0.6),             // plain: 0.6000000000000001
            (&[1e16, 1.0, -1e16], 1.0),          // plain: 0.0
            (&[1.0, 1e100, 1.0, -1e100], 2.0),   // plain: 0.0
            (&[1.0, u / 2.0, u / 4.0], 1.0 + u), // above the tie: rounds up
            (&[1.0, u / 2.0, -u / 4.0], 1.0),    // below it: down
            (&[1.0, u / 2.0, u * u], 1.0 + u),   // a tie broken by a tiny partial
        ];
        for (values, want) in table {
            assert_eq!(fsum(values.iter().copied()), Ok(want), "{values:?}");
        }
    }

    #[test]
    fn fsum_rounds_once() {
        // 0.1 ten times: a running sum gives 0.9999999999999999, the exact sum rounds to 1
        assert_eq!(fsum(std::iter::repeat_n(0.1, 10)), Ok(1.0));
        // 1 + 2^-53 + 2^-106 lies just above the tie between 1 and 1 + 2^-52: rounds up
        assert_eq!(
            fsum([1.0, 2f64.powi(-53), 2f64.powi(-106)]),
            Ok(1.0 + 2f64.powi(-52))
        );
        // 1e16 + 1 - 1e16 cancels exactly
        assert_eq!(fsum([1e16, 1.0, -1e16]), Ok(1.0));
        assert_eq!(fsum([]), Ok(0.0));
        // -0.0 alone is no partial: +0.0, as math.fsum([-0.0]) is
        assert!(fsum([-0.0]).unwrap().is_sign_positive());
    }

    #[test]
    fn fsum_specials_and_overflow() {
        assert_eq!(fsum([1.0, f64::INFINITY]), Ok(f64::INFINITY));
        assert!(fsum([f64::NAN, 1.0]).unwrap().is_nan());
        assert_eq!(
            fsum([f64::INFINITY, f64::NEG_INFINITY]).unwrap_err().0,
            "-inf + inf in fsum"
        );
        assert_eq!(
            fsum([f64::MAX, f64::MAX]).unwrap_err().0,
            "intermediate overflow in fsum"
        );
    }

    #[test]
    fn links_fsum_sums_each_link() {
        // link 0: flows 0, 2, 3; link 1: none; link 2: flow 1
        let (order, start) = ([0i64, 2, 3, 1], [0i64, 3, 3, 4]);
        let layout = Layout::new(&order, &start, 4).unwrap();
        let mut out = [9.0; 3];
        // 1e16 + 1 + 1: a running sum loses both 1s, the exact sum keeps them
        links_fsum(&layout, &[1e16, 5.0, 1.0, 1.0], &mut out).unwrap();
        assert_eq!(1e16 + 1.0 + 1.0, 1e16);
        assert_eq!(out, [1e16 + 2.0, 0.0, 5.0]);
        let mut short = [0.0; 2];
        let e = links_fsum(&layout, &[1.0; 4], &mut short).unwrap_err();
        assert_eq!(e.0, "out: 2 values for 3 links");
    }

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
