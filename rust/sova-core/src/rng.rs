//! The simulated world's random draws: counter-based, so a draw is a function of its key.
//!
//! Every draw is named by `(seed, stream, vm, counter, draw)` (the scenario's seed; which
//! quantity; the VM; the tick or the VM's reset number; which draw of that tick) and hashed
//! into the start of its own SplitMix64 sequence (Steele, Lea and Flood, "Fast splittable
//! pseudorandom number generators", OOPSLA 2014: a Weyl sequence through a 64-bit
//! finalizer). No state is carried between draws, so a value never depends on which other
//! VMs drew before it, in what order, or on how many threads draw: the same seed gives the
//! same outputs on one thread or two (docs/design.md, the seed's contract).
//!
//! Written here rather than taken from `rand`/`rand_distr`: the contract is that a seed
//! gives the same simulated outputs for as long as the golden hashes pin them, and those
//! crates' value streams and algorithms have changed between versions (`rand_distr`'s
//! Poisson did), which would move every pinned output on a dependency bump. The algorithms
//! below are few, short and textbook, each checked by moments and frequencies in the tests.
//! Transcendental functions are the platform libm's (`ln`, `exp`, `cos`), as numpy's are.

use crate::waterfill::InputError;

/// The golden ratio's 64-bit Weyl increment (SplitMix64's gamma).
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's finalizer (Stafford's "Mix13"): a bijection of `u64` whose output bits
/// each depend on every input bit.
#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Which quantity a draw is for: part of every key, so streams never share values.
pub mod stream {
    /// each VM's lognormal rate jitter, one per tick
    pub const RATE_JITTER: u64 = 1;
    /// each VM's normal CPU jitter, one per tick
    pub const CPU_JITTER: u64 = 2;
    /// each request VM's Poisson arrivals, one per tick
    pub const ARRIVALS: u64 = 3;
    /// a renewed network duty cycle's length (draw = the renewal's pass in the tick)
    pub const NET_CYCLE: u64 = 4;
    /// a renewed CPU duty cycle's length, likewise
    pub const CPU_CYCLE: u64 = 5;
    /// a workload change's new cycles (counter = the VM's reset number, draw = 0..4)
    pub const RESET: u64 = 6;
}

/// A key's `(seed, stream)` part folded through the finalizer, as [`Draws::new`] starts.
#[inline(always)]
pub fn prefix(seed: u64, stream: u64) -> u64 {
    mix(mix(seed.wrapping_add(GAMMA)) ^ stream.wrapping_add(GAMMA))
}

/// A key's `(seed, stream, vm, counter)` part from its folded [`prefix`], as
/// [`Draws::after`] folds it before the draw's number.
#[inline(always)]
pub fn key(prefix: u64, vm: u64, counter: u64) -> u64 {
    let h = mix(prefix ^ vm.wrapping_add(GAMMA));
    mix(h ^ counter.wrapping_add(GAMMA))
}

/// VMs whose keys [`draws_each`] hashes at a time.
pub const BATCH: usize = 16;

/// `Draws::after(prefix, first + k, counter, 0)` for each k below [`BATCH`]. A key's
/// hashing is a chain of 64-bit multiplications; independent keys side by side let the
/// compiler put eight in one vector register where the processor multiplies 64-bit lanes
/// (AVX-512 DQ, detected at run time: the wheel is built for any x86-64). Integer
/// arithmetic: the same words whichever instructions compute them.
pub fn draws_each(prefix: u64, first: u64, counter: u64) -> [Draws; BATCH] {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512dq")
    {
        // SAFETY: the processor has both features the function is compiled for (checked
        // just above); it reads and writes nothing but its arguments and its result
        return unsafe { draws_each_avx512(prefix, first, counter) };
    }
    draws_each_plain(prefix, first, counter)
}

#[inline(always)]
fn draws_each_plain(prefix: u64, first: u64, counter: u64) -> [Draws; BATCH] {
    let mut out = [Draws { state: 0 }; BATCH];
    for (k, d) in out.iter_mut().enumerate() {
        *d = Draws::after(prefix, first.wrapping_add(k as u64), counter, 0);
    }
    out
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn draws_each_avx512(prefix: u64, first: u64, counter: u64) -> [Draws; BATCH] {
    draws_each_plain(prefix, first, counter)
}

/// For each `vms[k]`: its [`key`] at `counter` and the first uniform of its draw 0 (a
/// renewal's first pass), hashed together as [`draws_each`] does.
pub fn keys_each(prefix: u64, vms: &[u64; BATCH], counter: u64) -> ([u64; BATCH], [f64; BATCH]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512dq")
    {
        // SAFETY: as in draws_each
        return unsafe { keys_each_avx512(prefix, vms, counter) };
    }
    keys_each_plain(prefix, vms, counter)
}

#[inline(always)]
fn keys_each_plain(prefix: u64, vms: &[u64; BATCH], counter: u64) -> ([u64; BATCH], [f64; BATCH]) {
    let keys = vms.map(|vm| key(prefix, vm, counter));
    (keys, keys.map(|k| Draws::at(k, 0).uniform()))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512dq")]
fn keys_each_avx512(prefix: u64, vms: &[u64; BATCH], counter: u64) -> ([u64; BATCH], [f64; BATCH]) {
    keys_each_plain(prefix, vms, counter)
}

/// One draw's own sequence of uniform 64-bit words.
#[derive(Debug, Clone, Copy)]
pub struct Draws {
    state: u64,
}

impl Draws {
    /// The sequence of key `(seed, stream, vm, counter, draw)`: each part folded in through
    /// the finalizer. For a fixed prefix each step is a bijection of the next part, so two
    /// keys that differ in one part start apart; keys differing in several collide with
    /// probability about 2^-64.
    pub fn new(seed: u64, stream: u64, vm: u64, counter: u64, draw: u64) -> Self {
        Self::after(prefix(seed, stream), vm, counter, draw)
    }

    /// [`Draws::new`] from the key's `(seed, stream)` part folded once ([`prefix`]): the
    /// same sequence, two finalizer rounds fewer per VM in a batch.
    #[inline(always)]
    pub fn after(prefix: u64, vm: u64, counter: u64, draw: u64) -> Self {
        Self::at(key(prefix, vm, counter), draw)
    }

    /// [`Draws::after`] from the key's `(seed, stream, vm, counter)` part folded once
    /// ([`key`]): a VM's several draws of one tick fold their common part once.
    #[inline(always)]
    pub fn at(key: u64, draw: u64) -> Self {
        Draws {
            state: mix(key ^ draw.wrapping_add(GAMMA)),
        }
    }

    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// Uniform on [0, 1): the top 53 bits as a multiple of 2^-53 (every value exact).
    #[inline(always)]
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal by the ziggurat method with 128 layers, in Doornik's form
    /// ("An improved ziggurat method to generate normal random samples", 2005: the layer
    /// index from bits the uniform does not use, so the two are independent; the tail
    /// beyond R by Marsaglia's exponential method). About 98.8 % of draws are one word
    /// and one multiplication; Box–Muller's logarithm, root and cosine cost ~4× more.
    pub fn normal(&mut self) -> f64 {
        self.normal_in(ziggurat())
    }

    /// [`Draws::normal`] with the tables in hand: a caller drawing many normals looks
    /// them up once, not once a draw.
    #[inline]
    fn normal_in(&mut self, z: &Ziggurat) -> f64 {
        loop {
            let w = self.next_u64();
            let u = 2.0 * ((w >> 11) as f64 * (1.0 / (1u64 << 53) as f64)) - 1.0;
            let i = (w & 0x7F) as usize; // the low 7 bits: unused by u's 53
            if u.abs() < z.ratio[i] {
                return u * z.x[i]; // inside layer i's rectangle
            }
            if i == 0 {
                return self.normal_tail(u < 0.0);
            }
            let x = u * z.x[i];
            let f0 = (-0.5 * (z.x[i] * z.x[i] - x * x)).exp();
            let f1 = (-0.5 * (z.x[i + 1] * z.x[i + 1] - x * x)).exp();
            if f1 + self.uniform() * (f0 - f1) < 1.0 {
                return x; // under the density in layer i's wedge
            }
        }
    }

    /// A normal beyond `ZIG_R` (Marsaglia 1964): x = ln(u1)/R, y = ln(u2), accepted when
    /// -2y >= x².
    fn normal_tail(&mut self, negative: bool) -> f64 {
        loop {
            let x = (1.0 - self.uniform()).ln() / ZIG_R;
            let y = (1.0 - self.uniform()).ln();
            if -2.0 * y >= x * x {
                return if negative { x - ZIG_R } else { ZIG_R - x };
            }
        }
    }

    /// `exp(mu + sigma·Z)`, Z standard normal.
    pub fn lognormal(&mut self, mu: f64, sigma: f64) -> f64 {
        self.lognormal_in(ziggurat(), mu, sigma)
    }

    /// [`Draws::lognormal`] with the normal's tables in hand.
    #[inline]
    fn lognormal_in(&mut self, z: &Ziggurat, mu: f64, sigma: f64) -> f64 {
        (mu + sigma * self.normal_in(z)).exp()
    }

    /// Poisson of mean `lam` (finite, >= 0; callers check), as a float. Below 10 by
    /// inversion (sequential search of the CDF: expected `lam + 1` steps); from 10 by
    /// Hörmann's transformed rejection with squeeze, PTRS ("The transformed rejection
    /// method for generating Poisson random variables", Insurance: Mathematics and
    /// Economics 12, 1993), whose cost does not grow with `lam` (acceptance > 0.9 there).
    pub fn poisson(&mut self, lam: f64) -> f64 {
        if lam <= 0.0 {
            return 0.0;
        }
        if lam < 10.0 {
            return self.poisson_inversion(lam);
        }
        self.poisson_ptrs(lam)
    }

    fn poisson_inversion(&mut self, lam: f64) -> f64 {
        let u = self.uniform();
        let mut p = (-lam).exp(); // P(X = 0) >= e^-10 ~ 4.5e-5: no underflow
        let mut cdf = p;
        let mut k = 0.0;
        while u >= cdf {
            k += 1.0;
            p *= lam / k;
            if p <= cdf * f64::EPSILON {
                break; // the CDF has stopped moving in floating point: u is in its last ulp
            }
            cdf += p;
        }
        k
    }

    fn poisson_ptrs(&mut self, lam: f64) -> f64 {
        let slam = lam.sqrt();
        let b = 0.931 + 2.53 * slam;
        let a = -0.059 + 0.02483 * b;
        let inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
        let vr = 0.9277 - 3.6224 / (b - 2.0);
        loop {
            let u = self.uniform() - 0.5;
            let v = self.uniform();
            let us = 0.5 - u.abs();
            let k = ((2.0 * a / us + b) * u + lam + 0.43).floor();
            if us >= 0.07 && v <= vr {
                return k; // the squeeze: inside the hat's sure region
            }
            if k < 0.0 || (us < 0.013 && v > us) {
                continue;
            }
            // ln λ only here: most draws end at the squeeze above (the same value when
            // taken, so the same draws)
            if v.ln() + inv_alpha.ln() - (a / (us * us) + b).ln()
                <= -lam + k * lam.ln() - ln_gamma(k + 1.0)
            {
                return k;
            }
        }
    }
}

/// The ziggurat's rightmost layer edge and the area of each of its 128 layers (Marsaglia
/// and Tsang, "The Ziggurat Method for Generating Random Variables", JSS 2000).
const ZIG_R: f64 = 3.442_619_855_899;
const ZIG_V: f64 = 9.912_563_035_262_17e-3;

/// Layer edges `x[0..=128]` (x[0] = V/f(R), the base's width as a rectangle; x[1] = R;
/// x[128] = 0) and `ratio[i] = x[i+1]/x[i]`, the share of layer i that is inside the
/// density for sure.
#[derive(Debug)]
struct Ziggurat {
    x: [f64; 129],
    ratio: [f64; 128],
}

fn ziggurat() -> &'static Ziggurat {
    static TABLES: std::sync::OnceLock<Ziggurat> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        // every layer has area V, x[i-1]·(f(x[i]) - f(x[i-1])) = V with f(x) = exp(-x²/2)
        // (unnormalised), solved upward from R: x[i] = sqrt(-2 ln(V / x[i-1] + f(x[i-1])))
        let mut x = [0.0; 129];
        let mut f = (-0.5 * ZIG_R * ZIG_R).exp();
        x[0] = ZIG_V / f;
        x[1] = ZIG_R;
        for i in 2..128 {
            x[i] = (-2.0 * (ZIG_V / x[i - 1] + f).ln()).sqrt();
            f = (-0.5 * x[i] * x[i]).exp();
        }
        let mut ratio = [0.0; 128];
        for (i, r) in ratio.iter_mut().enumerate() {
            *r = x[i + 1] / x[i];
        }
        Ziggurat { x, ratio }
    })
}

/// `ln Γ(x)` for x >= 1 by Stirling's series with ten Bernoulli terms, shifted up to
/// x >= 7 and back by the recurrence `Γ(x+1) = xΓ(x)` (absolute error ~1e-15 there; the
/// form numpy's PTRS uses).
fn ln_gamma(x: f64) -> f64 {
    const A: [f64; 10] = [
        8.333_333_333_333_333e-2,
        -2.777_777_777_777_778e-3,
        7.936_507_936_507_937e-4,
        -5.952_380_952_380_952e-4,
        8.417_508_417_508_418e-4,
        -1.917_526_917_526_918e-3,
        6.410_256_410_256_41e-3,
        -2.955_065_359_477_124e-2,
        1.796_443_723_688_307e-1,
        -1.392_432_216_905_90,
    ];
    if x == 1.0 || x == 2.0 {
        return 0.0;
    }
    let n = if x <= 7.0 { (7.0 - x).floor() } else { 0.0 };
    let mut x0 = x + n;
    let x2 = 1.0 / (x0 * x0);
    let mut series = A[9];
    for a in A[..9].iter().rev() {
        series = series * x2 + a;
    }
    let mut gl = series / x0 + 0.5 * std::f64::consts::TAU.ln() + (x0 - 0.5) * x0.ln() - x0;
    for _ in 0..n as u32 {
        x0 -= 1.0;
        gl -= x0.ln();
    }
    gl
}

/// One tick's per-VM draws (`tick`: the world's tick number, from 0).
#[derive(Debug, Clone, PartialEq)]
pub struct TickDraws {
    /// each VM's rate jitter, lognormal(0, `rate_jitter`) (1 when `rate_jitter` is 0)
    pub jit: Vec<f64>,
    /// each VM's CPU jitter factor, `1 + N(0, cpu_jitter)` (1 when `cpu_jitter` is 0)
    pub cj: Vec<f64>,
    /// requests arriving at each VM, Poisson of `means[j]` for VM `asks[j]` (0 elsewhere)
    pub arrivals: Vec<f64>,
}

/// The keys of one tick's per-VM draws, their `(seed, stream)` parts folded once: what
/// [`tick_draws`] and `tick::offer` draw for VM `i`.
#[derive(Debug, Clone, Copy)]
pub struct TickKeys {
    rate: u64,
    cpu: u64,
    arrivals: u64,
    tick: u64,
    rate_jitter: f64,
    cpu_jitter: f64,
    /// the normals' tables, looked up once for the tick's draws
    zig: &'static Ziggurat,
}

impl TickKeys {
    pub fn new(seed: u64, tick: u64, rate_jitter: f64, cpu_jitter: f64) -> Self {
        TickKeys {
            rate: prefix(seed, stream::RATE_JITTER),
            cpu: prefix(seed, stream::CPU_JITTER),
            arrivals: prefix(seed, stream::ARRIVALS),
            tick,
            rate_jitter,
            cpu_jitter,
            zig: ziggurat(),
        }
    }

    /// VM `i`'s rate jitter: see [`TickDraws::jit`].
    #[inline]
    pub fn jit(&self, i: u64) -> f64 {
        self.jit_of(self.jit_draws(i))
    }

    /// VM `i`'s CPU jitter factor: see [`TickDraws::cj`].
    #[inline]
    pub fn cj(&self, i: u64) -> f64 {
        self.cj_of(self.cj_draws(i))
    }

    /// [`TickKeys::jit`] in two steps, the key's hashing ([`TickKeys::jit_draws`]) apart
    /// from the value: a batch hashes its VMs' keys in a loop of independent steps the
    /// processor overlaps, then draws from them.
    #[inline]
    pub fn jit_draws(&self, i: u64) -> Draws {
        Draws::after(self.rate, i, self.tick, 0)
    }

    /// [`TickKeys::jit_draws`] of VMs `first..first + BATCH`, hashed together.
    #[inline]
    pub fn jit_batch(&self, first: u64) -> [Draws; BATCH] {
        draws_each(self.rate, first, self.tick)
    }

    /// [`TickKeys::cj_draws`] of VMs `first..first + BATCH`, hashed together.
    #[inline]
    pub fn cj_batch(&self, first: u64) -> [Draws; BATCH] {
        draws_each(self.cpu, first, self.tick)
    }

    #[inline]
    pub fn jit_of(&self, mut d: Draws) -> f64 {
        if self.rate_jitter == 0.0 {
            return 1.0;
        }
        d.lognormal_in(self.zig, 0.0, self.rate_jitter)
    }

    /// [`TickKeys::cj`] in two steps, as [`TickKeys::jit_draws`].
    #[inline]
    pub fn cj_draws(&self, i: u64) -> Draws {
        Draws::after(self.cpu, i, self.tick, 0)
    }

    #[inline]
    pub fn cj_of(&self, mut d: Draws) -> f64 {
        if self.cpu_jitter == 0.0 {
            return 1.0;
        }
        self.cpu_jitter * d.normal_in(self.zig) + 1.0
    }

    /// VM `i`'s arrivals at mean `mean` (checked by [`check_asks`]).
    #[inline]
    pub fn arrivals(&self, i: u64, mean: f64) -> f64 {
        Draws::after(self.arrivals, i, self.tick, 0).poisson(mean)
    }
}

/// The requesting VMs `asks` (below `n`) and their means (finite, >= 0), or the first
/// value that is not, named.
pub fn check_asks(asks: &[i64], means: &[f64], n: usize) -> Result<(), InputError> {
    if means.len() != asks.len() {
        return Err(InputError(format!(
            "means: {} values for {} requesting VMs",
            means.len(),
            asks.len()
        )));
    }
    check_indices("asks", asks, n)?;
    if let Some((j, m)) = means
        .iter()
        .enumerate()
        .find(|(_, m)| !(m.is_finite() && **m >= 0.0))
    {
        return Err(InputError(format!(
            "means[{j}]: {m} is not a finite mean >= 0"
        )));
    }
    Ok(())
}

/// The draws of tick `tick` for `n` VMs: see [`TickDraws`].
pub fn tick_draws(
    seed: u64,
    tick: u64,
    n: usize,
    rate_jitter: f64,
    cpu_jitter: f64,
    asks: &[i64],
    means: &[f64],
) -> Result<TickDraws, InputError> {
    check_asks(asks, means, n)?;
    let keys = TickKeys::new(seed, tick, rate_jitter, cpu_jitter);
    let jit = (0..n as u64).map(|i| keys.jit(i)).collect();
    let cj = (0..n as u64).map(|i| keys.cj(i)).collect();
    let mut arrivals = vec![0.0; n];
    for (&i, &m) in asks.iter().zip(means) {
        // (in range: checked above)
        arrivals[i as usize] = keys.arrivals(i as u64, m);
    }
    Ok(TickDraws { jit, cj, arrivals })
}

/// Uniform draw `draw` of stream `stream` for each VM `vms[j]` at its own `counters[j]`.
pub fn uniforms(
    seed: u64,
    stream: u64,
    vms: &[i64],
    counters: &[i64],
    draw: u64,
) -> Result<Vec<f64>, InputError> {
    if counters.len() != vms.len() {
        return Err(InputError(format!(
            "counters: {} values for {} VMs",
            counters.len(),
            vms.len()
        )));
    }
    let vms = vm_indices("vms", vms, usize::MAX)?;
    let counters = vm_indices("counters", counters, usize::MAX)?;
    Ok(vms
        .iter()
        .zip(counters)
        .map(|(&i, c)| Draws::new(seed, stream, i as u64, c as u64, draw).uniform())
        .collect())
}

/// Whether every index of `idx` is below `n` (else the first that is not, named), without
/// collecting them: the kernels index with `i as usize` after this.
pub(crate) fn check_indices(name: &str, idx: &[i64], n: usize) -> Result<(), InputError> {
    match idx
        .iter()
        .position(|&i| usize::try_from(i).map_or(true, |i| i >= n))
    {
        Some(j) => Err(InputError(format!(
            "{name}[{j}]: {} outside 0..{n}",
            idx[j]
        ))),
        None => Ok(()),
    }
}

/// `idx` as indices below `n`, or the first that is not, named.
pub(crate) fn vm_indices(name: &str, idx: &[i64], n: usize) -> Result<Vec<usize>, InputError> {
    idx.iter()
        .enumerate()
        .map(|(j, &i)| {
            usize::try_from(i)
                .ok()
                .filter(|&i| i < n)
                .ok_or_else(|| InputError(format!("{name}[{j}]: {i} outside 0..{n}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mean and (population) variance of `n` values of `f`.
    fn moments(n: usize, mut f: impl FnMut(u64) -> f64) -> (f64, f64) {
        let xs: Vec<f64> = (0..n as u64).map(&mut f).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n as f64;
        (mean, var)
    }

    // The moment checks use 200,000 draws: the standard error of a mean is sqrt(var/n),
    // of a variance about sqrt((m4 - var²)/n); each bound below is 5 standard errors, and
    // the keys are fixed, so a pass is a pass every run (no flake), while a wrong algorithm
    // (a wrong constant, a dropped term) is off by far more than 5 SE.
    const N: usize = 200_000;

    #[test]
    fn a_draw_is_a_function_of_its_key() {
        let a = Draws::new(7, stream::ARRIVALS, 3, 11, 0).uniform();
        // other draws in between (another VM, another stream) change nothing
        let _ = Draws::new(7, stream::ARRIVALS, 4, 11, 0).uniform();
        assert_eq!(Draws::new(7, stream::ARRIVALS, 3, 11, 0).uniform(), a);
        // and every part of the key matters
        for other in [
            Draws::new(8, stream::ARRIVALS, 3, 11, 0),
            Draws::new(7, stream::RATE_JITTER, 3, 11, 0),
            Draws::new(7, stream::ARRIVALS, 2, 11, 0),
            Draws::new(7, stream::ARRIVALS, 3, 12, 0),
            Draws::new(7, stream::ARRIVALS, 3, 11, 1),
        ] {
            assert_ne!(other.clone().uniform(), a);
        }
    }

    #[test]
    fn tick_draws_do_not_depend_on_the_other_vms() {
        // VM 2's draws are the same in a world of 3 VMs as in one of 5, asking or not
        let few = tick_draws(9, 4, 3, 0.05, 0.03, &[2], &[20.0]).unwrap();
        let many = tick_draws(9, 4, 5, 0.05, 0.03, &[0, 2, 4], &[1.0, 20.0, 3.0]).unwrap();
        assert_eq!(few.jit[2], many.jit[2]);
        assert_eq!(few.cj[2], many.cj[2]);
        assert_eq!(few.arrivals[2], many.arrivals[2]);
        assert_eq!(few.arrivals[..2], [0.0, 0.0]);
        // no jitter configured: factors of exactly 1
        let flat = tick_draws(9, 4, 2, 0.0, 0.0, &[], &[]).unwrap();
        assert_eq!((flat.jit, flat.cj), (vec![1.0; 2], vec![1.0; 2]));
        let e = tick_draws(9, 4, 2, 0.0, 0.0, &[1], &[f64::NAN]).unwrap_err();
        assert_eq!(e.0, "means[0]: NaN is not a finite mean >= 0");
        let e = tick_draws(9, 4, 2, 0.0, 0.0, &[2], &[1.0]).unwrap_err();
        assert_eq!(e.0, "asks[0]: 2 outside 0..2");
    }

    #[test]
    fn batched_keys_are_the_keys_one_by_one() {
        // the vector path (on a processor with AVX-512 DQ) and the plain one give each
        // VM's own sequence, its first words included, at VMs near the top of u64 too
        for first in [0u64, 7, u64::MAX - 3] {
            let one = |k: u64| Draws::after(99, first.wrapping_add(k), 5, 0);
            for batch in [draws_each(99, first, 5), draws_each_plain(99, first, 5)] {
                for (k, d) in batch.into_iter().enumerate() {
                    let (mut a, mut b) = (d, one(k as u64));
                    assert_eq!((a.next_u64(), a.next_u64()), (b.next_u64(), b.next_u64()));
                }
            }
        }
    }

    #[test]
    fn batched_renewal_keys_are_the_keys_one_by_one() {
        let vms: [u64; BATCH] = std::array::from_fn(|k| (k as u64 * 7919) ^ (k as u64) << 40);
        for (keys, u) in [keys_each(3, &vms, 8), keys_each_plain(3, &vms, 8)] {
            for (k, &vm) in vms.iter().enumerate() {
                assert_eq!(keys[k], key(3, vm, 8));
                assert_eq!(
                    u[k].to_bits(),
                    Draws::after(3, vm, 8, 0).uniform().to_bits()
                );
            }
        }
    }

    #[test]
    fn splitmix_matches_its_reference_output() {
        // SplitMix64 seeded with 0 (state 0, the first output is mix(GAMMA)): the
        // reference implementation's first word is 0xE220A8397B1DCDAF
        assert_eq!(Draws { state: 0 }.next_u64(), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn uniform_moments() {
        // U[0, 1): mean 1/2, variance 1/12 ~ 0.0833; SE of the mean sqrt(1/12/2e5) ~ 6.5e-4,
        // of the variance sqrt((1/80 - 1/144)/2e5) ~ 1.7e-4
        let (m, v) = moments(N, |i| Draws::new(1, 9, i, 0, 0).uniform());
        assert!((m - 0.5).abs() < 5.0 * 6.5e-4, "{m}");
        assert!((v - 1.0 / 12.0).abs() < 5.0 * 1.7e-4, "{v}");
    }

    #[test]
    fn normal_moments_and_tails() {
        // N(0, 1): SE of the mean 1/sqrt(2e5) ~ 2.24e-3, of the variance sqrt(2/2e5) ~ 3.2e-3
        let (m, v) = moments(N, |i| Draws::new(2, 9, i, 0, 0).normal());
        assert!(m.abs() < 5.0 * 2.24e-3, "{m}");
        assert!((v - 1.0).abs() < 5.0 * 3.2e-3, "{v}");
        // P(Z > 1.96) = 0.025: SE sqrt(0.025·0.975/2e5) ~ 3.5e-4
        let over = (0..N as u64)
            .filter(|&i| Draws::new(3, 9, i, 0, 0).normal() > 1.96)
            .count() as f64
            / N as f64;
        assert!((over - 0.025).abs() < 5.0 * 3.5e-4, "{over}");
        // the CDF at points inside the layers, at the wedges and past R (the tail):
        // Φ(-3.6) = 1.591e-4, Φ(-2.5) = 6.210e-3, Φ(-1) = 0.158655, Φ(0.3) = 0.617911,
        // Φ(3) = 0.998650; 5 SE each, sqrt(p(1-p)/n) with n = 1e6
        let n = 1_000_000u64;
        let zs: Vec<f64> = (0..n).map(|i| Draws::new(8, 9, i, 0, 0).normal()).collect();
        for (at, p) in [
            (-3.6, 1.591e-4),
            (-2.5, 6.210e-3),
            (-1.0, 0.158_655),
            (0.3, 0.617_911),
            (3.0, 0.998_650),
        ] {
            let f = zs.iter().filter(|&&z| z <= at).count() as f64 / n as f64;
            let se = (p * (1.0 - p) / n as f64).sqrt();
            assert!((f - p).abs() < 5.0 * se, "Φ({at}): {f} vs {p}");
        }
    }

    #[test]
    fn ziggurat_layers_have_equal_areas() {
        // layer i (1..127) is the rectangle x[i] wide between f(x[i]) and f(x[i+1]):
        // its area x[i]·(f(x[i+1]) - f(x[i])) is V for every layer, and the top edge is 0
        let z = ziggurat();
        let f = |x: f64| (-0.5 * x * x).exp();
        for i in 1..127 {
            let area = z.x[i] * (f(z.x[i + 1]) - f(z.x[i]));
            assert!((area - ZIG_V).abs() < 1e-9, "layer {i}: {area}");
        }
        assert!(z.x[127] > 0.0 && z.x[127] < 0.3, "{}", z.x[127]);
        assert_eq!(z.x[128], 0.0);
    }

    #[test]
    fn lognormal_moments() {
        // exp(σZ), σ = 0.05: mean e^(σ²/2) = 1.0012508, variance (e^σ² - 1) e^σ² ~ 2.5070e-3;
        // SE of the mean sqrt(2.507e-3/2e5) ~ 1.12e-4
        let s = 0.05f64;
        let (m, v) = moments(N, |i| Draws::new(4, 9, i, 0, 0).lognormal(0.0, s));
        assert!((m - (s * s / 2.0).exp()).abs() < 5.0 * 1.12e-4, "{m}");
        let want = ((s * s).exp() - 1.0) * (s * s).exp();
        assert!((v - want).abs() < 0.03 * want, "{v}"); // SE of the variance ~ 0.3 %
    }

    #[test]
    fn poisson_moments_on_both_sides_of_the_switch() {
        // Poisson(λ): mean = variance = λ; SE of the mean sqrt(λ/2e5), of the variance
        // sqrt((λ + 2λ²)/2e5) (the fourth central moment is λ + 3λ²)
        for lam in [0.3, 2.0, 9.99, 10.0, 37.5, 1e4] {
            let (m, v) = moments(N, |i| Draws::new(5, 9, i, 0, 0).poisson(lam));
            let se_m = (lam / N as f64).sqrt();
            let se_v = ((lam + 2.0 * lam * lam) / N as f64).sqrt();
            assert!((m - lam).abs() < 5.0 * se_m, "λ {lam}: mean {m}");
            assert!((v - lam).abs() < 5.0 * se_v, "λ {lam}: variance {v}");
        }
        assert_eq!(Draws::new(5, 9, 0, 0, 0).poisson(0.0), 0.0);
    }

    #[test]
    fn poisson_frequencies_follow_the_pmf() {
        // P(X = k) = e^-λ λ^k / k!: for each λ, the frequency of each k near the mode within
        // 5 SE, sqrt(p(1-p)/n): inversion (λ = 4) and PTRS (λ = 25) alike, their squeeze
        // and rejection branches included
        for lam in [4.0f64, 25.0] {
            let mut freq = vec![0usize; 80];
            for i in 0..N as u64 {
                let k = Draws::new(6, 9, i, 0, 0).poisson(lam) as usize;
                freq[k.min(79)] += 1;
            }
            let near_mode = freq
                .iter()
                .enumerate()
                .skip((lam as usize).saturating_sub(6))
                .take(12);
            for (k, &count) in near_mode {
                let p = (-lam + k as f64 * lam.ln() - ln_gamma(k as f64 + 1.0)).exp();
                let f = count as f64 / N as f64;
                let se = (p * (1.0 - p) / N as f64).sqrt();
                assert!((f - p).abs() < 5.0 * se, "λ {lam}, k {k}: {f} vs {p}");
            }
        }
    }

    #[test]
    fn ln_gamma_of_factorials_and_a_half() {
        // ln Γ(k + 1) = ln k!: 3! = 6, 9! = 362,880, 20! = 2,432,902,008,176,640,000;
        // Γ(1/2 + 7) checked through Γ(1.5) = sqrt(π)/2 (shifted by the recurrence)
        assert_eq!(ln_gamma(1.0), 0.0);
        for (x, want) in [
            (4.0, 6f64.ln()),
            (10.0, 362_880f64.ln()),
            (21.0, 2_432_902_008_176_640_000f64.ln()),
            (1.5, (std::f64::consts::PI.sqrt() / 2.0).ln()),
        ] {
            assert!(
                (ln_gamma(x) - want).abs() < 1e-13 * want.abs().max(1.0),
                "{x}"
            );
        }
    }
}
