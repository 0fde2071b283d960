//! The Sova allocator (docs/design.md#sova-allocator): each host's link shared among its
//! VMs' flows, work-conserving, weighted max-min above the SLA floors, for one host (the
//! registered allocator object) or every host of a fleet (the agents' and the simulator's
//! bandwidth step) at once.
//!
//! Per flow: ceiling `hi = min(demand, SLA max, max_pps · packet_bytes · 8)`, floor
//! `lo = min(SLA min, hi)`. A host whose floors sum above its capacity scales them down
//! (`lo · (capacity / Σlo)`); otherwise its rates are [`clamped_fill`] of the capacity.
//! Sums are [`fsum`] (correctly rounded, as Python's `math.fsum`), so every rate is the
//! float the readable per-host form (`tests/bandwidth_oracle.py`) computes, and a sum
//! `math.fsum` refuses (an intermediate overflow, `inf + -inf`) is refused here too.

use crate::sum;
use crate::waterfill::{InputError, Layout};

/// [`sum::fsum`]'s float, fast where it can be proven: a compensated sum (each addition's
/// exact error by TwoSum, the errors summed) is returned when its error bound puts the
/// exact sum strictly inside the rounding interval of the result, so it is the correctly
/// rounded sum; otherwise (near a rounding tie, non-finite values or an overflow, a sum at
/// or near zero or `f64::MAX`) [`sum::fsum`] itself decides, errors included. Shewchuk's
/// partials cost about ten times as much per value, and the bandwidth period sums every
/// host's flows several times a period.
/// `values` gives the values, twice when the fast sum cannot decide.
pub fn fsum<I, F>(values: F) -> Result<f64, InputError>
where
    I: Iterator<Item = f64>,
    F: Fn() -> I,
{
    let (mut s, mut e, mut abs_e, mut n) = (0.0f64, 0.0f64, 0.0f64, 0usize);
    for x in values() {
        let t = s + x;
        let bp = t - s;
        let err = (s - (t - bp)) + (x - bp);
        s = t;
        e += err;
        abs_e += err.abs();
        n += 1;
    }
    if abs_e == 0.0 && s.is_finite() {
        // every addition was exact (and nothing overflowed: inf and NaN absorb), so `s`
        // is the exact sum, which `sum::fsum` returns as is (+0.0 for a zero sum): the
        // common case of a host's floors all zero, which the bound below cannot decide
        return Ok(if s == 0.0 { 0.0 } else { s });
    }
    let r = s + e;
    let a = r.abs();
    // inf and NaN absorb: a finite `r` means every value and every running sum was finite
    if a.is_finite() && (f64::MIN_POSITIVE..=2f64.powi(1000)).contains(&a) {
        let bp = r - s;
        let err = (s - (r - bp)) + (e - bp); // exactly s + e - r
        // the float sum of n error terms is within (n - 1)·u·Σ|errors| of theirs: doubled
        // (and the computed Σ|errors| rounded) into 4·(n + 1)·u·Σ|errors|
        let bound = 4.0 * (n as f64 + 1.0) * (f64::EPSILON / 2.0) * abs_e;
        let bits = a.to_bits();
        let gap = (a - f64::from_bits(bits - 1)).min(f64::from_bits(bits + 1) - a);
        if err.abs() + bound < gap / 2.0 {
            return Ok(r);
        }
    }
    sum::fsum(values())
}

/// Python's `min(a, b)`: `b` only when it is smaller (ties and NaN keep `a`).
fn py_min(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

/// Python's `max(a, b)`: `b` only when it is larger.
fn py_max(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// Weighted max-min fill: `x_i = clamp(λ·w_i, lo_i, hi_i)` with `Σx = target` (`target`
/// clamped into `[Σlo, Σhi]`), floors counting toward the fair share. λ is found exactly,
/// by linear interpolation between the breakpoints of the piecewise-linear fill curve
/// (where some flow reaches its floor or its ceiling, `lo_i / w_i` and `hi_i / w_i`), not by
/// bisection, so the answer does not depend on a tolerance. Weights must be > 0. A sum
/// that [`fsum`] refuses is an error naming what was summed.
pub fn clamped_fill(
    target: f64,
    lo: &[f64],
    hi: &[f64],
    w: &[f64],
    out: &mut [f64],
) -> Result<(), InputError> {
    let n = lo.len();
    if n == 0 {
        return Ok(());
    }
    let named = |what: &str, e: InputError| InputError(format!("{what}: {}", e.0));
    if target >= fsum(|| hi.iter().copied()).map_err(|e| named("hi", e))? {
        out.copy_from_slice(hi);
        return Ok(());
    }
    if target <= fsum(|| lo.iter().copied()).map_err(|e| named("lo", e))? {
        out.copy_from_slice(lo);
        return Ok(());
    }
    let at = |lam: f64, i: usize| py_min(hi[i], py_max(lo[i], lam * w[i]));
    let filled = |lam: f64| {
        fsum(|| (0..n).map(|i| at(lam, i))).map_err(|e| named(&format!("the fill at λ = {lam}"), e))
    };
    // the breakpoints, each value once (the first of equal ones, as a Python set keeps it)
    let mut points: Vec<f64> = Vec::with_capacity(2 * n);
    for x in (0..n)
        .map(|i| lo[i] / w[i])
        .chain((0..n).map(|i| hi[i] / w[i]))
    {
        if !points.contains(&x) {
            points.push(x);
        }
    }
    points.sort_by(|a, b| a.total_cmp(b));
    let (mut prev_lam, mut prev_f) = (0.0, filled(0.0)?);
    let mut lam_star = points[points.len() - 1];
    for &lam in &points {
        let f = filled(lam)?;
        if f >= target {
            // ((target − f₀)·(λ − λ₀)) / (f − f₀) + λ₀, in the readable form's order
            lam_star = if f == prev_f {
                lam
            } else {
                prev_lam + (target - prev_f) * (lam - prev_lam) / (f - prev_f)
            };
            break;
        }
        (prev_lam, prev_f) = (lam, f);
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = at(lam_star, i);
    }
    Ok(())
}

/// Each flow's SLA and what was measured of it: `demand` one value per flow, the other
/// columns one per flow too, or, with `vm`, one per VM (flow `k`'s at `vm[k]`, checked by
/// the caller to be in range).
pub struct Flows<'a> {
    pub demand: &'a [f64],
    pub vm: Option<&'a [i64]>,
    pub minimum: &'a [f64],
    /// inf: no SLA maximum
    pub maximum: &'a [f64],
    /// NaN: no SLA packet rate
    pub max_pps: &'a [f64],
    pub packet_bytes: &'a [f64],
    pub weight: &'a [f64],
}

/// The Sova allocator for every link of `layout` (link `h`'s flows in the order the
/// per-host form sees them); `out[i]` is flow `i`'s rate in bit/s. A link whose sums
/// [`fsum`] refuses is an error naming the link.
pub fn sova_allocate(
    capacity: &[f64],
    layout: &Layout<'_>,
    f: &Flows<'_>,
    out: &mut [f64],
) -> Result<(), InputError> {
    check_allocation(capacity, layout, f, out)?;
    sova_allocate_links(capacity, layout, f, 0..capacity.len(), |k, r| out[k] = r)
}

/// [`sova_allocate`]'s arrays: the flows' and the links' lengths.
fn check_allocation(
    capacity: &[f64],
    layout: &Layout<'_>,
    f: &Flows<'_>,
    out: &[f64],
) -> Result<(), InputError> {
    let n = match f.vm {
        Some(vm) if vm.len() != f.demand.len() => {
            return Err(InputError(format!(
                "vm: {} values for {} flows",
                vm.len(),
                f.demand.len()
            )));
        }
        Some(_) => f.minimum.len(),
        None => f.demand.len(),
    };
    for (name, len) in [
        ("minimum", f.minimum.len()),
        ("maximum", f.maximum.len()),
        ("max_pps", f.max_pps.len()),
        ("packet_bytes", f.packet_bytes.len()),
        ("weight", f.weight.len()),
    ] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} flows")));
        }
    }
    if out.len() != f.demand.len() {
        return Err(InputError(format!(
            "out: {} values for {} flows",
            out.len(),
            f.demand.len()
        )));
    }
    if capacity.len() != layout.links() {
        return Err(InputError(format!(
            "capacity: {} values for {} links",
            capacity.len(),
            layout.links()
        )));
    }
    Ok(())
}

/// [`sova_allocate`] with the links shared among `threads` threads in runs of whole links
/// (each link's allocation is its own: the same rates, the same first error, whatever
/// the threads). Small layouts stay on this thread.
pub fn sova_allocate_threads(
    capacity: &[f64],
    layout: &Layout<'_>,
    f: &Flows<'_>,
    out: &mut [f64],
    threads: usize,
) -> Result<(), InputError> {
    crate::tick::check_threads(threads)?;
    if threads == 1 || f.demand.len() <= crate::tick::RUN {
        return sova_allocate(capacity, layout, f, out);
    }
    check_allocation(capacity, layout, f, out)?;
    // runs of consecutive links of about RUN flows each
    let mut runs = Vec::new();
    let (mut first, mut flows) = (0, 0);
    for h in 0..capacity.len() {
        flows += layout.row_len(h);
        if flows >= crate::tick::RUN {
            runs.push(first..h + 1);
            (first, flows) = (h + 1, 0);
        }
    }
    if first < capacity.len() {
        runs.push(first..capacity.len());
    }
    // each run's rates (or its first error), written back in link order below
    type Rates = Result<Vec<(usize, f64)>, InputError>;
    let mut got: Vec<Option<Rates>> = runs.iter().map(|_| None).collect();
    crate::parallel::with_threads(threads, |pool| {
        let work: Vec<_> = runs.into_iter().zip(got.iter_mut()).collect();
        pool.for_each(work, |(links, slot)| {
            let mut rates = Vec::new();
            let r = sova_allocate_links(capacity, layout, f, links, |k, x| rates.push((k, x)));
            *slot = Some(r.map(|()| rates));
        });
    });
    for run in got.into_iter().flatten() {
        for (k, r) in run? {
            out[k] = r;
        }
    }
    Ok(())
}

/// The links `links` of [`sova_allocate`] in order, each flow's rate to `emit`.
fn sova_allocate_links(
    capacity: &[f64],
    layout: &Layout<'_>,
    f: &Flows<'_>,
    links: std::ops::Range<usize>,
    mut emit: impl FnMut(usize, f64),
) -> Result<(), InputError> {
    let (mut lo, mut hi, mut w, mut rates) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut flows: Vec<usize> = Vec::new();
    for h in links {
        let cap = capacity[h];
        flows.clear();
        flows.extend(layout.row(h));
        lo.clear();
        hi.clear();
        w.clear();
        for &k in &flows {
            let i = f.vm.map_or(k, |vm| vm[k] as usize);
            let pps_limit = if f.max_pps[i].is_nan() {
                f64::INFINITY
            } else {
                f.max_pps[i] * f.packet_bytes[i] * 8.0
            };
            let ceiling = py_min(py_min(f.demand[k], f.maximum[i]), pps_limit);
            hi.push(ceiling);
            lo.push(py_min(f.minimum[i], ceiling));
            w.push(f.weight[i]);
        }
        rates.clear();
        rates.resize(flows.len(), 0.0);
        let at_link = |e: InputError| InputError(format!("link {h}: {}", e.0));
        let floor_total = fsum(|| lo.iter().copied()).map_err(at_link)?;
        if floor_total > cap {
            // guarantees over-committed: every one loses the same fraction
            let scale = cap / floor_total;
            for (r, &x) in rates.iter_mut().zip(&lo) {
                *r = x * scale;
            }
        } else {
            clamped_fill(cap, &lo, &hi, &w, &mut rates).map_err(at_link)?;
        }
        for (&k, &r) in flows.iter().zip(&rates) {
            emit(k, r);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_sums_take_the_short_cut_with_math_fsum_bits() {
        // sums whose every addition is exact (a host's floors all zero, whole numbers,
        // subnormals): the same bits as the exact partials, +0.0 for a zero sum whatever
        // the zeros' signs; an overflow or an infinity still goes to the partials' verdict
        let tiny = f64::from_bits(1);
        let runs: [&[f64]; 8] = [
            &[],
            &[0.0; 20],
            &[-0.0],
            &[-0.0, -0.0, 0.0],
            &[1.0, 2.0, -3.0],
            &[tiny, tiny, -tiny],
            &[3e9, 1e9, 2.5e9],
            &[-5e8, 0.0, -2.5e8],
        ];
        for run in runs {
            let got = fsum(|| run.iter().copied()).unwrap();
            let want = sum::fsum(run.iter().copied()).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{run:?}");
        }
        assert!(fsum(|| [f64::MAX, f64::MAX].into_iter()).is_err());
        assert!(
            fsum(|| [f64::INFINITY, 1.0].into_iter())
                .unwrap()
                .is_infinite()
        );
        assert!(fsum(|| [f64::INFINITY, f64::NEG_INFINITY].into_iter()).is_err());
    }

    #[test]
    fn the_fast_sum_is_math_fsum() {
        // random runs of 1-40 values at mixed scales and signs, ties a plain sum rounds
        // wrongly, cancellations to zero and sums near a power of two: every one equals
        // the exact partials' sum, to the bit
        let mut d = crate::rng::Draws::new(7, 0, 0, 0, 0);
        let u = f64::EPSILON;
        let fixed: [&[f64]; 9] = [
            &[],
            &[0.1, 0.2, 0.3],
            &[1e16, 1.0, -1e16],
            &[1.0, u / 2.0, u / 4.0],
            &[1.0, u / 2.0, -u / 4.0],
            &[2f64.powi(33), 2f64.powi(-20), 2f64.powi(-20)],
            &[1.0, -1.0, 0.0, -0.0],
            // over a tie by less than the error terms' float sum keeps: the compensated
            // sum alone rounds it down to 1.0, math.fsum up
            &[1.0, u / 2.0, 2f64.powi(-110)],
            &[1.0, u / 2.0, -(2f64.powi(-110))],
        ];
        let mut runs: Vec<Vec<f64>> = fixed.iter().map(|r| r.to_vec()).collect();
        for k in 0..20_000 {
            let n = 1 + (d.uniform() * 40.0) as usize;
            let run = (0..n)
                .map(|_| {
                    let scale = match k % 4 {
                        0 => 1e9,                                         // link rates
                        1 => 2f64.powi((d.uniform() * 80.0) as i32 - 40), // mixed scales
                        2 => 2f64.powi(33),                               // near one power of two
                        _ => 1.0,
                    };
                    let x = (d.uniform() * 2.0 - if k % 3 == 0 { 1.0 } else { 0.0 }) * scale;
                    if k % 5 == 0 {
                        (x * 1024.0).round() / 1024.0
                    } else {
                        x
                    } // ties
                })
                .collect();
            runs.push(run);
        }
        for run in runs {
            let want = sum::fsum(run.iter().copied()).unwrap();
            let got = fsum(|| run.iter().copied()).unwrap();
            assert_eq!(got.to_bits(), want.to_bits(), "{run:?}");
        }
    }

    #[test]
    fn clamped_fill_table() {
        // (target, lo, hi, w, rates): λ where Σ clamp(λ·w, lo, hi) = target
        type Case<'a> = (f64, &'a [f64], &'a [f64], &'a [f64], &'a [f64]);
        let table: [Case; 5] = [
            // equal weights, no floors: 5 each
            (10.0, &[0.0, 0.0], &[10.0, 10.0], &[1.0, 1.0], &[5.0, 5.0]),
            // a floor of 7 above the fair share 5 keeps 7, the other takes the rest, 3
            (10.0, &[0.0, 7.0], &[10.0, 10.0], &[1.0, 1.0], &[3.0, 7.0]),
            // weights 1:3 -> λ = 2.5: 2.5 and 7.5
            (10.0, &[0.0, 0.0], &[10.0, 10.0], &[1.0, 3.0], &[2.5, 7.5]),
            // a ceiling of 2 binds; the other takes 8
            (10.0, &[0.0, 0.0], &[2.0, 10.0], &[1.0, 1.0], &[2.0, 8.0]),
            // target above Σhi: every flow at its ceiling
            (50.0, &[1.0, 0.0], &[2.0, 10.0], &[1.0, 1.0], &[2.0, 10.0]),
        ];
        for (target, lo, hi, w, want) in table {
            let mut out = vec![0.0; lo.len()];
            clamped_fill(target, lo, hi, w, &mut out).unwrap();
            assert_eq!(out, want, "target {target} lo {lo:?} hi {hi:?} w {w:?}");
        }
    }

    #[test]
    fn clamped_fill_refuses_what_math_fsum_refuses() {
        // two ceilings of 1e308 sum past f64::MAX: math.fsum raises, and so does the fill
        // (it used to go on with a wrong Σhi and give 1.0 each for a target of 1.0)
        let mut out = [0.0; 2];
        let e = clamped_fill(1.0, &[0.0, 0.0], &[1e308, 1e308], &[1.0, 1.0], &mut out);
        assert_eq!(e.unwrap_err().0, "hi: intermediate overflow in fsum");
        let e = clamped_fill(1.0, &[1e308, 1e308], &[2.0, 2.0], &[1.0, 1.0], &mut out);
        assert_eq!(e.unwrap_err().0, "lo: intermediate overflow in fsum");
        let inf = f64::INFINITY;
        let e = clamped_fill(1.0, &[0.0, -inf], &[inf, -inf], &[1.0, 1.0], &mut out);
        assert_eq!(e.unwrap_err().0, "hi: -inf + inf in fsum");
        // an infinite sum that math.fsum gives stands: Σhi = inf, and the fill at λ = 2 is
        // 2 + 2 = 4 >= 1, so λ = 0 + (1 − 0)·(2 − 0)/(4 − 0) = 0.5
        clamped_fill(1.0, &[0.0, 0.0], &[inf, 2.0], &[1.0, 1.0], &mut out).unwrap();
        assert_eq!(out, [0.5, 0.5]);
    }

    #[test]
    fn sova_per_link() {
        // link 0 (1 Gbit/s): flows 0, 1 demand 0.8 and 0.6 Gbit/s, flow 1 guaranteed 0.5:
        // floors 0 and 0.5, fill 1.0 -> λ = 0.5: 0.5 and 0.5.
        // link 1 (1 Gbit/s): floors 0.8 + 0.7 over-committed -> scaled by 1/1.5.
        // link 2 (10 Gbit/s): flow 4's 1,000 pps of 1,250 B caps it at 10 Mbit/s.
        let g = 1e9;
        let order = [0, 1, 2, 3, 4];
        let start = [0, 2, 4, 5];
        let layout = Layout::new(&order, &start, 5).unwrap();
        let flows = Flows {
            demand: &[0.8 * g, 0.6 * g, g, g, g],
            vm: None,
            minimum: &[0.0, 0.5 * g, 0.8 * g, 0.7 * g, 0.0],
            maximum: &[f64::INFINITY; 5],
            max_pps: &[f64::NAN, f64::NAN, f64::NAN, f64::NAN, 1000.0],
            packet_bytes: &[1500.0, 1500.0, 1500.0, 1500.0, 1250.0],
            weight: &[1.0; 5],
        };
        let mut out = [0.0; 5];
        sova_allocate(&[g, g, 10.0 * g], &layout, &flows, &mut out).unwrap();
        let scale = g / (0.8 * g + 0.7 * g);
        assert_eq!(
            out,
            [0.5 * g, 0.5 * g, 0.8 * g * scale, 0.7 * g * scale, 1e7]
        );
        let e = sova_allocate(&[g], &layout, &flows, &mut out).unwrap_err();
        assert_eq!(e.0, "capacity: 1 values for 3 links");
        // link 0's two flows of 1e308 bit/s: their ceilings overflow the fill's Σhi
        let huge = Flows {
            demand: &[1e308, 1e308, g, g, g],
            ..flows
        };
        let e = sova_allocate(&[g, g, 10.0 * g], &layout, &huge, &mut out).unwrap_err();
        assert_eq!(e.0, "link 0: hi: intermediate overflow in fsum");
    }
}
