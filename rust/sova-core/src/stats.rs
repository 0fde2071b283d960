//! The simulated world's per-tick statistics (what the run's summary reads): bits sent and
//! received per VM and per host, the request VMs' served requests, their time and a
//! histogram of their response times, and how often each guaranteed VM offered its
//! guarantee and was served it.
//!
//! One pass over the VMs in place of a dozen numpy calls per tick. The expressions are the
//! numpy form's, in its order (tests/test_tick_forms.py ``ref_accumulate``): each
//! elementwise operation one IEEE operation, ``np.add.at`` a running sum in index order,
//! ``np.searchsorted`` (side ``left``) with NaN after every number, so every value is the
//! same float.

use crate::waterfill::InputError;

/// One tick's figures the statistics read (one value per VM, or per host).
pub struct Tick<'a> {
    pub tx: &'a [f64],
    pub rx: &'a [f64],
    /// each host's VMs' tx (per host)
    pub tx_by_host: &'a [f64],
    /// requests served this tick
    pub served_req: &'a [f64],
    /// their mean response time (s)
    pub resp_s: &'a [f64],
    pub offered: &'a [f64],
}

/// The guaranteed VMs: a VM with a guarantee (`pos`) offers it when `offered >= guarantee`
/// and is served it when `tx >= held` (the guarantee less its tolerance).
pub struct Guarantees<'a> {
    pub pos: &'a [bool],
    pub guarantee: &'a [f64],
    pub held: &'a [f64],
}

/// The run's sums, advanced in place.
pub struct Sums<'a> {
    pub tx_bits: &'a mut [f64],
    pub rx_bits: &'a mut [f64],
    pub host_tx_bits: &'a mut [f64],
    pub req_weight: &'a mut [f64],
    pub req_time: &'a mut [f64],
    /// requests by response-time bin: bin `k` holds times in `(edges[k], edges[k + 1]]`,
    /// the first and last also those below and above
    pub resp_hist: &'a mut [f64],
    pub guar_intervals: &'a mut [f64],
    pub guar_met: &'a mut [f64],
}

fn check(
    t: &Tick<'_>,
    g: Option<&Guarantees<'_>>,
    edges: &[f64],
    s: &Sums<'_>,
) -> Result<(), InputError> {
    let n = t.tx.len();
    let (pos, guarantee, held) = g.map_or((n, n, n), |g| {
        (g.pos.len(), g.guarantee.len(), g.held.len())
    });
    let per_vm = [
        ("rx", t.rx.len()),
        ("served_req", t.served_req.len()),
        ("resp_s", t.resp_s.len()),
        ("offered", t.offered.len()),
        ("pos", pos),
        ("guarantee", guarantee),
        ("held", held),
        ("tx_bits", s.tx_bits.len()),
        ("rx_bits", s.rx_bits.len()),
        ("req_weight", s.req_weight.len()),
        ("req_time", s.req_time.len()),
        ("guar_intervals", s.guar_intervals.len()),
        ("guar_met", s.guar_met.len()),
    ];
    for (name, len) in per_vm {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    let h = t.tx_by_host.len();
    if s.host_tx_bits.len() != h {
        let len = s.host_tx_bits.len();
        return Err(InputError(format!(
            "host_tx_bits: {len} values for {h} hosts"
        )));
    }
    let bins = s.resp_hist.len();
    if bins == 0 || edges.len() != bins + 1 {
        let len = edges.len();
        return Err(InputError(format!("edges: {len} values for {bins} bins")));
    }
    Ok(())
}

/// `np.searchsorted(edges, x) - 1` (side `left`: the edges below `x`, NaN above all),
/// clipped to the bins `0..bins`.
fn bin(edges: &[f64], x: f64, bins: usize) -> usize {
    let below = if x.is_nan() {
        edges.len()
    } else {
        edges.partition_point(|&e| e < x)
    };
    below.saturating_sub(1).min(bins - 1)
}

/// Add one tick of `dt` seconds to the sums: every VM's and host's bits, then (when
/// `measure`: the response times count from this tick on, and some VM served requests)
/// the requests, their time and their response-time bins, then the guarantees (`g`;
/// None: no VM has one).
pub fn accumulate(
    t: &Tick<'_>,
    g: Option<&Guarantees<'_>>,
    edges: &[f64],
    dt: f64,
    measure: bool,
    s: &mut Sums<'_>,
) -> Result<(), InputError> {
    check(t, g, edges, s)?;
    let n = t.tx.len();
    let (tx, rx) = (&t.tx[..n], &t.rx[..n]);
    let (tx_bits, rx_bits) = (&mut s.tx_bits[..n], &mut s.rx_bits[..n]);
    for i in 0..n {
        tx_bits[i] += tx[i] * dt;
    }
    for i in 0..n {
        rx_bits[i] += rx[i] * dt;
    }
    for (sum, by) in s.host_tx_bits.iter_mut().zip(t.tx_by_host) {
        *sum += by * dt;
    }
    let w = &t.served_req[..n];
    // (numpy's `w.any()`: NaN counts as served)
    if measure && w.iter().any(|&x| x != 0.0) {
        let resp = &t.resp_s[..n];
        for (sum, x) in s.req_weight[..n].iter_mut().zip(w) {
            *sum += x;
        }
        for i in 0..n {
            s.req_time[i] += w[i] * resp[i];
        }
        let bins = s.resp_hist.len();
        for i in 0..n {
            if w[i] > 0.0 {
                s.resp_hist[bin(edges, resp[i], bins)] += w[i];
            }
        }
    }
    if let Some(g) = g {
        let (pos, guarantee, held) = (&g.pos[..n], &g.guarantee[..n], &g.held[..n]);
        let offered = &t.offered[..n];
        for i in 0..n {
            let offering = pos[i] && offered[i] >= guarantee[i];
            s.guar_intervals[i] += if offering { 1.0 } else { 0.0 };
            s.guar_met[i] += if offering && tx[i] >= held[i] {
                1.0
            } else {
                0.0
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Owned {
        tx_bits: Vec<f64>,
        rx_bits: Vec<f64>,
        host_tx_bits: Vec<f64>,
        req_weight: Vec<f64>,
        req_time: Vec<f64>,
        resp_hist: Vec<f64>,
        guar_intervals: Vec<f64>,
        guar_met: Vec<f64>,
    }

    impl Owned {
        fn new(n: usize, h: usize, bins: usize) -> Self {
            Owned {
                tx_bits: vec![0.0; n],
                rx_bits: vec![0.0; n],
                host_tx_bits: vec![0.0; h],
                req_weight: vec![0.0; n],
                req_time: vec![0.0; n],
                resp_hist: vec![0.0; bins],
                guar_intervals: vec![0.0; n],
                guar_met: vec![0.0; n],
            }
        }

        fn sums(&mut self) -> Sums<'_> {
            Sums {
                tx_bits: &mut self.tx_bits,
                rx_bits: &mut self.rx_bits,
                host_tx_bits: &mut self.host_tx_bits,
                req_weight: &mut self.req_weight,
                req_time: &mut self.req_time,
                resp_hist: &mut self.resp_hist,
                guar_intervals: &mut self.guar_intervals,
                guar_met: &mut self.guar_met,
            }
        }
    }

    #[test]
    fn bins_are_numpys_left_search_clipped() {
        let edges = [1.0, 2.0, 4.0];
        let got: Vec<usize> = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 9.0, f64::NAN, f64::INFINITY]
            .iter()
            .map(|&x| bin(&edges, x, 2))
            .collect();
        // numpy: searchsorted = [0, 0, 1, 1, 2, 2, 3, 3, 3], less one, clipped to 0..=1
        assert_eq!(got, vec![0, 0, 0, 0, 1, 1, 1, 1, 1]);
    }

    #[test]
    fn two_ticks_of_bits_requests_and_guarantees() {
        let tick = Tick {
            tx: &[8.0, 2.0, 0.0],
            rx: &[1.0, 0.0, 4.0],
            tx_by_host: &[10.0, 0.0],
            served_req: &[0.0, 3.0, 1.0],
            resp_s: &[f64::INFINITY, 1.5, 9.0],
            offered: &[8.0, 5.0, 1.0],
        };
        let g = Guarantees {
            pos: &[true, true, false],
            guarantee: &[6.0, 6.0, 0.0],
            held: &[7.0, 5.0, 0.0],
        };
        let edges = [1.0, 2.0, 4.0];
        let mut o = Owned::new(3, 2, 2);
        for measure in [false, true] {
            accumulate(&tick, Some(&g), &edges, 0.5, measure, &mut o.sums()).unwrap();
        }
        assert_eq!(o.tx_bits, vec![8.0, 2.0, 0.0]);
        assert_eq!(o.rx_bits, vec![1.0, 0.0, 4.0]);
        assert_eq!(o.host_tx_bits, vec![10.0, 0.0]);
        // counted once (the first tick is not measured); VM 0 served none: 0 * inf is NaN
        assert_eq!(o.req_weight, vec![0.0, 3.0, 1.0]);
        assert!(o.req_time[0].is_nan());
        assert_eq!(o.req_time[1..], [4.5, 9.0]);
        assert_eq!(o.resp_hist, vec![3.0, 1.0]);
        // VM 0 offers its guarantee and is served it, VM 1 neither, VM 2 has none
        assert_eq!(o.guar_intervals, vec![2.0, 0.0, 0.0]);
        assert_eq!(o.guar_met, vec![2.0, 0.0, 0.0]);
    }

    #[test]
    fn nothing_served_leaves_the_requests_alone() {
        let tick = Tick {
            tx: &[1.0],
            rx: &[1.0],
            tx_by_host: &[1.0],
            served_req: &[0.0],
            resp_s: &[0.5],
            offered: &[1.0],
        };
        let mut o = Owned::new(1, 1, 2);
        accumulate(&tick, None, &[1.0, 2.0, 4.0], 1.0, true, &mut o.sums()).unwrap();
        assert_eq!(o.req_time, vec![0.0]);
        assert_eq!(o.resp_hist, vec![0.0, 0.0]);
        assert_eq!(o.guar_intervals, vec![0.0]);
    }

    #[test]
    fn mismatched_lengths_are_refused() {
        let tick = Tick {
            tx: &[1.0, 2.0],
            rx: &[1.0],
            tx_by_host: &[1.0],
            served_req: &[0.0, 0.0],
            resp_s: &[0.5, 0.5],
            offered: &[1.0, 1.0],
        };
        let mut o = Owned::new(2, 1, 2);
        let e = accumulate(&tick, None, &[1.0, 2.0, 4.0], 1.0, true, &mut o.sums());
        assert!(e.unwrap_err().0.starts_with("rx: 1 values"));
        let tick = Tick {
            rx: &[1.0, 1.0],
            ..tick
        };
        let e = accumulate(&tick, None, &[1.0, 2.0], 1.0, true, &mut o.sums());
        assert!(e.unwrap_err().0.starts_with("edges: 2 values"));
    }
}
