//! Hotspot verdicts (docs/design.md#hotspots): per host and resource, how many of the
//! window's observations exceed α, the AR(1) forecast of the next one fitted on the same
//! window (Sova eq. 6), and whether both say hot (k of n over α and the forecast over α).
//! For one host (the readable `HotspotDetector.assess`) or every host of a round at once
//! (the manager's round).
//!
//! Sums run left to right over the window, oldest first, as Python's `sum` over a list
//! does (and the manager's earlier numpy form did, one column at a time).

use crate::waterfill::InputError;

/// Windows of `hosts` hosts, each `n_obs` observations (oldest first) of `width` resources:
/// `values[(h * n_obs + i) * width + r]`, as a C-ordered (hosts, n_obs, width) array.
pub struct Windows<'a> {
    pub values: &'a [f64],
    pub n_obs: usize,
    pub width: usize,
}

/// One verdict per host and resource, in the windows' (host, resource) order.
#[derive(Debug, Default, PartialEq)]
pub struct Verdicts {
    /// observations above α
    pub over: Vec<i64>,
    /// the lag-1 autocorrelation φ, in [-1, 1] (0 for a window without variance)
    pub phi: Vec<f64>,
    /// μ + φ(x_last − μ)
    pub forecast: Vec<f64>,
    /// over ≥ k and forecast > α
    pub hot: Vec<bool>,
}

/// The verdicts of every window. `n_obs` of 0 is refused (a host without observations has
/// no verdict; the callers say so themselves).
pub fn verdicts(w: &Windows<'_>, alpha: f64, k: i64) -> Result<Verdicts, InputError> {
    let (l, r) = (w.n_obs, w.width);
    if l == 0 || r == 0 {
        return Err(InputError(format!(
            "windows: {l} observations of {r} resources (both must be > 0)"
        )));
    }
    if !w.values.len().is_multiple_of(l * r) {
        return Err(InputError(format!(
            "windows: {} values are not whole windows of {l} x {r}",
            w.values.len()
        )));
    }
    let cells = w.values.len() / l;
    let mut out = Verdicts {
        over: Vec::with_capacity(cells),
        phi: Vec::with_capacity(cells),
        forecast: Vec::with_capacity(cells),
        hot: Vec::with_capacity(cells),
    };
    let n = l as f64;
    for window in w.values.chunks_exact(l * r) {
        for j in 0..r {
            let x = |i: usize| window[i * r + j];
            let mut total = x(0);
            for i in 1..l {
                total += x(i);
            }
            let mean = total / n;
            let dev = |i: usize| x(i) - mean;
            let mut var = dev(0) * dev(0);
            for i in 1..l {
                var += dev(i) * dev(i);
            }
            let mut cov = 0.0;
            if l > 1 {
                cov = dev(0) * dev(1);
                for i in 1..l - 1 {
                    cov += dev(i) * dev(i + 1);
                }
            }
            // A "constant" window built from float sums has a variance of rounding noise;
            // dividing noise by noise would give an arbitrary φ.
            let flat = var <= 1e-24 * (mean * mean).max(1.0) * n;
            let phi = if flat { 0.0 } else { cov / var };
            let phi = phi.clamp(-1.0, 1.0);
            let forecast = mean + phi * (x(l - 1) - mean);
            let over = (0..l).filter(|&i| x(i) > alpha).count() as i64;
            out.over.push(over);
            out.phi.push(phi);
            out.forecast.push(forecast);
            out.hot.push(over >= k && forecast > alpha);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rising_link_is_hot_and_a_cooling_one_is_not() {
        // two hosts, 5 observations of (cpu, net). Host 0's net: 0.7, 0.7, 0.7, 0.95, 0.95
        // (mean 0.8; deviations -0.1 x3, 0.15 x2: var 0.075, cov 0.01 + 0.01 - 0.015 +
        // 0.0225 = 0.0275, φ = 0.3667, forecast 0.8 + 0.3667 x 0.15 = 0.855 > 0.75 with 2
        // of 5 over: k = 2 says hot). Host 1's net 0.9, 0.9, 0.9, 0.5, 0.5: 3 over, but
        // (mean 0.74, var 0.192, cov 0.0704, φ 0.3667) the forecast 0.74 - 0.3667 x 0.24 =
        // 0.652 stays under 0.75. CPU constant 0.2: φ 0, not hot.
        let v = verdicts(
            &Windows {
                values: &[
                    0.2, 0.7, 0.2, 0.7, 0.2, 0.7, 0.2, 0.95, 0.2, 0.95, // host 0
                    0.2, 0.9, 0.2, 0.9, 0.2, 0.9, 0.2, 0.5, 0.2, 0.5, // host 1
                ],
                n_obs: 5,
                width: 2,
            },
            0.75,
            2,
        )
        .unwrap();
        assert_eq!(v.over, [0, 2, 0, 3]);
        assert_eq!(v.hot, [false, true, false, false]);
        assert_eq!(v.phi[0], 0.0);
        assert!((v.phi[1] - 0.0275 / 0.075).abs() < 1e-12);
        assert!((v.forecast[1] - (0.8 + 0.0275 / 0.075 * 0.15)).abs() < 1e-12);
        assert!((v.forecast[3] - (0.74 - 0.0704 / 0.192 * 0.24)).abs() < 1e-12);
    }

    #[test]
    fn one_observation_forecasts_itself() {
        let v = verdicts(
            &Windows {
                values: &[0.9],
                n_obs: 1,
                width: 1,
            },
            0.75,
            1,
        )
        .unwrap();
        assert_eq!(
            (v.over[0], v.phi[0], v.forecast[0], v.hot[0]),
            (1, 0.0, 0.9, true)
        );
    }

    #[test]
    fn ragged_windows_are_refused() {
        let w = Windows {
            values: &[0.1; 7],
            n_obs: 2,
            width: 3,
        };
        assert_eq!(
            verdicts(&w, 0.5, 1).unwrap_err().0,
            "windows: 7 values are not whole windows of 2 x 3"
        );
    }
}
