//! One period of the bandwidth controller (docs/design.md#bandwidth) for every host of a
//! fleet at once, or for one host (the agent: a fleet of one): measured rates -> demands (a
//! VM held at its cap is probed upward; a congested guarantee is reserved its minimum) ->
//! the Sova allocator -> caps (spare capacity spread over them, a probing floor, no cap at
//! line rate or on an open link) -> which caps moved by more than 1 %.
//!
//! Flow `k` is VM `flows[k]`: what is known of a VM (its reading, its limit in force, its
//! SLA, its reservation) is indexed by VM, so the simulator passes its per-VM columns as
//! they are; the layout groups flow positions by host. Arithmetic is numpy's, operation
//! for operation (`np.maximum`/`np.minimum` propagate NaN, sums are `math.fsum`'s), so the
//! caps are the floats of the array form kept as the oracle in tests/bandwidth_oracle.py.

use crate::allocate::{self, Flows, fsum};
use crate::npf::{np_max, np_min};
use crate::waterfill::{InputError, Layout};

/// Readings adding up to this share of a host's capacity make a full link.
pub const FULL_LINK: f64 = 0.95;
/// A guaranteed VM's reservation is released after this many quiet periods in a row.
pub const HOLD_PERIODS: i64 = 5;
/// `quiet` of a VM without a reservation.
pub const FREE: i64 = -1;

/// What the controller knows of each VM, indexed by VM.
pub struct Vms<'a> {
    /// egress bit/s measured this period
    pub bps: &'a [f64],
    /// mean egress packet size
    pub packet_bytes: &'a [f64],
    /// the cap in force (NaN: none)
    pub current: &'a [f64],
    pub minimum: &'a [f64],
    /// inf: no SLA maximum
    pub maximum: &'a [f64],
    /// NaN: no SLA packet rate
    pub max_pps: &'a [f64],
    pub weight: &'a [f64],
    /// on a VF now
    pub fast: &'a [bool],
}

/// Each guaranteed VM's reservation, indexed by VM, advanced in place for the flows
/// decided (docs/design.md#guarantees; `quiet` [`FREE`], `0 .. HOLD_PERIODS - 1` reserved,
/// `HOLD_PERIODS` released).
pub struct Held<'a> {
    pub quiet: &'a mut [i64],
    pub level: &'a mut [f64],
    pub fast: &'a mut [bool],
}

/// The controller's settings.
#[derive(Clone, Copy)]
pub struct Settings {
    /// how far above its cap a VM held at it is probed, and the probing floor's share
    pub probe: f64,
    /// spread the capacity nobody was allocated over the caps (the Sova allocator's)
    pub spread_spare: bool,
    /// lift the caps on a calm link without guarantees (docs/design.md#open-link)
    pub lift: bool,
}

/// The hosts and the flows decided: flow `k` is VM `flows[k]`; host `h`'s flow positions
/// are `layout.row(h)`.
pub struct Fleet<'a> {
    pub capacity: &'a [f64],
    pub layout: Layout<'a>,
    pub flows: &'a [i64],
}

impl Fleet<'_> {
    fn check(&self, v: &Vms<'_>, held: Option<&Held<'_>>) -> Result<(), InputError> {
        let n = v.bps.len();
        let mut lens = vec![
            ("packet_bytes", v.packet_bytes.len()),
            ("current", v.current.len()),
            ("minimum", v.minimum.len()),
            ("maximum", v.maximum.len()),
            ("max_pps", v.max_pps.len()),
            ("weight", v.weight.len()),
            ("fast", v.fast.len()),
        ];
        if let Some(r) = held {
            lens.extend([
                ("quiet", r.quiet.len()),
                ("level", r.level.len()),
                ("held fast", r.fast.len()),
            ]);
        }
        for (name, len) in lens {
            if len != n {
                return Err(InputError(format!("{name}: {len} values for {n} VMs")));
            }
        }
        if self.capacity.len() != self.layout.links() {
            return Err(InputError(format!(
                "capacity: {} values for {} links",
                self.capacity.len(),
                self.layout.links()
            )));
        }
        check_vms(self.flows, n)
    }

    /// Flow `k`'s VM (checked in range by [`check_vms`]).
    fn vm(&self, k: usize) -> usize {
        self.flows[k] as usize
    }
}

/// Every flow's VM is one of the `n` VMs.
pub fn check_vms(flows: &[i64], n: usize) -> Result<(), InputError> {
    match flows
        .iter()
        .position(|&i| usize::try_from(i).map_or(true, |i| i >= n))
    {
        Some(k) => Err(InputError(format!(
            "flows[{k}]: VM {} outside 0..{n}",
            flows[k]
        ))),
        None => Ok(()),
    }
}

/// Each flow's demand (into `demand`) and whether its cap is lifted (into `lifted`): the
/// probe above a cap the VM is held at, the open link when `s.lift`, and, with `held`,
/// each guarantee's reservation (advanced in place).
pub fn demand(
    f: &Fleet<'_>,
    v: &Vms<'_>,
    s: Settings,
    mut held: Option<&mut Held<'_>>,
    demand: &mut [f64],
    lifted: &mut [bool],
) -> Result<(), InputError> {
    f.check(v, held.as_deref())?;
    let n = f.flows.len();
    let vm = |k: usize| f.vm(k);
    if demand.len() != n || lifted.len() != n {
        return Err(InputError(format!("demand, lifted: not {n} values")));
    }
    let probe = s.probe;
    for h in 0..f.layout.links() {
        let cap = f.capacity[h];
        for k in f.layout.row(h) {
            let i = vm(k);
            let (bps, limit) = (v.bps[i], v.current[i]);
            let near = !limit.is_nan() && bps >= (1.0 - probe) * limit;
            let d = if near {
                np_max(bps, limit) * (1.0 + probe)
            } else {
                bps
            };
            demand[k] = np_min(d, cap);
            lifted[k] = false;
        }
        if !s.lift && held.is_none() {
            continue;
        }
        let total = fsum(|| f.layout.row(h).map(|k| v.bps[vm(k)]))
            .map_err(|e| InputError(format!("link {h}: {e}")))?;
        if s.lift {
            let guarded = f.layout.row(h).any(|k| v.minimum[vm(k)] > 0.0);
            if !guarded && total <= FULL_LINK * cap {
                for k in f.layout.row(h) {
                    lifted[k] = v.maximum[vm(k)].is_infinite();
                }
            }
        }
        if let Some(r) = held.as_deref_mut() {
            let full = total >= FULL_LINK * cap;
            for k in f.layout.row(h) {
                demand[k] = reserve(r, v, vm(k), full, cap, probe, demand[k]);
            }
        }
    }
    Ok(())
}

/// VM `i`'s reservation advanced one period and its demand with it (reserved: at least
/// its minimum, at most the link).
fn reserve(
    r: &mut Held<'_>,
    v: &Vms<'_>,
    i: usize,
    full: bool,
    cap: f64,
    probe: f64,
    d: f64,
) -> f64 {
    let (bps, minimum, fast) = (v.bps[i], v.minimum[i], v.fast[i]);
    let under = minimum > 0.0 && bps < minimum;
    let limit = v.current[i];
    let held_at_cap = !limit.is_nan() && bps >= (1.0 - probe) * limit;
    let busy = full || held_at_cap;
    let moved = r.fast[i] != fast;
    let q = if moved { FREE } else { r.quiet[i] };
    let level = if moved { 0.0 } else { r.level[i] };
    let released = q >= HOLD_PERIODS;
    let rising = released && bps > (1.0 + probe / 2.0) * np_max(level, probe * minimum);
    let reserved = q >= 0 && !released;
    // free or reserved, on a busy link: (re)start the reservation
    let start = ((q == FREE || reserved) && busy) || rising;
    let quiet = reserved && !busy;
    let (mut q_next, mut level_next) = if start {
        (0, 0.0)
    } else if quiet {
        (q + 1, np_max(level, bps))
    } else {
        (q, level)
    };
    if !under {
        (q_next, level_next) = (FREE, 0.0);
    }
    r.quiet[i] = q_next;
    r.level[i] = level_next;
    r.fast[i] = q_next != FREE && fast;
    if (0..HOLD_PERIODS).contains(&q_next) {
        np_min(np_max(d, minimum), cap)
    } else {
        d
    }
}

/// The caps to enforce, in place of each flow's allocated rate in `rate` (NaN: no cap),
/// from those rates and the packet caps `pps` (NaN: none), and the positions of the flows
/// whose cap differs from the one in force (`current`, per VM) by more than 1 %, in flow
/// order.
pub fn limits(
    f: &Fleet<'_>,
    current: &[f64],
    s: Settings,
    rate: &mut [f64],
    pps: &[f64],
    lifted: &[bool],
) -> Result<Vec<i64>, InputError> {
    let n = f.flows.len();
    if rate.len() != n || pps.len() != n || lifted.len() != n {
        return Err(InputError(format!("rate, pps, lifted: not {n} values")));
    }
    check_vms(f.flows, current.len())?;
    let probe = s.probe;
    for h in 0..f.layout.links() {
        let cap = f.capacity[h];
        let count = f.layout.row(h).count() as f64;
        let extra = if s.spread_spare {
            let total = fsum(|| f.layout.row(h).map(|k| rate[k]))
                .map_err(|e| InputError(format!("link {h}: {e}")))?;
            Some(np_max(0.0, cap - total) / count)
        } else {
            None
        };
        for k in f.layout.row(h) {
            let mut r = rate[k];
            if let Some(x) = extra {
                r += x;
            }
            if probe > 0.0 {
                r = np_max(r, probe * cap / count);
            }
            let at_line = r >= cap * (1.0 - 1e-9) || lifted[k];
            if at_line && pps[k].is_nan() {
                r = f64::NAN;
            }
            rate[k] = r;
        }
    }
    let mut changed = Vec::new();
    for (k, &r) in rate.iter().enumerate() {
        let c = current[f.vm(k)];
        let same = if r.is_nan() || c.is_nan() {
            r.is_nan() && c.is_nan()
        } else {
            (c - r).abs() <= 0.01 * c.max(r)
        };
        if !same {
            changed.push(k as i64);
        }
    }
    Ok(changed)
}

/// One whole period with the Sova allocator: [`demand`], the allocation, [`limits`].
/// Writes each flow's cap into `new` and packet cap into `pps` (the SLA's); returns the
/// positions of the flows whose cap moved. The allocation, most of the work, runs in runs
/// of whole hosts shared among `threads` threads (each host's allocation is its own: the
/// same caps whatever the threads).
pub fn period(
    f: &Fleet<'_>,
    v: &Vms<'_>,
    s: Settings,
    held: Option<&mut Held<'_>>,
    new: &mut [f64],
    pps: &mut [f64],
    threads: usize,
) -> Result<Vec<i64>, InputError> {
    crate::tick::check_threads(threads)?;
    let n = f.flows.len();
    if new.len() != n || pps.len() != n {
        return Err(InputError(format!("new, pps: not {n} values")));
    }
    let mut want = vec![0.0; n];
    let mut lifted = vec![false; n];
    demand(f, v, s, held, &mut want, &mut lifted)?;
    for (k, p) in pps.iter_mut().enumerate() {
        *p = v.max_pps[f.vm(k)];
    }
    let flows = Flows {
        demand: &want,
        vm: Some(f.flows),
        minimum: v.minimum,
        maximum: v.maximum,
        max_pps: v.max_pps,
        packet_bytes: v.packet_bytes,
        weight: v.weight,
    };
    check_flows(&flows)?;
    allocate::sova_allocate_threads(f.capacity, &f.layout, &flows, new, threads)?;
    limits(f, v.current, s, new, pps, &lifted)
}

/// The allocator's input checks (`FlowDemand`'s) over the flows, in one pass: the first
/// bad value of the first field that has one, named, as Python prints it.
fn check_flows(f: &Flows<'_>) -> Result<(), InputError> {
    let bad = [
        |x: f64| !x.is_finite() || x < 0.0,
        |x: f64| !(x.is_finite() && x > 0.0),
        |x: f64| !(x.is_finite() && x > 0.0),
        |x: f64| x.is_infinite() || x < 0.0,
    ];
    let value = |field: usize, k: usize| {
        let i = f.vm.map_or(k, |vm| vm[k] as usize);
        match field {
            0 => f.demand[k],
            1 => f.packet_bytes[i],
            2 => f.weight[i],
            _ => f.max_pps[i],
        }
    };
    let n = f.demand.len();
    // every flow at once, without a branch per value: the naming pass below only on a refusal
    let mut ok = true;
    for k in 0..n {
        let i = f.vm.map_or(k, |vm| vm[k] as usize);
        let (d, p, w, m) = (f.demand[k], f.packet_bytes[i], f.weight[i], f.max_pps[i]);
        ok &= d.is_finite() & (d >= 0.0) & p.is_finite() & (p > 0.0);
        ok &= w.is_finite() & (w > 0.0) & !m.is_infinite() & (m.is_nan() | (m >= 0.0));
    }
    if ok {
        return Ok(());
    }
    let names = ["demand_bps", "packet_bytes", "sla.weight", "sla.max_pps"];
    for (c, name) in names.iter().enumerate() {
        if let Some(x) = (0..n).map(|k| value(c, k)).find(|&x| bad[c](x)) {
            return Err(InputError(format!(
                "{name} must be finite and > 0 (>= 0 for rates), got {}",
                py_repr(x)
            )));
        }
    }
    Ok(())
}

/// A float as Python's `repr` prints the usual ones (`nan`, `inf`, `0.0`).
fn py_repr(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: f64 = 1e9;

    fn vms<'a>(
        bps: &'a [f64],
        current: &'a [f64],
        minimum: &'a [f64],
        fast: &'a [bool],
    ) -> Vms<'a> {
        Vms {
            bps,
            packet_bytes: &[1500.0; 3],
            current,
            minimum,
            maximum: &[f64::INFINITY; 3],
            max_pps: &[f64::NAN; 3],
            weight: &[1.0; 3],
            fast,
        }
    }

    /// A period of 300 hosts of 1-40 flows (6,130 in all, in a layout that is not index
    /// order; floors over-committed on some hosts, packet caps and SLA maxima on some VMs,
    /// reservations held) on `threads` threads: caps, packet caps, moved flows and the
    /// reservations after two periods, as bits.
    fn period_bits(threads: usize) -> Result<Vec<Vec<u64>>, InputError> {
        let x = |i: usize, a: f64| (i as f64 * a).fract();
        let hosts = 300;
        let sizes: Vec<usize> = (0..hosts).map(|h| 1 + (h * 7) % 40).collect();
        let n: usize = sizes.iter().sum();
        let mut start = vec![0i64];
        for s in &sizes {
            start.push(start.last().unwrap() + *s as i64);
        }
        // flow k at position (k * 7919) % n: every host's flows scattered over the VMs
        let order: Vec<i64> = (0..n).map(|k| ((k * 7919) % n) as i64).collect();
        let flows: Vec<i64> = (0..n).map(|k| ((k * 13) % n) as i64).collect();
        let capacity: Vec<f64> = (0..hosts).map(|h| (10 + h % 3 * 15) as f64 * G).collect();
        let bps: Vec<f64> = (0..n).map(|i| 2.0 * G * x(i, 0.37)).collect();
        let pkt: Vec<f64> = (0..n).map(|i| 64.0 + 1436.0 * x(i, 0.11)).collect();
        let current: Vec<f64> = (0..n)
            .map(|i| {
                if i % 4 == 0 {
                    f64::NAN
                } else {
                    2.0 * G * x(i, 0.53)
                }
            })
            .collect();
        let minimum: Vec<f64> = (0..n)
            .map(|i| {
                if i % 5 == 0 {
                    3.0 * G * x(i, 0.29)
                } else {
                    0.0
                }
            })
            .collect();
        let maximum: Vec<f64> = (0..n)
            .map(|i| if i % 7 == 0 { G } else { f64::INFINITY })
            .collect();
        let max_pps: Vec<f64> = (0..n)
            .map(|i| if i % 11 == 0 { 1e5 } else { f64::NAN })
            .collect();
        let weight: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64).collect();
        let fast: Vec<bool> = (0..n).map(|i| i % 6 == 1).collect();
        let v = Vms {
            bps: &bps,
            packet_bytes: &pkt,
            current: &current,
            minimum: &minimum,
            maximum: &maximum,
            max_pps: &max_pps,
            weight: &weight,
            fast: &fast,
        };
        let f = Fleet {
            capacity: &capacity,
            layout: Layout::new(&order, &start, n)?,
            flows: &flows,
        };
        let s = Settings {
            probe: 0.1,
            spread_spare: true,
            lift: true,
        };
        let (mut quiet, mut level, mut hfast) = (vec![FREE; n], vec![0.0; n], vec![false; n]);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let mut out = Vec::new();
        for _ in 0..2 {
            let mut held = Held {
                quiet: &mut quiet,
                level: &mut level,
                fast: &mut hfast,
            };
            let (mut new, mut pps) = (vec![0.0; n], vec![0.0; n]);
            let changed = period(&f, &v, s, Some(&mut held), &mut new, &mut pps, threads)?;
            out.extend([bits(&new), bits(&pps)]);
            out.push(changed.iter().map(|&k| k as u64).collect());
        }
        out.push(quiet.iter().map(|&q| q as u64).collect());
        out.extend([bits(&level), hfast.iter().map(|&b| u64::from(b)).collect()]);
        Ok(out)
    }

    #[test]
    fn a_period_is_the_same_bits_on_one_thread_or_several() {
        let one = period_bits(1).unwrap();
        for threads in [2, 3] {
            assert!(one == period_bits(threads).unwrap(), "{threads} threads");
        }
        // caps set and lifted, flows moved, reservations held
        let caps = |k: usize| f64::from_bits(one[0][k]);
        assert!((0..6130).any(|k| caps(k).is_nan()) && (0..6130).any(|k| caps(k) > 0.0));
        assert!(one[2].len() > 100 && one[6].contains(&0));
        let e = period_bits(0).unwrap_err();
        assert_eq!(e.0, "threads: 0, not a count of threads >= 1");
    }

    #[test]
    fn a_period_on_two_hosts() {
        // host 0 (10 Gbit/s): VMs 2 and 0, reading 6 and 5 Gbit/s (full: 11 >= 9.5), no caps:
        // demands 6 and 5, fill 10 -> 5 each; spare 0; caps 5 and 5 (new: both changed).
        // host 1 (10 Gbit/s): VM 1 reads 1 Gbit/s under a cap of 1 Gbit/s: probed to
        // 1.1 Gbit/s; allocated 1.1, spare 8.9 spread to it: 10 = line rate, and the calm
        // link lifts it too: no cap (changed from 1 Gbit/s).
        let order = [0, 1, 2];
        let start = [0, 2, 3];
        let f = Fleet {
            capacity: &[10.0 * G, 10.0 * G],
            layout: Layout::new(&order, &start, 3).unwrap(),
            flows: &[2, 0, 1],
        };
        let v = vms(
            &[5.0 * G, G, 6.0 * G],
            &[f64::NAN, G, f64::NAN],
            &[0.0; 3],
            &[false; 3],
        );
        let s = Settings {
            probe: 0.1,
            spread_spare: true,
            lift: true,
        };
        let (mut new, mut pps) = ([0.0; 3], [0.0; 3]);
        let changed = period(&f, &v, s, None, &mut new, &mut pps, 1).unwrap();
        assert_eq!(changed, [0, 1, 2]);
        assert_eq!(new[..2], [5.0 * G, 5.0 * G]);
        assert!(new[2].is_nan() && pps.iter().all(|p| p.is_nan()));
        // the same caps in force: nothing changes (within 1 %)
        let v = vms(
            &[5.0 * G, f64::NAN, 6.0 * G],
            &[5.04 * G, f64::NAN, 4.96 * G],
            &[0.0; 3],
            &[false; 3],
        );
        let f1 = Fleet {
            flows: &[2, 0],
            layout: Layout::new(&[0, 1], &[0, 2], 2).unwrap(),
            capacity: &[10.0 * G],
        };
        let (mut new, mut pps) = ([0.0; 2], [0.0; 2]);
        assert_eq!(
            period(&f1, &v, s, None, &mut new, &mut pps, 1).unwrap(),
            Vec::<i64>::new()
        );
    }

    #[test]
    fn a_congested_guarantee_is_reserved_then_released() {
        // one VM guaranteed 2 Gbit/s reading 1 Gbit/s on a full 1.05 Gbit/s link beside a
        // neighbour: reserved at once (quiet 0), its demand raised to its minimum capped by
        // the link; then quiet periods on a calm link count up to HOLD_PERIODS: released.
        let order = [0, 1];
        let start = [0, 2];
        let f = Fleet {
            capacity: &[1.05 * G],
            layout: Layout::new(&order, &start, 2).unwrap(),
            flows: &[0, 1],
        };
        let (mut quiet, mut level, mut rfast) = ([FREE; 3], [0.0; 3], [false; 3]);
        let s = Settings {
            probe: 0.1,
            spread_spare: true,
            lift: true,
        };
        let (mut d, mut lifted) = ([0.0; 2], [false; 2]);
        let v = vms(
            &[G, 0.5 * G, 0.0],
            &[f64::NAN; 3],
            &[2.0 * G, 0.0, 0.0],
            &[true, false, false],
        );
        let mut held = Held {
            quiet: &mut quiet,
            level: &mut level,
            fast: &mut rfast,
        };
        demand(&f, &v, s, Some(&mut held), &mut d, &mut lifted).unwrap();
        assert_eq!((held.quiet[0], held.fast[0], d[0]), (0, true, 1.05 * G));
        assert_eq!(lifted, [false, false]); // a guarantee guards the link
        let v = vms(
            &[0.3 * G, 0.1 * G, 0.0],
            &[f64::NAN; 3],
            &[2.0 * G, 0.0, 0.0],
            &[true, false, false],
        );
        for q in 1..=HOLD_PERIODS {
            demand(&f, &v, s, Some(&mut held), &mut d, &mut lifted).unwrap();
            assert_eq!((held.quiet[0], held.level[0]), (q, 0.3 * G));
        }
        assert_eq!(d[0], 0.3 * G); // released: its reading is its demand
        // a VM that leaves its VF starts again from no reservation
        let v = vms(
            &[0.3 * G, 0.1 * G, 0.0],
            &[f64::NAN; 3],
            &[2.0 * G, 0.0, 0.0],
            &[false; 3],
        );
        demand(&f, &v, s, Some(&mut held), &mut d, &mut lifted).unwrap();
        assert_eq!((held.quiet[0], held.fast[0]), (FREE, false));
    }

    #[test]
    fn bad_input_is_refused_by_name() {
        let f = Fleet {
            capacity: &[G],
            layout: Layout::new(&[0], &[0, 1], 1).unwrap(),
            flows: &[3],
        };
        let v = vms(&[G; 3], &[f64::NAN; 3], &[0.0; 3], &[false; 3]);
        let s = Settings {
            probe: 0.1,
            spread_spare: true,
            lift: false,
        };
        let (mut new, mut pps) = ([0.0; 1], [0.0; 1]);
        let e = period(&f, &v, s, None, &mut new, &mut pps, 1).unwrap_err();
        assert_eq!(e.0, "flows[0]: VM 3 outside 0..3");
        // a VM that sent bytes in no packets of its own has no packet size
        let f = Fleet { flows: &[1], ..f };
        let v = Vms {
            packet_bytes: &[1500.0, 0.0, 1500.0],
            ..v
        };
        let e = period(&f, &v, s, None, &mut new, &mut pps, 1).unwrap_err();
        assert_eq!(
            e.0,
            "packet_bytes must be finite and > 0 (>= 0 for rates), got 0.0"
        );
    }
}
