//! numpy's element-wise `minimum` and `maximum` on one pair: the kernels keep the numpy
//! forms' results bit for bit (golden outputs pin them), and Rust's `f64::min`/`max` differ
//! on NaN (they return the other operand) and leave the sign of a zero tie unspecified.

/// `np.minimum`: NaN if either is NaN (the NaN operand itself), else the smaller; on a
/// tie the first.
#[inline(always)]
pub(crate) fn np_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a <= b) {
        a
    } else {
        b
    }
}

/// `np.maximum`, likewise.
#[inline(always)]
pub(crate) fn np_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a >= b) {
        a
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nan_propagates_from_either_side_and_ties_keep_the_first() {
        assert!(np_min(f64::NAN, 1.0).is_nan() && np_min(1.0, f64::NAN).is_nan());
        assert!(np_max(f64::NAN, 1.0).is_nan() && np_max(1.0, f64::NAN).is_nan());
        assert_eq!((np_min(1.0, 2.0), np_max(1.0, 2.0)), (1.0, 2.0));
        // a signed-zero tie: the first operand, as numpy's `a <= b ? a : b`
        assert!(np_min(0.0, -0.0).is_sign_positive() && np_min(-0.0, 0.0).is_sign_negative());
        assert!(np_max(0.0, -0.0).is_sign_positive() && np_max(-0.0, 0.0).is_sign_negative());
    }
}
