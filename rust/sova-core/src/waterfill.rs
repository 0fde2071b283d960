//! Weighted max-min fair sharing (water-filling) of many links' capacities at once.
//!
//! Every flow crosses one link; within a link a flow gets `min(demand, level·weight)` with
//! the level as high as the link's capacity allows. The simulator's physics shares every
//! NIC this way each tick, and the allocators share what is left over.
//!
//! The arithmetic is the one the numpy form computed (kept in tests/waterfill_oracle.py),
//! step for step, so results are the same floats: within a link flows are taken by their
//! saturation level `demand/weight` (stable, NaN last); the level before flow `k` is
//! `(C − Σ earlier demands) / Σ remaining weights`; the first flow whose saturation level
//! exceeds it is where the water stops, and it and every later flow get `level·weight`.
//! The sums of demands (and of fractional weights) run as one running sum across all links
//! in link order, from which each link subtracts its start, as numpy's `cumsum` over the
//! whole layout did; see [`crate::sum`].

use crate::npf::np_min;
use crate::sum::numpy_reduceat_segment;
use std::cmp::Ordering;
use std::fmt;

/// Unit roundoff of f64.
const U: f64 = f64::EPSILON / 2.0;

/// Why a layout or an input was refused; the message names the field and the value.
#[derive(Debug, Clone, PartialEq)]
pub struct InputError(pub String);

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// Flows laid out by the link they cross, compressed by rows: link `h`'s flows, in index
/// order, are `order[start[h]..start[h + 1]]`. Checked once at construction, so the fill
/// indexes without bounds surprises.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    order: &'a [i64],
    start: &'a [i64],
}

impl<'a> Layout<'a> {
    /// A layout of `n_flows` flows over `start.len() - 1` links.
    pub fn new(order: &'a [i64], start: &'a [i64], n_flows: usize) -> Result<Self, InputError> {
        let Some((&first, _)) = start.split_first() else {
            return Err(InputError(
                "start: empty, needs one entry per link plus one".into(),
            ));
        };
        if first != 0 {
            return Err(InputError(format!("start[0]: {first}, must be 0")));
        }
        for (h, pair) in start.windows(2).enumerate() {
            if pair[1] < pair[0] {
                return Err(InputError(format!(
                    "start[{}]: {} below start[{h}] = {}",
                    h + 1,
                    pair[1],
                    pair[0]
                )));
            }
        }
        let last = start[start.len() - 1];
        if usize::try_from(last).ok() != Some(order.len()) {
            return Err(InputError(format!(
                "start[-1]: {last}, must equal the {} flows laid out",
                order.len()
            )));
        }
        if let Some((k, &f)) = order
            .iter()
            .enumerate()
            .find(|(_, f)| usize::try_from(**f).map_or(true, |f| f >= n_flows))
        {
            return Err(InputError(format!(
                "order[{k}]: flow {f} outside 0..{n_flows}"
            )));
        }
        Ok(Self { order, start })
    }

    /// Number of links.
    pub fn links(&self) -> usize {
        self.start.len() - 1
    }

    /// Link `h`'s flows in index order.
    pub fn row(&self, h: usize) -> impl Iterator<Item = usize> + '_ {
        // in range and ordered: checked in `new`
        let (a, b) = (self.start[h] as usize, self.start[h + 1] as usize);
        self.order[a..b].iter().map(|&f| f as usize)
    }

    /// How many flows link `h` has.
    pub fn row_len(&self, h: usize) -> usize {
        (self.start[h + 1] - self.start[h]) as usize
    }
}

/// The layout of `group` (flow `i` crosses link `group[i]`) over `n_links` links, as owned
/// `(order, start)`: a counting sort, stable, so each link's flows stay in index order.
pub fn layout_of(group: &[i64], n_links: usize) -> Result<(Vec<i64>, Vec<i64>), InputError> {
    let mut start = vec![0i64; n_links + 1];
    for (i, &g) in group.iter().enumerate() {
        match usize::try_from(g) {
            Ok(h) if h < n_links => start[h + 1] += 1,
            _ => {
                return Err(InputError(format!(
                    "group[{i}]: link {g} outside 0..{n_links}"
                )));
            }
        }
    }
    for h in 0..n_links {
        start[h + 1] += start[h];
    }
    let mut next = start.clone();
    let mut order = vec![0i64; group.len()];
    for (i, &g) in group.iter().enumerate() {
        let slot = &mut next[g as usize];
        order[*slot as usize] = i as i64;
        *slot += 1;
    }
    Ok((order, start))
}

/// Whether every weight is a whole number (their sums are then exact in any order).
pub fn whole_weights(weights: Option<&[f64]>) -> bool {
    weights.is_none_or(|w| w.iter().all(|x| *x == x.trunc()))
}

/// numpy's sort order for floats: NaN after every number, ties (and NaNs) as they stand.
fn nan_last(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (true, true) => Ordering::Equal,
    }
}

/// The fill's inputs: flow `f` takes part when `member` is absent or true for it.
#[derive(Clone, Copy)]
pub struct Flows<'a> {
    pub demands: &'a [f64],
    pub weights: Option<&'a [f64]>,
    pub member: Option<&'a [bool]>,
}

impl Flows<'_> {
    fn demand(&self, f: usize) -> f64 {
        match self.member {
            Some(m) if !m[f] => 0.0,
            _ => self.demands[f],
        }
    }

    fn takes_part(&self, f: usize) -> bool {
        self.member.is_none_or(|m| m[f])
    }

    fn check(&self, n_links_cap: usize, layout: &Layout<'_>) -> Result<(), InputError> {
        let n = self.demands.len();
        if let Some(w) = self.weights
            && w.len() != n
        {
            return Err(InputError(format!(
                "weights: {} values for {n} demands",
                w.len()
            )));
        }
        if let Some(m) = self.member
            && m.len() != n
        {
            return Err(InputError(format!(
                "member: {} values for {n} demands",
                m.len()
            )));
        }
        if n_links_cap != layout.links() {
            return Err(InputError(format!(
                "capacity: {n_links_cap} links, the layout has {}",
                layout.links()
            )));
        }
        Ok(())
    }
}

/// Reused buffers of one link's sorted flows.
#[derive(Default)]
struct Row {
    keyed: Vec<(f64, usize)>, // (saturation level, flow)
    weights: Vec<f64>,
}

/// The opening both fills share: the inputs checked, `out` zeroed, and, where every link's
/// whole-weighted demands fit ([`all_fit`]), each flow given its demand: true when that
/// shortcut filled `out` (nothing left to fill).
fn filled_whole(
    capacity: &[f64],
    layout: &Layout<'_>,
    flows: &Flows<'_>,
    whole: bool,
    n_bound: usize,
    out: &mut [f64],
) -> Result<bool, InputError> {
    flows.check(capacity.len(), layout)?;
    if out.len() != flows.demands.len() {
        return Err(InputError(format!(
            "out: {} values for {} demands",
            out.len(),
            flows.demands.len()
        )));
    }
    out.fill(0.0);
    if !(whole && all_fit(capacity, layout, flows, n_bound)) {
        return Ok(false);
    }
    for h in 0..layout.links() {
        for f in layout.row(h) {
            out[f] = flows.demand(f);
        }
    }
    Ok(true)
}

/// Water-fill every link of `layout` at once into `out` (flows outside the layout, or not
/// members, get 0).
///
/// `whole`: every weight is a whole number ([`whole_weights`]); only then is the no-sort
/// shortcut taken, and whole weights are summed per link. `n_bound` is the flow count the
/// shortcut's rounding bound is taken over (the caller's problem size).
pub fn links_waterfill(
    capacity: &[f64],
    layout: &Layout<'_>,
    flows: Flows<'_>,
    whole: bool,
    n_bound: usize,
    out: &mut [f64],
) -> Result<(), InputError> {
    if filled_whole(capacity, layout, &flows, whole, n_bound, out)? {
        return Ok(());
    }
    let mut row = Row::default();
    // numpy's cumsum over the whole layout: inclusive running sums across links
    let mut cum = Cum::default();
    for (h, &cap_h) in capacity.iter().enumerate() {
        sort_row(layout, &flows, h, &mut row.keyed, &mut row.weights);
        if !row.keyed.is_empty() {
            fill_row(
                &row.keyed,
                &row.weights,
                cap_h,
                &flows,
                whole,
                &mut cum,
                |f, x| {
                    out[f] = x;
                },
            );
        }
    }
    Ok(())
}

/// The running sums of demands and weights across links, as numpy's `cumsum` over the
/// whole layout formed them (`started`: some flow was summed; the first sum is the flow's
/// own value, not `0.0 +` it).
#[derive(Debug, Clone, Copy, Default)]
struct Cum {
    d: f64,
    w: f64,
    started: bool,
}

impl Cum {
    /// The sums with one more flow of demand `d` and weight `w`.
    #[inline]
    fn add(&mut self, d: f64, w: f64) {
        self.d = if self.started { self.d + d } else { d };
        self.w = if self.started { self.w + w } else { w };
        self.started = true;
    }
}

/// Link `h`'s taking part flows by saturation level (stable: equal levels keep index
/// order; NaN last) into `keyed`, their weights into `weights`.
fn sort_row(
    layout: &Layout<'_>,
    flows: &Flows<'_>,
    h: usize,
    keyed: &mut Vec<(f64, usize)>,
    weights: &mut Vec<f64>,
) {
    let sat = |f: usize| match flows.weights {
        None => flows.demands[f],
        Some(w) => flows.demands[f] / w[f],
    };
    keyed.clear();
    keyed.extend(
        layout
            .row(h)
            .filter(|&f| flows.takes_part(f))
            .map(|f| (sat(f), f)),
    );
    keyed.sort_by(|a, b| nan_last(a.0, b.0));
    weights.clear();
    weights.extend(
        keyed
            .iter()
            .map(|&(_, f)| flows.weights.map_or(1.0, |w| w[f])),
    );
}

/// One link's fill of capacity `cap_h` over its sorted flows (`keyed`, `weights`: see
/// [`sort_row`], not empty), each flow's share to `emit`; `cum` the running sums from
/// the links before, advanced over this one.
fn fill_row(
    keyed: &[(f64, usize)],
    weights: &[f64],
    cap_h: f64,
    flows: &Flows<'_>,
    whole: bool,
    cum: &mut Cum,
    mut emit: impl FnMut(usize, f64),
) {
    let k = keyed.len();
    // the total weight the row starts with, summed as the numpy form did
    let total_w = match flows.weights {
        None => k as f64,
        Some(_) if whole => weights.iter().sum(),
        Some(_) => numpy_reduceat_segment(weights),
    };
    let mut first_ex_d = 0.0;
    let mut first_ex_w = 0.0;
    let mut before_w_row = 0.0; // whole weights: the row's own running sum
    let mut stop: Option<f64> = None;
    for (j, &(sat_f, f)) in keyed.iter().enumerate() {
        let d = flows.demands[f];
        let w = weights[j];
        // exclusive sums as numpy formed them: (running sum including this flow) − it
        cum.add(d, w);
        let ex_d = cum.d - d;
        let ex_w = cum.w - w;
        if j == 0 {
            first_ex_d = ex_d;
            first_ex_w = ex_w;
        }
        if let Some(level) = stop {
            let fill = if flows.weights.is_none() {
                level
            } else {
                level * w
            };
            emit(f, np_min(d, fill));
            continue;
        }
        let remaining_w = match flows.weights {
            None => (k - j) as f64,
            Some(_) if whole => total_w - before_w_row,
            Some(_) => total_w - (ex_w - first_ex_w),
        };
        before_w_row += w;
        let level = (cap_h - (ex_d - first_ex_d)) / remaining_w;
        if sat_f > level {
            stop = Some(level);
            let fill = if flows.weights.is_none() {
                level
            } else {
                level * w
            };
            emit(f, np_min(d, fill));
        } else {
            emit(f, d);
        }
    }
}

/// [`links_waterfill`] with the links shared among `threads` threads in runs of whole
/// links of about [`crate::tick::RUN`] flows, the same floats for any number: the links
/// are sorted in runs, the running sums across links (the only thing a link takes from
/// the ones before it) are formed on this thread in link order, the very additions of the
/// one-thread fill, and each run then fills its links from the sums at its links' starts.
/// Small layouts, and one thread, run [`links_waterfill`] itself.
pub fn links_waterfill_threads(
    capacity: &[f64],
    layout: &Layout<'_>,
    flows: Flows<'_>,
    whole: bool,
    n_bound: usize,
    out: &mut [f64],
    threads: usize,
) -> Result<(), InputError> {
    crate::tick::check_threads(threads)?;
    let n = flows.demands.len();
    if threads == 1 || n <= crate::tick::RUN {
        return links_waterfill(capacity, layout, flows, whole, n_bound, out);
    }
    if filled_whole(capacity, layout, &flows, whole, n_bound, out)? {
        return Ok(());
    }
    // runs of consecutive links of about RUN flows each
    let mut runs = Vec::new();
    let (mut first, mut count) = (0, 0);
    for h in 0..capacity.len() {
        count += layout.row_len(h);
        if count >= crate::tick::RUN {
            runs.push(SortedRun::new(first..h + 1));
            (first, count) = (h + 1, 0);
        }
    }
    if first < capacity.len() {
        runs.push(SortedRun::new(first..capacity.len()));
    }
    crate::parallel::with_threads(threads, |pool| {
        pool.for_each(runs.iter_mut().collect(), |r| r.sort(layout, &flows));
        // the running sums at each link's start, in link order on this thread
        let mut cum = Cum::default();
        for r in &mut runs {
            for j in 0..r.links.len() {
                r.starts.push(cum);
                let (a, b) = (r.offsets[j], r.offsets[j + 1]);
                for (&(_, f), &w) in r.keyed[a..b].iter().zip(&r.weights[a..b]) {
                    cum.add(flows.demands[f], w);
                }
            }
        }
        pool.for_each(runs.iter_mut().collect(), |r| {
            r.fill(capacity, &flows, whole);
        });
    });
    for r in &runs {
        for &(f, x) in &r.got {
            out[f] = x;
        }
    }
    Ok(())
}

/// A run of links for [`links_waterfill_threads`]: their sorted flows, back to back
/// (link `links.start + j`'s at `offsets[j]..offsets[j + 1]`), the running sums at each
/// link's start, and the shares filled.
struct SortedRun {
    links: std::ops::Range<usize>,
    keyed: Vec<(f64, usize)>,
    weights: Vec<f64>,
    offsets: Vec<usize>,
    starts: Vec<Cum>,
    got: Vec<(usize, f64)>,
}

impl SortedRun {
    fn new(links: std::ops::Range<usize>) -> Self {
        SortedRun {
            links,
            keyed: Vec::new(),
            weights: Vec::new(),
            offsets: vec![0],
            starts: Vec::new(),
            got: Vec::new(),
        }
    }

    fn sort(&mut self, layout: &Layout<'_>, flows: &Flows<'_>) {
        let (mut keyed, mut weights) = (Vec::new(), Vec::new());
        for h in self.links.clone() {
            sort_row(layout, flows, h, &mut keyed, &mut weights);
            self.keyed.extend_from_slice(&keyed);
            self.weights.extend_from_slice(&weights);
            self.offsets.push(self.keyed.len());
        }
    }

    fn fill(&mut self, capacity: &[f64], flows: &Flows<'_>, whole: bool) {
        let got = &mut self.got;
        for (j, h) in self.links.clone().enumerate() {
            let (a, b) = (self.offsets[j], self.offsets[j + 1]);
            if a == b {
                continue;
            }
            let mut cum = self.starts[j];
            let (keyed, weights) = (&self.keyed[a..b], &self.weights[a..b]);
            fill_row(
                keyed,
                weights,
                capacity[h],
                flows,
                whole,
                &mut cum,
                |f, x| {
                    got.push((f, x));
                },
            );
        }
    }
}

/// Every link's flows fit with a margin the fill's rounding cannot cross, so the fill
/// would give every flow its demand exactly.
///
/// Sorted by level, flow `k`'s level is at most (Σ demands from `k` on) / (Σ weights from
/// `k` on), and the fill's level there is (C − Σ earlier demands) / the same weights: at
/// least the flow's own level plus (C − Σ demands) / weights. The fill's running sums go
/// across all links, so their rounding is below (2n + 4)·u·S (n flows, S the sum of all
/// demands); whole-number weights sum exactly. A slack above 8(n + 2)·u·(S + max C) plus
/// 1e-9·C leaves every flow satisfied in floating point as in exact arithmetic. Only for
/// whole-number weights (fractional ones' sums round too).
fn all_fit(capacity: &[f64], layout: &Layout<'_>, flows: &Flows<'_>, n_bound: usize) -> bool {
    let totals: Vec<f64> = (0..layout.links())
        .map(|h| layout.row(h).fold(0.0, |s, f| s + flows.demand(f)))
        .collect();
    let s: f64 = totals.iter().sum();
    let cap_max = capacity.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let scale = 8.0 * (n_bound as f64 + 2.0) * U * (s + cap_max);
    (0..layout.links()).all(|h| {
        let empty = layout.start[h] == layout.start[h + 1];
        empty || capacity[h] - totals[h] > scale + 1e-9 * capacity[h]
    })
}

/// [`links_waterfill`] of `group`'s flows where flow `i` gets at least `floors[i]` (up to
/// its demand): a flow gets its floor or its fair share, whichever is larger. Flows the
/// plain fill leaves below their floor are pinned at it, their floors come off the link,
/// and the others are filled again. Floors that over-commit a link shrink together.
pub fn floored_waterfill(
    capacity: &[f64],
    group: &[i64],
    demands: &[f64],
    weights: &[f64],
    floors: &[f64],
    out: &mut [f64],
) -> Result<(), InputError> {
    let n = demands.len();
    for (name, len) in [
        ("group", group.len()),
        ("weights", weights.len()),
        ("floors", floors.len()),
    ] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} demands")));
        }
    }
    let h_count = capacity.len();
    let (order, start) = layout_of(group, h_count)?;
    let layout = Layout::new(&order, &start, n)?;
    let mut lo: Vec<f64> = floors
        .iter()
        .zip(demands)
        .map(|(&f, &d)| np_min(f, d))
        .collect();
    // numpy's bincount: each link's sum in index order
    let per_link = |pick: &dyn Fn(usize) -> bool, lo: &[f64]| {
        let mut s = vec![0.0; h_count];
        for i in 0..n {
            if pick(i) {
                s[group[i] as usize] += lo[i];
            }
        }
        s
    };
    let committed = per_link(&|_| true, &lo);
    if committed.iter().zip(capacity).any(|(c, cap)| c > cap) {
        for i in 0..n {
            let h = group[i] as usize;
            let scale = if committed[h] > capacity[h] {
                capacity[h] / committed[h].max(1e-300)
            } else {
                1.0
            };
            lo[i] *= scale;
        }
    }
    let mut pinned = vec![false; n];
    let mut residual = vec![0.0; h_count];
    let mut sub_order: Vec<i64> = Vec::with_capacity(n);
    let mut sub_start = vec![0i64; h_count + 1];
    for _ in 0..=n {
        let held = per_link(&|i| pinned[i], &lo);
        for h in 0..h_count {
            // numpy's maximum: NaN stays NaN
            let r = capacity[h] - held[h];
            residual[h] = if r.is_nan() { r } else { r.max(0.0) };
        }
        // the free flows as a problem of their own (their layout, their count, their
        // weights), as the numpy form filled them
        sub_order.clear();
        for h in 0..h_count {
            sub_order.extend(layout.row(h).filter(|&f| !pinned[f]).map(|f| f as i64));
            sub_start[h + 1] = sub_order.len() as i64;
        }
        let n_free = sub_order.len();
        if n_free > 0 {
            let whole = sub_order
                .iter()
                .all(|&f| weights[f as usize] == weights[f as usize].trunc());
            let sub = Layout::new(&sub_order, &sub_start, n)?;
            let fl = Flows {
                demands,
                weights: Some(weights),
                member: None,
            };
            links_waterfill(&residual, &sub, fl, whole, n_free, out)?;
        } else {
            out.fill(0.0);
        }
        let mut any_low = false;
        for i in 0..n {
            if pinned[i] {
                out[i] = lo[i];
            } else if out[i] < lo[i] - 1e-9 {
                pinned[i] = true;
                any_low = true;
            }
        }
        if !any_low {
            break;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fill(cap: &[f64], group: &[i64], d: &[f64], w: Option<&[f64]>) -> Vec<f64> {
        let (order, start) = layout_of(group, cap.len()).unwrap();
        let layout = Layout::new(&order, &start, d.len()).unwrap();
        let mut out = vec![0.0; d.len()];
        let flows = Flows {
            demands: d,
            weights: w,
            member: None,
        };
        links_waterfill(cap, &layout, flows, whole_weights(w), d.len(), &mut out).unwrap();
        out
    }

    /// [`links_waterfill_threads`] of 7,000 flows over 400 links of 0-40 flows each (some
    /// links empty, most congested, flows in an order that is not by link), with
    /// fractional, whole or no weights and some flows not members, on `threads` threads.
    fn fill_bits(threads: usize, weights: usize, members: bool) -> Vec<u64> {
        let x = |i: usize, a: f64| (i as f64 * a).fract();
        let n = 7000;
        let links = 400;
        // link of flow i: scattered, and links 0 mod 17 left empty
        let group: Vec<i64> = (0..n)
            .map(|i| {
                let g = (i * 7919) % links;
                (if g % 17 == 0 { g + 1 } else { g }) as i64
            })
            .collect();
        let cap: Vec<f64> = (0..links).map(|h| 1e9 + 9e9 * x(h, 0.31)).collect();
        let d: Vec<f64> = (0..n).map(|i| 2e9 * x(i, 0.37) * x(i, 0.71)).collect();
        let w: Vec<f64> = match weights {
            0 => (0..n).map(|i| 0.5 + 3.0 * x(i, 0.13)).collect(),
            _ => (0..n).map(|i| (1 + i % 4) as f64).collect(),
        };
        let member: Vec<bool> = (0..n).map(|i| i % 5 != 2).collect();
        let (order, start) = layout_of(&group, links).unwrap();
        let layout = Layout::new(&order, &start, n).unwrap();
        let flows = Flows {
            demands: &d,
            weights: (weights < 2).then_some(&w[..]),
            member: members.then_some(&member[..]),
        };
        let whole = whole_weights(flows.weights);
        let mut out = vec![7.0; n];
        links_waterfill_threads(&cap, &layout, flows, whole, n, &mut out, threads).unwrap();
        // congested links: the fill ran, not the all-fit shortcut
        assert!((0..n).filter(|&i| out[i] < 0.99 * d[i]).count() > 1000);
        out.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn a_fill_is_the_same_bits_on_one_thread_or_several() {
        for weights in 0..3 {
            for members in [false, true] {
                let one = fill_bits(1, weights, members);
                for threads in [2, 3] {
                    let got = fill_bits(threads, weights, members);
                    assert!(one == got, "{threads} threads, {weights} {members}");
                }
                // every flow written (none kept the 7.0 left in `out`)
                let got: Vec<f64> = one.iter().map(|&b| f64::from_bits(b)).collect();
                assert!(got.iter().all(|&v| v != 7.0));
                assert!(got.iter().filter(|&&v| v > 0.0).count() > 3000);
            }
        }
        let layout = Layout::new(&[], &[0], 0).unwrap();
        let flows = Flows {
            demands: &[],
            weights: None,
            member: None,
        };
        let e = links_waterfill_threads(&[], &layout, flows, true, 0, &mut [], 0).unwrap_err();
        assert_eq!(e.0, "threads: 0, not a count of threads >= 1");
    }

    #[test]
    fn one_link_examples() {
        // 10 among [2, 8, 8]: level 10/3 ≥ 2 -> 2; 8 left over two -> 4 each
        assert_eq!(
            fill(&[10.0], &[0, 0, 0], &[2.0, 8.0, 8.0], None),
            [2.0, 4.0, 4.0]
        );
        // weights 1:3, both hungry: 12 -> 3 and 9
        assert_eq!(
            fill(&[12.0], &[0, 0], &[100.0, 100.0], Some(&[1.0, 3.0])),
            [3.0, 9.0]
        );
        // under-subscribed: demands as they are
        assert_eq!(
            fill(&[10.0], &[0, 0, 0], &[1.0, 2.0, 3.0], None),
            [1.0, 2.0, 3.0]
        );
        // zero capacity: nothing
        assert_eq!(fill(&[0.0], &[0, 0], &[1.0, 2.0], None), [0.0, 0.0]);
    }

    #[test]
    fn links_are_independent() {
        // link 0: 10 among [2, 8, 8] -> [2, 4, 4]; link 1: 12 among [100, 6] w 1:3 -> 6, 6
        let got = fill(
            &[10.0, 12.0, 5.0],
            &[0, 1, 0, 0, 1],
            &[2.0, 100.0, 8.0, 8.0, 6.0],
            Some(&[1.0, 1.0, 1.0, 1.0, 3.0]),
        );
        assert_eq!(got, [2.0, 6.0, 4.0, 4.0, 6.0]);
    }

    #[test]
    fn members_only() {
        let (order, start) = layout_of(&[0, 0, 0], 1).unwrap();
        let layout = Layout::new(&order, &start, 3).unwrap();
        let mut out = vec![9.0; 3];
        let flows = Flows {
            demands: &[8.0, 8.0, 8.0],
            weights: None,
            member: Some(&[true, false, true]),
        };
        links_waterfill(&[10.0], &layout, flows, true, 3, &mut out).unwrap();
        assert_eq!(out, [5.0, 0.0, 5.0]);
    }

    #[test]
    fn floors_pin_flows_below_them() {
        // 10 between two hungry flows, floor 7 on the first: 7 and the 3 left
        let mut out = vec![0.0; 2];
        floored_waterfill(
            &[10.0],
            &[0, 0],
            &[10.0, 10.0],
            &[1.0, 1.0],
            &[7.0, 0.0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [7.0, 3.0]);
        // floors 8 + 8 over-commit 10: both shrink to 5
        floored_waterfill(
            &[10.0],
            &[0, 0],
            &[10.0, 10.0],
            &[1.0, 1.0],
            &[8.0, 8.0],
            &mut out,
        )
        .unwrap();
        assert_eq!(out, [5.0, 5.0]);
    }

    #[test]
    fn bad_layouts_name_the_field() {
        assert_eq!(
            layout_of(&[0, 3], 2).unwrap_err().0,
            "group[1]: link 3 outside 0..2"
        );
        assert_eq!(
            Layout::new(&[0, 5], &[0, 2], 2).unwrap_err().0,
            "order[1]: flow 5 outside 0..2"
        );
        assert_eq!(
            Layout::new(&[0], &[0, 2], 2).unwrap_err().0,
            "start[-1]: 2, must equal the 1 flows laid out"
        );
        assert_eq!(
            Layout::new(&[0, 1], &[1, 2], 2).unwrap_err().0,
            "start[0]: 1, must be 0"
        );
    }
}
