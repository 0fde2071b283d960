//! Sensing: each VM's window of its last `num` periods, taken from successive readings of
//! its cumulative counters, and the factors the VF scheduler ranks by (docs/design.md
//! #sensing), for the VMs of one host (the agent) or of a fleet (the simulator) at once.
//!
//! A window is a right-aligned shift buffer per VM (the newest period in the last slot),
//! so a sum over it runs oldest first, as a sum over the per-host form's deque does; the
//! empty slots on the left add 0.0 first, which leaves every partial sum the same float.
//! Every float operation below is the one, in the order, the numpy form the simulator ran
//! did (`tests/sensing_oracle.py` keeps the per-VM readable form these are held equal to).

use crate::npf::{np_max, np_min};
use crate::waterfill::InputError;

/// Nanoseconds per second: CPU counters are in ns.
const NS: f64 = 1e9;
/// An idle VM has gotten ≈ 0: its gotten CPU time is floored at 0.1 % of the period's
/// vCPU time, which caps its IF near 1000 instead of dividing by zero.
pub const GOTTEN_FLOOR_FRACTION: f64 = 1e-3;
/// Counters per VM reading: cpu ns, steal ns, rx bytes, tx bytes, rx packets, tx packets.
pub const COUNTERS: usize = 6;

/// The sensor's settings, as `ControllerConfig.sensing` gives them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Params {
    /// Periods per window (≥ 1).
    pub num: usize,
    /// ε of net_degree and NF, in [0, 1].
    pub epsilon: f64,
    /// Below this rate (bit/s) a period carries no traffic.
    pub threshold_bps: f64,
    /// A VM sending at ≥ (1 − margin) of its path's ceiling is censored.
    pub censor_margin: f64,
    /// vCPU use at or above this on virtio, with traffic, is censored too.
    pub cpu_saturation: f64,
}

/// One column per period statistic, `num` slots per VM (VM `i`'s window is
/// `[i·num, (i + 1)·num)`, oldest first).
#[derive(Clone, Debug, Default, PartialEq)]
struct Windows {
    cpu: Vec<f64>,
    gotten: Vec<f64>,
    blocked: Vec<f64>,
    rx: Vec<f64>,
    tx: Vec<f64>,
    packets: Vec<f64>,
    dt: Vec<f64>,
    vcpus: Vec<f64>,
    censored: Vec<f64>, // 1.0 or 0.0
}

impl Windows {
    fn new(cells: usize) -> Self {
        let z = vec![0.0; cells];
        Windows {
            cpu: z.clone(),
            gotten: z.clone(),
            blocked: z.clone(),
            rx: z.clone(),
            tx: z.clone(),
            packets: z.clone(),
            dt: z.clone(),
            vcpus: z.clone(),
            censored: z,
        }
    }

    fn columns_ref(&self) -> [&Vec<f64>; 9] {
        [
            &self.cpu,
            &self.gotten,
            &self.blocked,
            &self.rx,
            &self.tx,
            &self.packets,
            &self.dt,
            &self.vcpus,
            &self.censored,
        ]
    }

    fn columns(&mut self) -> [&mut Vec<f64>; 9] {
        [
            &mut self.cpu,
            &mut self.gotten,
            &mut self.blocked,
            &mut self.rx,
            &mut self.tx,
            &mut self.packets,
            &mut self.dt,
            &mut self.vcpus,
            &mut self.censored,
        ]
    }
}

/// Every VM's factors, one vector per field (`VMFactors` in sova.policy.sensing).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Factors {
    pub cpu_usage: Vec<f64>,
    pub io_degree: Vec<f64>,
    pub io_factor: Vec<f64>,
    pub net_degree: Vec<f64>,
    pub net_factor: Vec<f64>,
    pub has_traffic: Vec<bool>,
    pub demand_bps: Vec<f64>,
    pub last_rate_bps: Vec<f64>,
    pub tx_bps: Vec<f64>,
    pub rx_bps: Vec<f64>,
    pub censored: Vec<bool>,
    pub demand_est_bps: Vec<f64>,
}

/// The windows of `n` VMs and the reading they were last advanced from.
#[derive(Clone, Debug, PartialEq)]
pub struct Sensor {
    params: Params,
    n: usize,
    windows: Windows,
    count: Vec<i64>,        // periods in each VM's window (0: nothing measured yet)
    prev: Option<Vec<i64>>, // the last reading's counters, COUNTERS rows of n
    prev_host: Vec<i64>,    // each VM's host at the last reading (-1: none)
    last_t: Option<f64>,
    resets: u64,
}

impl Sensor {
    pub fn new(n: usize, params: Params) -> Result<Self, InputError> {
        if params.num < 1 {
            return Err(InputError(format!(
                "window num must be >= 1, got {}",
                params.num
            )));
        }
        if !(0.0..=1.0).contains(&params.epsilon) {
            return Err(InputError(format!(
                "epsilon must be in [0, 1], got {}",
                params.epsilon
            )));
        }
        Ok(Sensor {
            params,
            n,
            windows: Windows::new(n * params.num),
            count: vec![0; n],
            prev: None,
            prev_host: vec![-1; n],
            last_t: None,
            resets: 0,
        })
    }

    pub fn n(&self) -> usize {
        self.n
    }

    pub fn count(&self) -> &[i64] {
        &self.count
    }

    /// Counter readings that went back (a VM rebooted, re-plugged or was reset) so far.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    pub fn last_t(&self) -> Option<f64> {
        self.last_t
    }

    /// Whether a reading at `t` would be taken: a repeated or out-of-order one is not.
    pub fn accepts(&self, t: f64) -> bool {
        self.last_t.is_none_or(|last| t > last)
    }

    /// The same sensor over another list of VMs: row `i` is the old row `keep[i]`, or a
    /// VM not seen before (its first reading starts its window) where `keep[i]` < 0.
    pub fn remap(&self, keep: &[i64]) -> Result<Sensor, InputError> {
        let num = self.params.num;
        let mut out = Sensor::new(keep.len(), self.params)?;
        out.last_t = self.last_t;
        out.resets = self.resets;
        let mut prev = self.prev.as_ref().map(|_| vec![0; COUNTERS * keep.len()]);
        for (i, &k) in keep.iter().enumerate() {
            if k < 0 {
                continue;
            }
            let j = usize::try_from(k)
                .ok()
                .filter(|&j| j < self.n)
                .ok_or_else(|| InputError(format!("keep: row {k} of {} VMs", self.n)))?;
            out.count[i] = self.count[j];
            out.prev_host[i] = self.prev_host[j];
            if let (Some(p), Some(old)) = (prev.as_mut(), self.prev.as_ref()) {
                for c in 0..COUNTERS {
                    p[c * keep.len() + i] = old[c * self.n + j];
                }
            }
            for (to, from) in out
                .windows
                .columns()
                .into_iter()
                .zip(self.windows.columns_ref())
            {
                to[i * num..(i + 1) * num].copy_from_slice(&from[j * num..(j + 1) * num]);
            }
        }
        out.prev = prev;
        Ok(out)
    }

    /// Take a reading at `t`: `counters` holds `COUNTERS` rows of `n` whole numbers (cpu
    /// ns, steal ns, rx bytes, tx bytes, rx packets, tx packets) as a driver reads them,
    /// `host` each VM's host now; `ceiling` each VM's path ceiling in bit/s (none: no
    /// ceiling) and `virtio` whether it is on virtio (none: nobody). A VM whose host
    /// changed since the last reading starts an empty window and skips this period (the
    /// new host's sensor had no previous reading of it); a VM whose counter went back
    /// skips it too (a reset, counted). Returns whether the reading was taken.
    pub fn observe(
        &mut self,
        t: f64,
        counters: &[i64],
        vcpus: &[f64],
        host: &[i64],
        ceiling: Option<&[f64]>,
        virtio: Option<&[bool]>,
    ) -> Result<bool, InputError> {
        let n = self.n;
        check("counters", counters.len(), COUNTERS * n)?;
        check("vcpus", vcpus.len(), n)?;
        check("host", host.len(), n)?;
        if let Some(c) = ceiling {
            check("ceiling", c.len(), n)?;
        }
        if let Some(v) = virtio {
            check("virtio", v.len(), n)?;
        }
        if !self.accepts(t) {
            return Ok(false);
        }
        let prev = self.prev.replace(counters.to_vec());
        let last_t = self.last_t.replace(t);
        let moved: Vec<bool> = (0..n).map(|i| host[i] != self.prev_host[i]).collect();
        self.prev_host.copy_from_slice(host);
        for (c, &m) in self.count.iter_mut().zip(&moved) {
            if m {
                *c = 0;
            }
        }
        let (Some(prev), Some(last_t)) = (prev, last_t) else {
            return Ok(true);
        };
        let p = self.params;
        let num = p.num;
        let dt = t - last_t;
        for i in 0..n {
            // whole counters subtract exactly (as the per-host form's integers do; the
            // simulator's are below 2^53, where float subtraction was exact too)
            let d: [f64; COUNTERS] = std::array::from_fn(|k| {
                (i128::from(counters[k * n + i]) - i128::from(prev[k * n + i])) as f64
            });
            if moved[i] {
                continue;
            }
            if d.iter().any(|&x| x < 0.0) {
                self.resets += 1;
                continue;
            }
            let v = np_max(vcpus[i], 1.0);
            let capacity_ns = dt * NS * v;
            let cpu = np_min(1.0, d[0] / capacity_ns);
            // sent (tx) at the path's ceiling, or on virtio with its vCPUs full and traffic
            let mut cens = false;
            if let Some(c) = ceiling {
                cens |= 8.0 * d[3] / dt >= (1.0 - p.censor_margin) * c[i];
            }
            if let Some(v) = virtio {
                let busy = 8.0 * (d[2] + d[3]) / dt >= p.threshold_bps;
                cens |= v[i] && cpu >= p.cpu_saturation && busy;
            }
            let stats = [
                cpu,
                d[0],
                np_max(0.0, capacity_ns - d[0] - d[1]),
                d[2],
                d[3],
                d[4] + d[5],
                dt,
                v,
                if cens { 1.0 } else { 0.0 },
            ];
            for (col, x) in self.windows.columns().into_iter().zip(stats) {
                let w = &mut col[i * num..(i + 1) * num];
                w.copy_within(1.., 0);
                w[num - 1] = x;
            }
            self.count[i] = (self.count[i] + 1).min(num as i64);
        }
        Ok(true)
    }

    /// Every VM's factors from its window; NF is min–max normalised over the traffic
    /// periods of every VM of the same host (`host`: each VM's host, below `n_hosts`).
    pub fn factors(&self, host: &[i64], n_hosts: usize) -> Result<Factors, InputError> {
        let (n, p) = (self.n, self.params);
        let num = p.num;
        check("host", host.len(), n)?;
        for &h in host {
            if h < 0 || h as usize >= n_hosts {
                return Err(InputError(format!("host: {h} is not below {n_hosts}")));
            }
        }
        let b = &self.windows;
        let eps = p.epsilon;
        let mut f = Factors::default();
        // per VM: its traffic periods' packet rates (for NF, once every host's range is known)
        let mut pps = vec![0.0; n * num];
        let mut traffic = vec![false; n * num];
        let mut lo_h = vec![f64::INFINITY; n_hosts];
        let mut hi_h = vec![f64::NEG_INFINITY; n_hosts];
        let mut busy = vec![0usize; n];
        for i in 0..n {
            let c = self.count[i];
            let valid = |j: usize| j as i64 >= num as i64 - c;
            let (mut s_cpu, mut s_if, mut s_kb, mut s_rate, mut s_est) = (0.0, 0.0, 0.0, 0.0, 0.0);
            let mut last_rate = 0.0;
            for j in 0..num {
                let x = i * num + j;
                let ok = valid(j);
                let dt = if ok { b.dt[x] } else { 1.0 };
                let nbytes = b.rx[x] + b.tx[x];
                let rate = 8.0 * nbytes / dt;
                let tr = ok && rate >= p.threshold_bps;
                // ((1e-3 · dt) · 1e9) · vcpus: the floor's product in the numpy form's order
                let floor = GOTTEN_FLOOR_FRACTION * b.dt[x] * NS * b.vcpus[x];
                let ratio = b.blocked[x] / np_max(b.gotten[x], if ok { floor } else { 1.0 });
                let kbps = nbytes / dt;
                pps[x] = b.packets[x] / dt;
                traffic[x] = tr;
                let est = if b.censored[x] > 0.0 {
                    rate * (1.0 + p.censor_margin)
                } else {
                    rate
                };
                // oldest first, an empty slot adding 0.0 (like sum() over the deque)
                s_cpu += if ok { b.cpu[x] } else { 0.0 };
                s_if += if ok { ratio } else { 0.0 };
                s_kb += if ok { kbps } else { 0.0 };
                s_rate += if ok { rate } else { 0.0 };
                s_est += if ok { est } else { 0.0 };
                if tr {
                    busy[i] += 1;
                    let h = host[i] as usize;
                    lo_h[h] = np_min(lo_h[h], pps[x]);
                    hi_h[h] = np_max(hi_h[h], pps[x]);
                }
                last_rate = rate;
            }
            let nf = c.max(1) as f64;
            let has = c > 0;
            let freq = if has { busy[i] as f64 / nf } else { 0.0 };
            let last = (i + 1) * num - 1;
            let safe_dt = if has { b.dt[last] } else { 1.0 };
            f.cpu_usage.push(if has { b.cpu[last] } else { 0.0 });
            f.io_degree.push(if has {
                100.0 * (1.0 - s_cpu / nf)
            } else {
                100.0
            });
            f.io_factor.push(if has { s_if / nf } else { 0.0 });
            // ε·(mean kB/s) + (1 − ε)·(share of periods with traffic), 1 kB = 1000 B
            f.net_degree.push(if has {
                eps * (s_kb / nf / 1000.0) + (1.0 - eps) * freq
            } else {
                0.0
            });
            f.net_factor.push(freq); // completed below, once every host's range is known
            f.has_traffic.push(busy[i] > 0);
            f.demand_bps.push(if has { s_rate / nf } else { 0.0 });
            f.last_rate_bps.push(if has { last_rate } else { 0.0 });
            f.tx_bps
                .push(if has { 8.0 * b.tx[last] / safe_dt } else { 0.0 });
            f.rx_bps
                .push(if has { 8.0 * b.rx[last] / safe_dt } else { 0.0 });
            f.censored.push(has && b.censored[last] > 0.0);
            f.demand_est_bps.push(if has { s_est / nf } else { 0.0 });
        }
        // NF = ε·freq + (1 − ε)·(mean of the traffic periods' (pps − lo) / (hi − lo)), lo
        // and hi over every traffic period of the host's VMs; one busy level on the whole
        // host (hi − lo not > 0) makes every traffic period the maximum, 1.
        for i in 0..n {
            let h = host[i] as usize;
            let (lo, hi) = if lo_h[h].is_finite() {
                (lo_h[h], hi_h[h])
            } else {
                (0.0, 0.0)
            };
            let span = hi - lo;
            let mut s_norm = 0.0;
            for x in i * num..(i + 1) * num {
                let norm = if span > 0.0 {
                    (pps[x] - lo) / span
                } else {
                    1.0
                };
                s_norm += if traffic[x] { norm } else { 0.0 };
            }
            let avg = if busy[i] > 0 {
                s_norm / busy[i].max(1) as f64
            } else {
                0.0
            };
            let freq = f.net_factor[i];
            f.net_factor[i] = eps * freq + (1.0 - eps) * avg;
        }
        Ok(f)
    }
}

fn check(name: &str, len: usize, want: usize) -> Result<(), InputError> {
    if len == want {
        Ok(())
    } else {
        Err(InputError(format!("{name}: {len} values, expected {want}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: Params = Params {
        num: 3,
        epsilon: 0.7,
        threshold_bps: 10_000.0,
        censor_margin: 0.10,
        cpu_saturation: 0.95,
    };

    /// One VM's reading as the six counter rows of a one-VM sensor.
    fn one(cpu: i64, steal: i64, rx: i64, tx: i64, rxp: i64, txp: i64) -> [i64; 6] {
        [cpu, steal, rx, tx, rxp, txp]
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        let e = Sensor::new(1, Params { num: 0, ..P }).unwrap_err();
        assert_eq!(e.0, "window num must be >= 1, got 0");
        let e = Sensor::new(1, Params { epsilon: 1.5, ..P }).unwrap_err();
        assert_eq!(e.0, "epsilon must be in [0, 1], got 1.5");
    }

    #[test]
    fn one_period_of_one_vm() {
        // 2 vCPUs over 10 s: capacity 2e10 ns. cpu 5e9 ns -> usage 0.25; steal 1e9 ->
        // blocked 2e10 - 5e9 - 1e9 = 1.4e10, IF = 1.4e10 / 5e9 = 2.8. rx 1,000,000 B +
        // tx 250,000 B over 10 s = 1,000,000 bit/s (traffic), 125 kB/s; 500 packets.
        let mut s = Sensor::new(1, P).unwrap();
        let host = [0];
        assert!(
            s.observe(0.0, &one(0, 0, 0, 0, 0, 0), &[2.0], &host, None, None)
                .unwrap()
        );
        let cur = one(5_000_000_000, 1_000_000_000, 1_000_000, 250_000, 300, 200);
        assert!(s.observe(10.0, &cur, &[2.0], &host, None, None).unwrap());
        assert_eq!(s.count(), [1]);
        let f = s.factors(&host, 1).unwrap();
        assert_eq!(f.cpu_usage, [0.25]);
        assert_eq!(f.io_degree, [75.0]); // 100·(1 − 0.25)
        assert_eq!(f.io_factor, [2.8]);
        assert_eq!(f.demand_bps, [1e6]);
        assert_eq!(f.tx_bps, [200_000.0]); // 8·250,000 / 10
        assert_eq!(f.rx_bps, [800_000.0]);
        // 0.7·125 + 0.3·1 (every period carried traffic)
        assert_eq!(f.net_degree, [0.7 * (125_000.0 / 1.0 / 1000.0) + 0.3 * 1.0]);
        // the host's only busy level: normalised 1, NF = 0.7·1 + 0.3·1
        assert_eq!(f.net_factor, [0.7 + (1.0 - 0.7)]);
        assert_eq!(f.has_traffic, [true]);
        assert_eq!(f.censored, [false]);
    }

    #[test]
    fn windows_keep_the_last_num_periods_and_skip_resets_and_repeats() {
        // Table: (t, cpu counter) readings of one 1-vCPU VM, 1 s apart; what the window
        // holds after each. A counter going back is a reset (skipped, counted), a repeated
        // time is ignored (the next period is measured from the reading before it).
        let mut s = Sensor::new(1, P).unwrap();
        let steps: [(f64, i64, bool, i64, u64); 7] = [
            // t, cpu ns, taken, periods in the window, resets
            (0.0, 0, true, 0, 0),
            (1.0, 100_000_000, true, 1, 0),   // 0.1
            (1.0, 900_000_000, false, 1, 0),  // a repeat: ignored
            (2.0, 300_000_000, true, 2, 0),   // 0.2
            (3.0, 200_000_000, true, 2, 1),   // went back: a reset
            (4.0, 600_000_000, true, 3, 1),   // 0.4
            (5.0, 1_400_000_000, true, 3, 1), // 0.8: the 0.1 leaves the window
        ];
        for (t, cpu, taken, count, resets) in steps {
            let r = s.observe(t, &one(cpu, 0, 0, 0, 0, 0), &[1.0], &[0], None, None);
            assert_eq!(r.unwrap(), taken, "t={t}");
            assert_eq!((s.count()[0], s.resets()), (count, resets), "t={t}");
        }
        let f = s.factors(&[0], 1).unwrap();
        assert_eq!(f.cpu_usage, [0.8]);
        // oldest first: ((0.0 + 0.2) + 0.4) + 0.8, over 3 periods
        assert_eq!(f.io_degree, [100.0 * (1.0 - (0.2 + 0.4 + 0.8) / 3.0)]);
    }

    #[test]
    fn censored_at_the_ceiling_or_on_full_virtio() {
        // three VMs, 1 s, 1 vCPU: vm0 sends 1,150,000 B = 9.2 Mbit/s against a 10 Mbit/s
        // ceiling (>= 0.9·10e6: censored); vm1 sends 8.8 Mbit/s (< 9e6: not); vm2 is on
        // virtio with its vCPU at 0.96 (>= 0.95) and traffic: censored. Its demand estimate
        // counts the censored period 1.1×.
        let mut s = Sensor::new(3, P).unwrap();
        let (host, vcpus) = ([0, 0, 0], [1.0, 1.0, 1.0]);
        let zero = [0; 18];
        s.observe(0.0, &zero, &vcpus, &host, None, None).unwrap();
        let mut cur = [0i64; 18];
        cur[0..3].copy_from_slice(&[0, 0, 960_000_000]); // cpu ns
        cur[9..12].copy_from_slice(&[1_150_000, 1_100_000, 100_000]); // tx bytes
        let ceiling = [10e6, 10e6, f64::INFINITY];
        let virtio = [false, false, true];
        s.observe(1.0, &cur, &vcpus, &host, Some(&ceiling), Some(&virtio))
            .unwrap();
        let f = s.factors(&host, 1).unwrap();
        assert_eq!(f.censored, [true, false, true]);
        assert_eq!(f.demand_est_bps[0], 9.2e6 * (1.0 + 0.1));
        assert_eq!(f.demand_est_bps[1], 8.8e6);
    }

    #[test]
    fn nf_is_normalised_over_the_vms_of_each_host() {
        // host 0: vm0 at 100 packets/s and vm1 at 300 packets/s, both with traffic:
        // normalised 0 and 1, NF 0.7·1 + 0.3·0 = 0.7 and 0.7 + 0.3 = 1.0. host 1: vm2 alone
        // (one busy level: 1.0); vm3 on host 1 idle (NF 0).
        let mut s = Sensor::new(4, P).unwrap();
        let (host, vcpus) = ([0, 0, 1, 1], [1.0; 4]);
        s.observe(0.0, &[0; 24], &vcpus, &host, None, None).unwrap();
        let mut cur = [0i64; 24];
        cur[8..12].copy_from_slice(&[10_000, 10_000, 10_000, 0]); // rx bytes: 80 kbit/s
        cur[16..20].copy_from_slice(&[100, 300, 50, 0]); // rx packets
        s.observe(1.0, &cur, &vcpus, &host, None, None).unwrap();
        let f = s.factors(&host, 2).unwrap();
        assert_eq!(
            f.net_factor,
            [0.7, 0.7 + (1.0 - 0.7) * 1.0, 0.7 + 0.3 * 1.0, 0.0]
        );
        assert_eq!(f.has_traffic, [true, true, true, false]);
    }

    #[test]
    fn a_vm_that_moved_starts_an_empty_window() {
        let mut s = Sensor::new(1, P).unwrap();
        s.observe(0.0, &[0; 6], &[1.0], &[0], None, None).unwrap();
        s.observe(1.0, &one(1, 0, 0, 0, 0, 0), &[1.0], &[0], None, None)
            .unwrap();
        assert_eq!(s.count(), [1]);
        // on host 1 now: no period measured there yet, this one skipped
        s.observe(2.0, &one(2, 0, 0, 0, 0, 0), &[1.0], &[1], None, None)
            .unwrap();
        assert_eq!(s.count(), [0]);
        s.observe(3.0, &one(3, 0, 0, 0, 0, 0), &[1.0], &[1], None, None)
            .unwrap();
        assert_eq!(s.count(), [1]);
    }

    #[test]
    fn remap_keeps_rows_and_starts_new_vms() {
        // two VMs measured once; remapped to [vm1, new]: vm1 keeps its window and reading,
        // the new VM's first reading only starts its window
        let mut s = Sensor::new(2, P).unwrap();
        s.observe(0.0, &[0; 12], &[1.0, 1.0], &[0, 0], None, None)
            .unwrap();
        let mut cur = [0i64; 12];
        cur[0..2].copy_from_slice(&[100_000_000, 500_000_000]);
        s.observe(1.0, &cur, &[1.0, 1.0], &[0, 0], None, None)
            .unwrap();
        let mut r = s.remap(&[1, -1]).unwrap();
        assert_eq!(r.count(), [1, 0]);
        let mut next = [0i64; 12];
        next[0..2].copy_from_slice(&[1_000_000_000, 7]);
        r.observe(2.0, &next, &[1.0, 1.0], &[0, 0], None, None)
            .unwrap();
        assert_eq!(r.count(), [2, 0]);
        // vm1: 0.5 then 0.5
        assert_eq!(r.factors(&[0, 0], 1).unwrap().cpu_usage, [0.5, 0.0]);
        assert_eq!(s.remap(&[2]).unwrap_err().0, "keep: row 2 of 2 VMs");
    }

    #[test]
    fn bad_shapes_name_the_field() {
        let mut s = Sensor::new(2, P).unwrap();
        let e = s.observe(0.0, &[0; 6], &[1.0, 1.0], &[0, 0], None, None);
        assert_eq!(e.unwrap_err().0, "counters: 6 values, expected 12");
        let e = s.factors(&[0, 3], 2).unwrap_err();
        assert_eq!(e.0, "host: 3 is not below 2");
    }
}
