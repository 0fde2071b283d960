//! Hotness (docs/design.md#hotness): how hot a host's load, or a VM's share of it, is. The
//! hotspot policy only ranks by it: the VM to move (its migration factor) and the cold spot
//! to move it to. For one host or VM (`coordinate`, the mover choice, Watcher's plug-in)
//! or every host of a round at once (the manager's ranking of cold spots).
//!
//! The operations run in the order the readable form (tests/hotness_oracle.py) runs them,
//! so both give the same float: volume's running product from 1.0, skewness's sums left
//! to right from the first value. No fused multiply-add: Rust does not contract `a * b + c`.

use crate::waterfill::InputError;

/// Which hotness a caller ranks by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Sandpiper's `1 / Π(1 − min(u_i, clamp))`: 1 when idle, large when saturated.
    Volume,
    /// Xiao et al.'s `sqrt(Σ(u_i / mean(u) − 1)²)`, Sova's eq. 5: imbalance, not load.
    Skewness,
}

/// Volume of one load vector. `clamp` (< 1) keeps a saturated resource large but finite.
pub fn volume(u: &[f64], clamp: f64) -> f64 {
    let mut product = 1.0;
    for &x in u {
        // `x.min(clamp)` is Python's `min(x, clamp)` for the finite values let in
        product *= 1.0 - x.min(clamp);
    }
    1.0 / product
}

/// Skewness of one load vector (at least one value). An all-zero vector scores 0: no load,
/// no imbalance (the formula would divide 0 by 0).
pub fn skewness(u: &[f64]) -> f64 {
    let mut total = u[0];
    for &x in &u[1..] {
        total += x;
    }
    let mean = total / u.len() as f64;
    if mean == 0.0 {
        return 0.0;
    }
    let d = |x: f64| x / mean - 1.0;
    // d * d rather than powi(2): the readable form multiplies
    let mut squares = d(u[0]) * d(u[0]);
    for &x in &u[1..] {
        squares += d(x) * d(x);
    }
    squares.sqrt()
}

/// Hotness of one load vector.
pub fn hotness_of(u: &[f64], metric: Metric, clamp: f64) -> f64 {
    match metric {
        Metric::Volume => volume(u, clamp),
        Metric::Skewness => skewness(u),
    }
}

/// Hotness of every row of `values` (rows of `width` resources, C order), one per row.
/// A value that is not finite or is negative is refused, naming its position.
pub fn hotness(
    values: &[f64],
    width: usize,
    metric: Metric,
    clamp: f64,
) -> Result<Vec<f64>, InputError> {
    if width == 0 || !values.len().is_multiple_of(width) {
        return Err(InputError(format!(
            "values: {} values are not whole rows of {width} resources (width must be > 0)",
            values.len()
        )));
    }
    if !(clamp.is_finite() && (0.0..1.0).contains(&clamp)) {
        return Err(InputError(format!("clamp must be in [0, 1), got {clamp}")));
    }
    if let Some(i) = values.iter().position(|x| !(x.is_finite() && *x >= 0.0)) {
        return Err(InputError(format!(
            "values[{i}] must be finite and >= 0, got {}",
            values[i]
        )));
    }
    Ok(values
        .chunks_exact(width)
        .map(|u| hotness_of(u, metric, clamp))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLAMP: f64 = 1.0 - 1e-3;

    #[test]
    fn volume_table() {
        // (cpu, mem, net) -> 1 / ((1 - cpu)(1 - mem)(1 - net)), each u clamped to 0.999
        let cases: &[([f64; 3], f64)] = &[
            ([0.0, 0.0, 0.0], 1.0),    // idle: 1 / (1 · 1 · 1)
            ([0.5, 0.0, 0.0], 2.0),    // 1 / 0.5
            ([0.5, 0.5, 0.5], 8.0),    // 1 / 0.125
            ([0.2, 0.5, 0.75], 10.0),  // 1 / (0.8 · 0.5 · 0.25) = 1 / 0.1
            ([1.0, 0.0, 0.0], 1e3),    // saturated: 1 / (1 - 0.999) = 1 / 1e-3
            ([1.04, 0.0, 0.0], 1e3),   // measurement slack above 1: clamped the same
            ([1.0, 1.0, 1.0], 1e9),    // all saturated: (1e-3)^-3, large but finite
            ([0.25, 0.75, 0.0], 5.33), // 1 / (0.75 · 0.25) = 16 / 3
        ];
        for (u, want) in cases {
            let got = volume(u, CLAMP);
            assert!(
                (got - want).abs() <= 1e-3 * want,
                "volume({u:?}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn skewness_table() {
        // sqrt(Σ (u_i / mean - 1)^2)
        let cases: &[(&[f64], f64)] = &[
            (&[1.0, 1.0, 1.0], 0.0),           // uniformly saturated: eq. 5 says "cold"
            (&[0.0, 0.0, 0.0], 0.0),           // idle: 0 rather than 0 / 0
            (&[0.0, 0.0, 1.0], 6f64.sqrt()),   // mean 1/3: ratios 0, 0, 3 -> 1 + 1 + 4
            (&[0.2, 0.4, 0.6], 0.5f64.sqrt()), // mean 0.4: ratios .5, 1, 1.5 -> .25 + 0 + .25
            (&[0.0, 0.0, 0.1], 6f64.sqrt()),   // scale-free: as (0, 0, 1)
            (&[0.3, 0.9], 0.5f64.sqrt()),      // mean 0.6: ratios .5, 1.5 -> .25 + .25
            (&[0.7], 0.0),                     // one resource: ratio 1
        ];
        for (u, want) in cases {
            let got = skewness(u);
            assert!(
                (got - want).abs() < 1e-12,
                "skewness({u:?}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn the_order_of_operations_is_the_readable_forms() {
        // 0.1 + 0.2 + 0.3 is 0.6000000000000001 left to right and 0.6 right to left; the
        // mean, and so every ratio, follows the left-to-right sum
        let u = [0.1, 0.2, 0.3];
        let mean: f64 = (0.1 + 0.2 + 0.3) / 3.0;
        let want = ((0.1 / mean - 1.0) * (0.1 / mean - 1.0)
            + (0.2 / mean - 1.0) * (0.2 / mean - 1.0)
            + (0.3 / mean - 1.0) * (0.3 / mean - 1.0))
            .sqrt();
        assert_eq!(skewness(&u), want);
        // the running product from 1.0, left to right
        let v = [0.3, 0.7, 0.1];
        assert_eq!(
            volume(&v, CLAMP),
            1.0 / (((1.0 - 0.3) * (1.0 - 0.7)) * (1.0 - 0.1))
        );
    }

    #[test]
    fn rows_and_refusals() {
        let got = hotness(&[0.5, 0.0, 0.0, 0.0, 0.0, 1.0], 3, Metric::Volume, CLAMP).unwrap();
        assert_eq!(got, [2.0, 1.0 / (1.0 - CLAMP)]);
        let got = hotness(&[0.0, 0.0, 1.0], 3, Metric::Skewness, CLAMP).unwrap();
        assert_eq!(got, [6f64.sqrt()]);
        assert_eq!(
            hotness(&[0.1, -0.1, 0.0], 3, Metric::Volume, CLAMP)
                .unwrap_err()
                .0,
            "values[1] must be finite and >= 0, got -0.1"
        );
        assert_eq!(
            hotness(&[0.1, f64::NAN, 0.0], 3, Metric::Skewness, CLAMP)
                .unwrap_err()
                .0,
            "values[1] must be finite and >= 0, got NaN"
        );
        assert_eq!(
            hotness(&[0.1; 4], 3, Metric::Volume, CLAMP).unwrap_err().0,
            "values: 4 values are not whole rows of 3 resources (width must be > 0)"
        );
        assert!(hotness(&[0.1; 3], 3, Metric::Volume, 1.0).is_err());
        assert!(hotness(&[], 3, Metric::Volume, CLAMP).unwrap().is_empty());
    }
}
