//! DSR-IOV VF scheduling (Algorithm 1's ranking, docs/design.md#vf-scheduling) over the
//! VMs of any number of hosts: the I/O filter (a threshold or the top q), the senders that
//! pass whatever their I/O score, greedy tolerance groups on the network score, the ranking
//! (group, then I/O score, then name), dwell protection, and the cost-benefit pairing of
//! entrants with leavers. One host (an agent's VF policy) or every host of a fleet (the
//! simulator) at once; rows are VMs in any order, each with its host's index.
//!
//! Sorts order floats as numpy's stable lexsort does (NaN last, −0 = +0, ties in row
//! order), and every float operation is the numpy form's, so the decisions are the ones
//! the readable per-host form (`tests/vfsched_oracle.py`) makes.

// `!(a > b)` is the numpy form's `~(a > b)`: true on a NaN, which `a <= b` is not.
#![allow(clippy::neg_cmp_op_on_partial_ord)]

use std::cmp::Ordering;

use crate::npf::np_max;
use crate::waterfill::InputError;

/// The scheduler's settings (`VFSchedulerConfig`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Config {
    /// The I/O filter is a threshold on the (boosted) I/O score; else the top `top_q`.
    pub io_threshold_filter: bool,
    pub io_threshold: f64,
    /// The top-q filter's q (0: every VM passes).
    pub top_q: i64,
    pub tolerance: f64,
    pub hysteresis: f64,
    pub min_dwell_s: f64,
    pub top_senders: bool,
    pub cost_benefit: bool,
    pub virtio_lossless: f64,
    pub hotplug_blip: f64,
    pub horizon: f64,
    pub benefit_margin: f64,
}

/// What the scheduler knows of each VM this period, one value per row.
pub struct Rows<'a> {
    pub host: &'a [i64],
    /// The names' order: ties go to the smaller.
    pub name_rank: &'a [i64],
    pub io_score: &'a [f64],
    pub net_score: &'a [f64],
    pub has_traffic: &'a [bool],
    pub eligible: &'a [bool],
    /// Holds a VF now.
    pub holder: &'a [bool],
    /// When a holder got its VF.
    pub since: &'a [f64],
    /// Demand estimate, bit/s.
    pub demand: &'a [f64],
}

/// The period's decision for every row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    /// Eligible and through the I/O filter.
    pub passed: Vec<bool>,
    /// Position in its host's ranking (0 = best), −1 = not ranked.
    pub rank: Vec<i64>,
    /// Holds a VF after this period.
    pub pq: Vec<bool>,
    /// In the PQ because its dwell time protects it.
    pub dwell: Vec<bool>,
    /// The ranked rows, hosts in index order, each host's best first.
    pub ranked: Vec<i64>,
    /// Passed with traffic, but virtio serves it.
    pub served: Vec<bool>,
    /// A move that did not pay decided its place.
    pub held_back: Vec<bool>,
}

/// numpy's sort order of floats: NaN after everything, −0 equal to +0.
fn np_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// `rows` sorted by host, then `key` ascending, then name rank, then row (a stable lexsort).
fn by_host_key(rows: &mut [usize], host: &[i64], key: impl Fn(usize) -> f64, name: &[i64]) {
    rows.sort_by(|&a, &b| {
        host[a]
            .cmp(&host[b])
            .then_with(|| np_cmp(key(a), key(b)))
            .then_with(|| name[a].cmp(&name[b]))
    });
}

/// Each row's position among the rows of its host (rows sorted by host).
fn positions(rows: &[usize], host: &[i64]) -> Vec<usize> {
    let mut pos = Vec::with_capacity(rows.len());
    for (k, &r) in rows.iter().enumerate() {
        let same = k > 0 && host[rows[k - 1]] == host[r];
        pos.push(if same { pos[k - 1] + 1 } else { 0 });
    }
    pos
}

/// Each row's count of `flag`ged rows of its host up to it, inclusive (rows sorted by host).
fn cumcount(rows: &[usize], host: &[i64], flag: &[bool]) -> Vec<i64> {
    let mut out = Vec::with_capacity(rows.len());
    for (k, &r) in rows.iter().enumerate() {
        let before = if k > 0 && host[rows[k - 1]] == host[r] {
            out[k - 1]
        } else {
            0
        };
        out.push(before + i64::from(flag[k]));
    }
    out
}

/// One scheduling period of every host (`vf_count[h]`: host `h`'s VFs).
pub fn schedule(
    r: &Rows<'_>,
    vf_count: &[i64],
    now_s: f64,
    c: &Config,
) -> Result<Schedule, InputError> {
    let n = r.host.len();
    for (name, len) in [
        ("name_rank", r.name_rank.len()),
        ("io_score", r.io_score.len()),
        ("net_score", r.net_score.len()),
        ("has_traffic", r.has_traffic.len()),
        ("eligible", r.eligible.len()),
        ("holder", r.holder.len()),
        ("since", r.since.len()),
        ("demand", r.demand.len()),
    ] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    if let Some(&v) = vf_count.iter().find(|&&v| v < 0) {
        return Err(InputError(format!("vf_count must be >= 0, got {v}")));
    }
    if let Some(&h) = r
        .host
        .iter()
        .find(|&&h| h < 0 || h as usize >= vf_count.len())
    {
        return Err(InputError(format!(
            "host: {h} is not below {}",
            vf_count.len()
        )));
    }
    let host = r.host;
    let vfc = |i: usize| vf_count[host[i] as usize];
    // a holder's scores count (1 + hysteresis) times, in the filter and in the ranking
    let boost: Vec<f64> = (0..n)
        .map(|i| if r.holder[i] { 1.0 + c.hysteresis } else { 1.0 })
        .collect();
    let netb: Vec<f64> = (0..n).map(|i| r.net_score[i] * boost[i]).collect();
    let iob: Vec<f64> = (0..n).map(|i| r.io_score[i] * boost[i]).collect();
    let mut passed = r.eligible.to_vec();
    if c.io_threshold_filter {
        for i in 0..n {
            passed[i] &= iob[i] >= c.io_threshold;
        }
    } else if c.top_q != 0 {
        let mut e: Vec<usize> = (0..n).filter(|&i| passed[i]).collect();
        by_host_key(&mut e, host, |i| -iob[i], r.name_rank);
        for (&i, p) in e.iter().zip(positions(&e, host)) {
            if p as i64 >= c.top_q {
                passed[i] = false;
            }
        }
    }
    if c.top_senders {
        // the vf_count highest (boosted) demands of each host pass whatever their I/O score
        let mut s: Vec<usize> = (0..n)
            .filter(|&i| r.eligible[i] && r.has_traffic[i])
            .collect();
        by_host_key(&mut s, host, |i| -(r.demand[i] * boost[i]), r.name_rank);
        for (&i, p) in s.iter().zip(positions(&s, host)) {
            if (p as i64) < vfc(i) {
                passed[i] = true;
            }
        }
    }
    let mut traffic: Vec<bool> = (0..n).map(|i| passed[i] && r.has_traffic[i]).collect();
    let gain: Vec<f64> = (0..n)
        .map(|i| np_max(0.0, r.demand[i] - c.virtio_lossless))
        .collect();
    let mut served = vec![false; n];
    if c.cost_benefit {
        // a holder stays ranked: unplugging it buys nothing unless an entrant pays for it
        for i in 0..n {
            served[i] = traffic[i] && !(gain[i] > 0.0) && !r.holder[i];
            traffic[i] &= !served[i];
        }
    }
    // tolerance groups, formed greedily from each host's leader down: a VM within
    // (1 + tolerance) of its group's leader (nb ≥ leader / (1 + tolerance)) joins it
    let mut order: Vec<usize> = (0..n).filter(|&i| traffic[i]).collect();
    by_host_key(&mut order, host, |i| -netb[i], r.name_rank);
    let mut group = vec![0i64; n];
    let (mut leader, mut g) = (0.0, 0i64);
    for (k, &i) in order.iter().enumerate() {
        if k == 0 || host[order[k - 1]] != host[i] {
            (leader, g) = (netb[i], 0);
        } else if !(netb[i] >= leader / (1.0 + c.tolerance)) {
            (leader, g) = (netb[i], g + 1);
        }
        group[i] = g;
    }
    let mut ranked = order;
    ranked.sort_by(|&a, &b| {
        host[a]
            .cmp(&host[b])
            .then_with(|| group[a].cmp(&group[b]))
            .then_with(|| np_cmp(-iob[a], -iob[b]))
            .then_with(|| r.name_rank[a].cmp(&r.name_rank[b]))
            .then_with(|| a.cmp(&b))
    });
    let mut rank = vec![-1i64; n];
    for (&i, p) in ranked.iter().zip(positions(&ranked, host)) {
        rank[i] = p as i64;
    }
    // holders inside their dwell keep their VF whatever their rank (up to the pool), the
    // rest of the pool goes down the ranking
    let prot: Vec<bool> = ranked
        .iter()
        .map(|&i| r.holder[i] && now_s - r.since[i] < c.min_dwell_s)
        .collect();
    let kept: Vec<bool> = ranked
        .iter()
        .zip(cumcount(&ranked, host, &prot))
        .zip(&prot)
        .map(|((&i, cc), &p)| p && cc <= vfc(i))
        .collect();
    let mut n_kept = vec![0i64; vf_count.len()];
    for (&i, &k) in ranked.iter().zip(&kept) {
        n_kept[host[i] as usize] += i64::from(k);
    }
    let rest: Vec<bool> = prot.iter().map(|&p| !p).collect();
    let mut pq = vec![false; n];
    let mut dwell = vec![false; n];
    for (k, (&i, cc)) in ranked
        .iter()
        .zip(cumcount(&ranked, host, &rest))
        .enumerate()
    {
        let room = (vfc(i) - n_kept[host[i] as usize]).max(0);
        if kept[k] || (rest[k] && cc <= room) {
            pq[i] = true;
        }
        dwell[i] = kept[k];
    }
    let mut held_back = vec![false; n];
    if c.cost_benefit {
        pay_for_moves(
            r,
            &ranked,
            &rank,
            &mut pq,
            &mut held_back,
            &gain,
            vf_count,
            c,
        )?;
    }
    Ok(Schedule {
        passed,
        rank,
        pq,
        dwell,
        ranked: ranked.iter().map(|&i| i as i64).collect(),
        served,
        held_back,
    })
}

/// Entrants in rank order take the free VFs, then pair with the leavers in (gain, name)
/// order; a move is made when `horizon · (gain in − gain out) > (1 + margin) · (blip ·
/// (demand in + demand out))` (a free VF: nothing out), else both stay where they were.
#[allow(clippy::too_many_arguments)] // the schedule's state, updated in place
fn pay_for_moves(
    r: &Rows<'_>,
    ranked: &[usize],
    rank: &[i64],
    pq: &mut [bool],
    held_back: &mut [bool],
    gain: &[f64],
    vf_count: &[i64],
    c: &Config,
) -> Result<(), InputError> {
    let (host, holder, demand) = (r.host, r.holder, r.demand);
    let n = host.len();
    let n_hosts = vf_count.len();
    let ent: Vec<usize> = ranked
        .iter()
        .copied()
        .filter(|&i| pq[i] && !holder[i])
        .collect();
    let mut lv: Vec<usize> = (0..n)
        .filter(|&i| rank[i] >= 0 && holder[i] && !pq[i])
        .collect();
    by_host_key(&mut lv, host, |i| gain[i], r.name_rank);
    let (mut n_kept, mut n_lv) = (vec![0i64; n_hosts], vec![0i64; n_hosts]);
    let mut lv_start = vec![lv.len(); n_hosts];
    for i in 0..n {
        n_kept[host[i] as usize] += i64::from(pq[i] && holder[i]);
    }
    for (k, &i) in lv.iter().enumerate().rev() {
        let h = host[i] as usize;
        n_lv[h] += 1;
        lv_start[h] = k;
    }
    // hosts without leavers: where their leavers would start (numpy's searchsorted)
    for h in (0..n_hosts).rev() {
        if n_lv[h] == 0 {
            lv_start[h] = if h + 1 < n_hosts {
                lv_start[h + 1]
            } else {
                lv.len()
            };
        }
    }
    let overflow: Vec<i64> = (0..n_hosts)
        .map(|h| (n_kept[h] + n_lv[h] - vf_count[h]).max(0))
        .collect();
    let free: Vec<i64> = (0..n_hosts)
        .map(|h| vf_count[h] - n_kept[h] - (n_lv[h] - overflow[h]))
        .collect();
    let margin = 1.0 + c.benefit_margin;
    let cost = c.hotplug_blip;
    let mut moves: Vec<(usize, Option<usize>)> = Vec::new();
    for (&i, j) in ent.iter().zip(positions(&ent, host)) {
        let h = host[i] as usize;
        let j = j as i64;
        if j < free[h] {
            moves.push((i, None));
        } else {
            let at = lv_start[h] as i64 + overflow[h] + j - free[h];
            let out = usize::try_from(at)
                .ok()
                .and_then(|k| lv.get(k).copied())
                .ok_or_else(|| InputError(format!("no leaver {at} for entrant row {i}")))?;
            moves.push((i, Some(out)));
        }
    }
    for (i, out) in moves {
        match out {
            None => {
                if !(c.horizon * (gain[i] - 0.0) > margin * (cost * demand[i])) {
                    pq[i] = false;
                    held_back[i] = true;
                }
            }
            Some(o) => {
                let benefit = c.horizon * (gain[i] - gain[o]);
                if !(benefit > margin * (cost * (demand[i] + demand[o]))) {
                    pq[i] = false;
                    pq[o] = true;
                    held_back[i] = true;
                    held_back[o] = true;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: Config = Config {
        io_threshold_filter: true,
        io_threshold: 65.0,
        top_q: 0,
        tolerance: 0.10,
        hysteresis: 0.05,
        min_dwell_s: 30.0,
        top_senders: false,
        cost_benefit: false,
        virtio_lossless: 100e6,
        hotplug_blip: 2.0,
        horizon: 60.0,
        benefit_margin: 1.0,
    };

    struct Vms {
        host: Vec<i64>,
        name: Vec<i64>,
        io: Vec<f64>,
        net: Vec<f64>,
        traffic: Vec<bool>,
        eligible: Vec<bool>,
        holder: Vec<bool>,
        since: Vec<f64>,
        demand: Vec<f64>,
    }

    /// (host, io, net, traffic, holder since or None, demand) of one VM
    type Vm = (i64, f64, f64, bool, Option<f64>, f64);

    impl Vms {
        /// The VMs, named in order.
        fn of(rows: &[Vm]) -> Self {
            Vms {
                host: rows.iter().map(|r| r.0).collect(),
                name: (0..rows.len() as i64).collect(),
                io: rows.iter().map(|r| r.1).collect(),
                net: rows.iter().map(|r| r.2).collect(),
                traffic: rows.iter().map(|r| r.3).collect(),
                eligible: vec![true; rows.len()],
                holder: rows.iter().map(|r| r.4.is_some()).collect(),
                since: rows.iter().map(|r| r.4.unwrap_or(0.0)).collect(),
                demand: rows.iter().map(|r| r.5).collect(),
            }
        }

        fn rows(&self) -> Rows<'_> {
            Rows {
                host: &self.host,
                name_rank: &self.name,
                io_score: &self.io,
                net_score: &self.net,
                has_traffic: &self.traffic,
                eligible: &self.eligible,
                holder: &self.holder,
                since: &self.since,
                demand: &self.demand,
            }
        }
    }

    #[test]
    fn groups_then_io_score_rank_and_the_pool_goes_down_the_ranking() {
        // host 0, 2 VFs. net 100, 95, 50: 95 ≥ 100 / 1.1 = 90.9 joins the leader's group,
        // 50 starts the next. Inside a group the higher io ranks first: vm1 (io 80), vm0
        // (io 70), then vm2's group. vm3's io 60 < 65: filtered. vm4 has no traffic: not
        // ranked. Host 1: vm5 alone, 0 VFs: ranked, no VF.
        let v = Vms::of(&[
            (0, 70.0, 100.0, true, None, 0.0),
            (0, 80.0, 95.0, true, None, 0.0),
            (0, 90.0, 50.0, true, None, 0.0),
            (0, 60.0, 200.0, true, None, 0.0),
            (0, 99.0, 0.0, false, None, 0.0),
            (1, 90.0, 10.0, true, None, 0.0),
        ]);
        let s = schedule(&v.rows(), &[2, 0], 100.0, &C).unwrap();
        assert_eq!(s.ranked, [1, 0, 2, 5]);
        assert_eq!(s.rank, [1, 0, 2, -1, -1, 0]);
        assert_eq!(s.passed, [true, true, true, false, true, true]);
        assert_eq!(s.pq, [true, true, false, false, false, false]);
    }

    #[test]
    fn a_holder_inside_its_dwell_keeps_its_vf_and_hysteresis_boosts_it() {
        // 1 VF. vm0 holds it since t=90 (dwell 30 s: protected at t=100) and ranks last
        // (net 10 against 100): it keeps the VF, vm1 gets none. At t=130 the dwell is
        // over: vm1 takes it. The holder's io 63 · 1.05 = 66.15 passes the 65 threshold.
        let v = Vms::of(&[
            (0, 63.0, 10.0, true, Some(90.0), 0.0),
            (0, 90.0, 100.0, true, None, 0.0),
        ]);
        let s = schedule(&v.rows(), &[1], 100.0, &C).unwrap();
        assert_eq!(
            (s.pq.clone(), s.dwell.clone()),
            (vec![true, false], vec![true, false])
        );
        assert_eq!(s.passed, [true, true]);
        let s = schedule(&v.rows(), &[1], 130.0, &C).unwrap();
        assert_eq!((s.pq, s.dwell), (vec![false, true], vec![false, false]));
    }

    #[test]
    fn a_move_that_does_not_pay_is_held_back() {
        // cost-benefit, 1 VF held by vm0 (dwell over), demand 150 Mbit/s: gain 50 Mbit/s.
        // vm1 ranks first with demand 160 Mbit/s (gain 60): benefit 60 s · 10 Mbit/s =
        // 600 Mbit against (1 + 1) · 2 s · 310 Mbit/s = 1,240 Mbit: not worth it, both stay.
        // vm2 at 50 Mbit/s (no gain over virtio) is served by virtio, not ranked.
        let cb = Config {
            cost_benefit: true,
            io_threshold: 0.0,
            ..C
        };
        let v = Vms::of(&[
            (0, 50.0, 10.0, true, Some(0.0), 150e6),
            (0, 50.0, 100.0, true, None, 160e6),
            (0, 50.0, 90.0, true, None, 50e6),
        ]);
        let s = schedule(&v.rows(), &[1], 100.0, &cb).unwrap();
        assert_eq!(s.served, [false, false, true]);
        assert_eq!(s.pq, [true, false, false]);
        assert_eq!(s.held_back, [true, true, false]);
    }

    #[test]
    fn bad_input_names_the_field() {
        let v = Vms::of(&[(3, 1.0, 1.0, true, None, 0.0)]);
        let e = schedule(&v.rows(), &[1], 0.0, &C).unwrap_err();
        assert_eq!(e.0, "host: 3 is not below 1");
        let e = schedule(&v.rows(), &[-1], 0.0, &C).unwrap_err();
        assert_eq!(e.0, "vf_count must be >= 0, got -1");
    }
}
