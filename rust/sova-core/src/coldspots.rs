//! Cold-spot screening for every hot host of a round at once (Sova Alg. 2 lines 7-10,
//! docs/design.md#cold-spot). The hosts come ranked by (hotness, name); each hot host, in
//! the round's order, tries its movers in turn and takes the first ranked host that is
//! open (not taken this round, not the source, not barred for that VM), not busy (every
//! resource below α now) and not full after the move (every resource below the ceiling
//! with the VM's share added, rescaled to the target's capacity); the target is then taken
//! for the rest of the round. A source may first keep the target it was proposed last time
//! if that still fits (docs/design.md#plan-stability).
//!
//! A walk down the ranking per mover made a round cost hot hosts × hosts (issue 36: 1,700
//! hot hosts of 10,000 with no feasible target). Here the ranking is a segment tree whose
//! nodes keep, over their hosts that could take anything (open and not busy), each
//! resource's least load and largest capacity: a subtree where even the least load plus
//! the smallest rescaled share reaches the ceiling holds no fit and is skipped whole. Float
//! addition and division round monotonically, so that bound is exact: the chosen host is
//! the one the walk would choose. A round then costs about log(hosts) per mover when no
//! host fits, and the prefix counts of open hosts give each refusal's count without a walk.

use crate::waterfill::InputError;

/// Resources per host: cpu, mem, net.
pub const R: usize = 3;

/// How many refused hosts a refusal names (the rest are counted).
pub const LISTED: usize = 8;

/// The ranked hosts: `now[i * R + r]` is host `i`'s load of resource `r`, `caps` (if the
/// hosts differ) its capacity, both in ranking order.
pub struct Ranked<'a> {
    pub now: &'a [f64],
    pub caps: Option<&'a [f64]>,
    pub src_caps: Option<&'a [f64]>,
    pub alpha: f64,
    pub limit: f64,
}

/// One hot host's request: its ranking position (None: not ranked), its movers
/// `first..end` (rows of `Movers`), and the move it was proposed last time (a mover and a
/// ranking position). With capacities, `src_caps[q * R..]` is its capacity.
#[derive(Clone, Copy, Debug)]
pub struct Query {
    pub src: Option<usize>,
    pub first: usize,
    pub end: usize,
    pub keep: Option<(usize, usize)>,
}

/// The movers of every query: `share[m * R + r]` is mover `m`'s share of its source, and
/// the hosts it may not go to are `barred[barred_start[m]..barred_start[m + 1]]`.
pub struct Movers<'a> {
    pub share: &'a [f64],
    pub barred_start: &'a [usize],
    pub barred: &'a [usize],
}

/// What each query got: `target[q]` its cold spot (None: refused), `mover[q]` the mover
/// sent there, `kept[q]` whether it was last time's proposal. For every mover tried,
/// `tried[m]` how many open hosts ranked before its target (all of them when it found
/// none) and `listed[m * LISTED..]` the first `LISTED` of them (`usize::MAX` pads); for
/// each of those, why it was refused: `after[(m * LISTED + j) * R + r]` its load with the
/// VM's share added, `why[m * LISTED + j]` bit `r` set if resource `r` is busy now (at or
/// over α), bit `R + r` if it would reach the ceiling.
#[derive(Debug, Default, PartialEq)]
pub struct Screened {
    pub target: Vec<Option<usize>>,
    pub mover: Vec<Option<usize>>,
    pub kept: Vec<bool>,
    pub tried: Vec<usize>,
    pub listed: Vec<usize>,
    pub after: Vec<f64>,
    pub why: Vec<u8>,
}

const NONE: usize = usize::MAX;

struct Tree {
    size: usize,
    open: Vec<usize>,      // hosts not taken, per node
    least: Vec<[f64; R]>,  // least load per resource of the node's eligible hosts
    widest: Vec<[f64; R]>, // largest capacity per resource of the same hosts
}

impl Tree {
    fn new(n: usize) -> Tree {
        let size = n.next_power_of_two().max(1);
        Tree {
            size,
            open: vec![0; 2 * size],
            least: vec![[f64::INFINITY; R]; 2 * size],
            widest: vec![[0.0; R]; 2 * size],
        }
    }

    fn pull(&mut self, mut node: usize) {
        while node > 1 {
            node /= 2;
            let (a, b) = (2 * node, 2 * node + 1);
            self.open[node] = self.open[a] + self.open[b];
            for r in 0..R {
                self.least[node][r] = self.least[a][r].min(self.least[b][r]);
                self.widest[node][r] = self.widest[a][r].max(self.widest[b][r]);
            }
        }
    }
}

struct Round<'a> {
    ranked: &'a Ranked<'a>,
    n: usize,
    busy: Vec<bool>,
    taken: Vec<bool>,
    tree: Tree,
}

impl<'a> Round<'a> {
    fn new(ranked: &'a Ranked<'a>, taken: Vec<bool>) -> Round<'a> {
        let n = taken.len();
        let now = ranked.now;
        let busy = (0..n)
            .map(|i| (0..R).any(|r| now[i * R + r] >= ranked.alpha))
            .collect();
        let mut round = Round {
            ranked,
            n,
            busy,
            taken,
            tree: Tree::new(n),
        };
        for i in 0..n {
            round.set_leaf(i);
        }
        for node in (1..round.tree.size).rev() {
            let t = &mut round.tree;
            let (a, b) = (2 * node, 2 * node + 1);
            t.open[node] = t.open[a] + t.open[b];
            for r in 0..R {
                t.least[node][r] = t.least[a][r].min(t.least[b][r]);
                t.widest[node][r] = t.widest[a][r].max(t.widest[b][r]);
            }
        }
        round
    }

    fn set_leaf(&mut self, i: usize) {
        let leaf = self.tree.size + i;
        let eligible = !self.taken[i] && !self.busy[i];
        self.tree.open[leaf] = usize::from(!self.taken[i]);
        for r in 0..R {
            self.tree.least[leaf][r] = if eligible {
                self.ranked.now[i * R + r]
            } else {
                f64::INFINITY
            };
            self.tree.widest[leaf][r] = match (eligible, self.ranked.caps) {
                (true, Some(c)) => c[i * R + r],
                _ => 0.0,
            };
        }
    }

    fn take(&mut self, i: usize) {
        self.taken[i] = true;
        self.set_leaf(i);
        self.tree.pull(self.tree.size + i);
    }

    /// What `share` (of query `q`'s source) adds to resource `r` of a host of capacity
    /// `cap`.
    fn add(&self, share: &[f64], q: usize, r: usize, cap: f64) -> f64 {
        match self.ranked.src_caps {
            // share * cap_src / cap_dst, multiplied first as the readable form does
            Some(c) => share[r] * c[q * R + r] / cap,
            None => share[r],
        }
    }

    /// Host `i`'s load of resource `r` with `share` of query `q`'s source added.
    fn after(&self, i: usize, share: &[f64], q: usize, r: usize) -> f64 {
        let cap = self.ranked.caps.map_or(1.0, |c| c[i * R + r]);
        self.ranked.now[i * R + r] + self.add(share, q, r, cap)
    }

    /// Whether host `i`, not busy, stays below the ceiling with `share` of `src` added.
    fn fits(&self, i: usize, share: &[f64], q: usize) -> bool {
        (0..R).all(|r| self.after(i, share, q, r) < self.ranked.limit)
    }

    /// Why host `i` cannot take `share`: its loads after, and the busy and full bits.
    fn why(&self, i: usize, share: &[f64], q: usize) -> ([f64; R], u8) {
        let mut after = [0.0; R];
        let mut bits = 0u8;
        for (r, a) in after.iter_mut().enumerate() {
            *a = self.after(i, share, q, r);
            if self.ranked.now[i * R + r] >= self.ranked.alpha {
                bits |= 1 << r;
            }
            if *a >= self.ranked.limit {
                bits |= 1 << (R + r);
            }
        }
        (after, bits)
    }

    /// Whether no eligible host under `node` can fit `share`: some resource's least load
    /// plus the least it could add (at the largest capacity) already reaches the ceiling.
    fn hopeless(&self, node: usize, share: &[f64], q: usize) -> bool {
        let t = &self.tree;
        (0..R).any(|r| {
            let least = t.least[node][r];
            least == f64::INFINITY
                || least + self.add(share, q, r, t.widest[node][r]) >= self.ranked.limit
        })
    }

    /// The first ranked host, from `node` down, that is eligible, not `shut` and fits.
    fn first_fit(&self, node: usize, share: &[f64], q: usize, shut: &[usize]) -> usize {
        if self.hopeless(node, share, q) {
            return NONE;
        }
        if node >= self.tree.size {
            let i = node - self.tree.size;
            let ok = i < self.n && !shut.contains(&i) && self.fits(i, share, q);
            return if ok { i } else { NONE };
        }
        match self.first_fit(2 * node, share, q, shut) {
            NONE => self.first_fit(2 * node + 1, share, q, shut),
            i => i,
        }
    }

    /// How many hosts ranked before `stop` are not taken.
    fn open_before(&self, stop: usize) -> usize {
        let (mut lo, mut hi, mut count) = (self.tree.size, self.tree.size + stop, 0);
        while lo < hi {
            if lo & 1 == 1 {
                count += self.tree.open[lo];
                lo += 1;
            }
            if hi & 1 == 1 {
                hi -= 1;
                count += self.tree.open[hi];
            }
            lo /= 2;
            hi /= 2;
        }
        count
    }

    /// The first host at or after `from` that is not taken, or `n`.
    fn next_open(&self, from: usize) -> usize {
        let t = &self.tree;
        if from >= self.n {
            return self.n;
        }
        // climb while the rest of the subtree has none, then descend to the first one
        let mut node = t.size + from;
        if t.open[node] > 0 {
            return from;
        }
        loop {
            while node & 1 == 1 {
                node /= 2;
                if node <= 1 {
                    return self.n;
                }
            }
            node += 1;
            if t.open[node] > 0 {
                break;
            }
        }
        while node < t.size {
            node = if t.open[2 * node] > 0 {
                2 * node
            } else {
                2 * node + 1
            };
        }
        (node - t.size).min(self.n)
    }

    /// One mover's screening: its target (or None), the open hosts before it, the first
    /// `LISTED` of them.
    fn screen(
        &self,
        share: &[f64],
        q: usize,
        shut: &[usize],
    ) -> (Option<usize>, usize, Vec<usize>) {
        let hit = self.first_fit(1, share, q, shut);
        let stop = if hit == NONE { self.n } else { hit };
        let shut_open = shut.iter().filter(|&&i| i < stop && !self.taken[i]).count();
        let tried = self.open_before(stop) - shut_open;
        let mut listed = Vec::with_capacity(LISTED);
        let mut i = self.next_open(0);
        while i < stop && listed.len() < LISTED {
            if !shut.contains(&i) {
                listed.push(i);
            }
            i = self.next_open(i + 1);
        }
        (if hit == NONE { None } else { Some(hit) }, tried, listed)
    }
}

fn check(
    ranked: &Ranked<'_>,
    n: usize,
    queries: &[Query],
    movers: &Movers<'_>,
) -> Result<(), InputError> {
    let err = |s: String| Err(InputError(s));
    if ranked.now.len() != n * R {
        return err(format!(
            "now: {} values for {n} hosts of {R} resources",
            ranked.now.len()
        ));
    }
    if let Some(c) = ranked.caps {
        if c.len() != n * R {
            return err(format!(
                "caps: {} values for {n} hosts of {R} resources",
                c.len()
            ));
        }
        if let Some(i) = c.iter().position(|x| !(x.is_finite() && *x > 0.0)) {
            return err(format!("caps[{i}] must be finite and > 0, got {}", c[i]));
        }
    }
    if let Some(c) = ranked.src_caps {
        if ranked.caps.is_none() || c.len() != queries.len() * R {
            return err(format!(
                "src_caps: {} values for {} queries",
                c.len(),
                queries.len()
            ));
        }
        if let Some(i) = c.iter().position(|x| !(x.is_finite() && *x > 0.0)) {
            return err(format!(
                "src_caps[{i}] must be finite and > 0, got {}",
                c[i]
            ));
        }
    } else if ranked.caps.is_some() {
        return err("caps without src_caps".to_string());
    }
    if let Some(i) = ranked.now.iter().position(|x| !x.is_finite()) {
        return err(format!("now[{i}] must be finite, got {}", ranked.now[i]));
    }
    let m = movers.share.len() / R;
    if movers.share.len() != m * R || movers.barred_start.len() != m + 1 {
        return err(format!(
            "movers: {} shares and {} barred offsets do not make whole movers",
            movers.share.len(),
            movers.barred_start.len()
        ));
    }
    if let Some(i) = movers
        .share
        .iter()
        .position(|x| !(x.is_finite() && *x >= 0.0))
    {
        return err(format!(
            "share[{i}] must be finite and >= 0, got {}",
            movers.share[i]
        ));
    }
    if movers.barred_start.windows(2).any(|w| w[0] > w[1])
        || movers.barred_start[m] != movers.barred.len()
        || movers.barred.iter().any(|&i| i >= n)
    {
        return err("barred: offsets or hosts out of range".to_string());
    }
    for (q, query) in queries.iter().enumerate() {
        let keep_bad = query
            .keep
            .is_some_and(|(k, d)| k < query.first || k >= query.end || d >= n);
        if query.src.is_some_and(|i| i >= n) || query.first > query.end || query.end > m || keep_bad
        {
            return err(format!(
                "queries[{q}]: {query:?} out of range ({n} hosts, {m} movers)"
            ));
        }
    }
    Ok(())
}

/// Screen every query in turn; `taken` marks the hosts taken before the round (the hot,
/// the leased, the fenced). Each query's target is taken for the ones after it.
pub fn screen_round(
    ranked: &Ranked<'_>,
    taken: &[bool],
    queries: &[Query],
    movers: &Movers<'_>,
) -> Result<Screened, InputError> {
    let n = taken.len();
    check(ranked, n, queries, movers)?;
    let m = movers.share.len() / R;
    let mut round = Round::new(ranked, taken.to_vec());
    let mut out = Screened {
        target: vec![None; queries.len()],
        mover: vec![None; queries.len()],
        kept: vec![false; queries.len()],
        tried: vec![0; m],
        listed: vec![NONE; m * LISTED],
        after: vec![0.0; m * LISTED * R],
        why: vec![0; m * LISTED],
    };
    for (q, query) in queries.iter().enumerate() {
        let share = |k: usize| &movers.share[k * R..(k + 1) * R];
        let barred = |k: usize| &movers.barred[movers.barred_start[k]..movers.barred_start[k + 1]];
        if let Some((k, dst)) = query.keep {
            let ok = Some(dst) != query.src
                && !round.taken[dst]
                && !barred(k).contains(&dst)
                && !round.busy[dst]
                && round.fits(dst, share(k), q);
            if ok {
                round.take(dst);
                (out.target[q], out.mover[q], out.kept[q]) = (Some(dst), Some(k), true);
                continue;
            }
        }
        for k in query.first..query.end {
            let mut shut: Vec<usize> = query
                .src
                .into_iter()
                .chain(barred(k).iter().copied())
                .collect();
            shut.sort_unstable();
            shut.dedup();
            let (hit, tried, listed) = round.screen(share(k), q, &shut);
            out.tried[k] = tried;
            out.listed[k * LISTED..k * LISTED + listed.len()].copy_from_slice(&listed);
            for (j, &i) in listed.iter().enumerate() {
                let (after, bits) = round.why(i, share(k), q);
                let at = k * LISTED + j;
                out.after[at * R..(at + 1) * R].copy_from_slice(&after);
                out.why[at] = bits;
            }
            if let Some(dst) = hit {
                round.take(dst);
                (out.target[q], out.mover[q]) = (Some(dst), Some(k));
                break;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The walk the tree stands in for: the first open, not busy, fitting host.
    fn walk(ranked: &Ranked<'_>, taken: &[bool], share: &[f64], shut: &[usize]) -> Option<usize> {
        let now = ranked.now;
        (0..taken.len()).find(|&i| {
            let row = &now[i * R..(i + 1) * R];
            let busy = row.iter().any(|&x| x >= ranked.alpha);
            let add = |r: usize| match (ranked.caps, ranked.src_caps) {
                (Some(c), Some(s)) => share[r] * s[r] / c[i * R + r],
                _ => share[r],
            };
            let full = (0..R).any(|r| row[r] + add(r) >= ranked.limit);
            !taken[i] && !shut.contains(&i) && !busy && !full
        })
    }

    const NOW: [f64; 15] = [
        0.1, 0.1, 0.1, // 0: coldest
        0.2, 0.2, 0.8, // 1: busy (net 0.8 >= alpha 0.75)
        0.3, 0.3, 0.3, // 2
        0.5, 0.1, 0.1, // 3
        0.9, 0.9, 0.9, // 4: the hot source
    ];

    /// [`NOW`] without capacities, busy at 0.75 and full above 0.75.
    const PLAIN: Ranked<'static> = Ranked {
        now: &NOW,
        caps: None,
        src_caps: None,
        alpha: 0.75,
        limit: 0.75,
    };

    #[test]
    fn hot_hosts_take_the_coldest_fit_in_turn() {
        let ranked = PLAIN;
        let taken = [false, false, false, false, true];
        // two queries from host 4, each one mover of share (0.3, 0.3, 0.3):
        // host 0 -> 0.4 < 0.75 fits and is taken; then host 1 is busy, host 2 -> 0.6 fits
        let share = [0.3; 6];
        let movers = Movers {
            share: &share,
            barred_start: &[0, 0, 0],
            barred: &[],
        };
        let q = |k| Query {
            src: Some(4),
            first: k,
            end: k + 1,
            keep: None,
        };
        let got = screen_round(&ranked, &taken, &[q(0), q(1)], &movers).unwrap();
        assert_eq!(got.target, [Some(0), Some(2)]);
        // the second tried host 1 (busy) before host 2; host 0 was taken, not counted
        assert_eq!(got.tried, [0, 1]);
        assert_eq!(&got.listed[LISTED..LISTED + 2], &[1, NONE]);
    }

    #[test]
    fn a_refusal_counts_and_lists_every_open_host() {
        // share net 0.5: 0.1 + 0.5 = 0.6 fits hosts 0 and 3 unless barred; bar host 0 for
        // the first mover and give the second a share nothing takes (cpu 0.7: 0.1 + 0.7)
        let ranked = PLAIN;
        let taken = [false, false, false, true, true];
        let share = [0.0, 0.0, 0.5, 0.7, 0.0, 0.0];
        let movers = Movers {
            share: &share,
            barred_start: &[0, 1, 1],
            barred: &[0],
        };
        let query = Query {
            src: Some(4),
            first: 0,
            end: 2,
            keep: None,
        };
        let got = screen_round(&ranked, &taken, &[query], &movers).unwrap();
        assert_eq!(got.target, [None]);
        // mover 0: hosts 1 (busy) and 2 (0.3 + 0.5 = 0.8) open, host 0 barred, 3 taken
        // mover 1: hosts 0 (0.1 + 0.7 = 0.8), 1, 2 (1.0) open
        assert_eq!(got.tried, [2, 3]);
        assert_eq!(&got.listed[..3], &[1, 2, NONE]);
        // host 1 is busy on net (bit 2) and would reach 0.8 + 0.5 (bit R + 2); host 2 only
        // would reach 0.3 + 0.5 = 0.8 on net
        assert_eq!(&got.why[..2], &[0b100_100, 0b100_000]);
        assert_eq!(&got.after[3..6], &[0.3, 0.3, 0.3 + 0.5]);
        assert_eq!(&got.listed[LISTED..LISTED + 4], &[0, 1, 2, NONE]);
    }

    #[test]
    fn capacities_rescale_the_share() {
        // host 0 has half the source's net capacity: 0.1 + 0.4 * 2 / 1 = 0.9 is full; host 2
        // has twice: 0.3 + 0.4 * 2 / 4 = 0.5 fits
        let caps = [
            1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0,
        ];
        let ranked = Ranked {
            caps: Some(&caps),
            src_caps: Some(&caps[4 * R..5 * R]),
            ..PLAIN
        };
        let taken = [false, false, false, true, true];
        let share = [0.0, 0.0, 0.4];
        let movers = Movers {
            share: &share,
            barred_start: &[0, 0],
            barred: &[],
        };
        let query = Query {
            src: Some(4),
            first: 0,
            end: 1,
            keep: None,
        };
        let got = screen_round(&ranked, &taken, &[query], &movers).unwrap();
        assert_eq!(got.target, [Some(2)]);
        assert_eq!(got.tried, [2]);
    }

    #[test]
    fn the_proposal_is_kept_while_it_fits() {
        let ranked = PLAIN;
        let taken = [false, false, false, false, true];
        let share = [0.1; 3];
        let movers = Movers {
            share: &share,
            barred_start: &[0, 0],
            barred: &[],
        };
        // kept: host 3 (0.6, 0.2, 0.2) over the colder host 0; host 1 is busy: not kept
        let keep = |d| Query {
            src: Some(4),
            first: 0,
            end: 1,
            keep: Some((0, d)),
        };
        let got = screen_round(&ranked, &taken, &[keep(3)], &movers).unwrap();
        assert_eq!((got.target, got.kept), (vec![Some(3)], vec![true]));
        let got = screen_round(&ranked, &taken, &[keep(1)], &movers).unwrap();
        assert_eq!((got.target, got.kept), (vec![Some(0)], vec![false]));
    }

    #[test]
    fn the_tree_chooses_what_the_walk_chooses() {
        // a deterministic spread of loads, shares and taken hosts (an LCG), 1..70 hosts
        let mut seed: u64 = 7;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for n in 1..70 {
            let now: Vec<f64> = (0..n * R).map(|_| next() * 0.9).collect();
            let caps: Vec<f64> = (0..n * R).map(|_| 1.0 + next() * 3.0).collect();
            let taken: Vec<bool> = (0..n).map(|_| next() < 0.3).collect();
            for with_caps in [false, true] {
                let src = n - 1;
                let ranked = Ranked {
                    now: &now,
                    caps: with_caps.then_some(&caps[..]),
                    src_caps: with_caps.then_some(&caps[src * R..(src + 1) * R]),
                    alpha: 0.75,
                    limit: 0.8,
                };
                let share = [next() * 0.5, next() * 0.5, next() * 0.5];
                let shut = [src];
                let round = Round::new(&ranked, taken.clone());
                let (hit, tried, _) = round.screen(&share, 0, &shut);
                assert_eq!(hit, walk(&ranked, &taken, &share, &shut), "n {n}");
                let stop = hit.unwrap_or(n);
                let open = (0..stop).filter(|&i| !taken[i] && i != src).count();
                assert_eq!(tried, open, "n {n}");
            }
        }
    }

    #[test]
    fn bad_input_is_refused() {
        let ranked = PLAIN;
        let movers = Movers {
            share: &[0.1, f64::NAN, 0.1],
            barred_start: &[0, 0],
            barred: &[],
        };
        let q = Query {
            src: Some(4),
            first: 0,
            end: 1,
            keep: None,
        };
        let e = screen_round(&ranked, &[false; 5], &[q], &movers).unwrap_err();
        assert_eq!(e.0, "share[1] must be finite and >= 0, got NaN");
        let movers = Movers {
            share: &[0.1; 3],
            barred_start: &[0, 0],
            barred: &[],
        };
        let q = Query {
            src: Some(5),
            first: 0,
            end: 1,
            keep: None,
        };
        assert!(screen_round(&ranked, &[false; 5], &[q], &movers).is_err());
    }
}
