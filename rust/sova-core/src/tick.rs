//! The simulated world's tick: the parts that are pure arithmetic over every VM of every
//! host at once (the random draws stay in the simulator, whose seed contract fixes them).
//!
//! Each function evaluates the expressions of the numpy form it replaced in that form's
//! order, one VM (or host) at a time, so every value is the same float: numpy's
//! elementwise operations are single IEEE operations (no fused multiply-add), and its
//! `bincount` is a running sum in index order. The readable numpy form is the oracle
//! (tests/test_tick_forms.py compares the engine's state byte for byte after every tick).

use crate::npf::{np_max, np_min};
use crate::parallel;
use crate::rng::{self, BATCH, Draws, TickKeys};
use crate::waterfill::InputError;

/// What each VM sent and what it cost this tick (one value per VM).
pub struct VmTick<'a> {
    pub host: &'a [i64],
    pub tx: &'a [f64],
    pub rx: &'a [f64],
    pub pkts_per_bit: &'a [f64],
    pub ns_pkt: &'a [f64],
    pub ns_per_byte: &'a [f64],
    pub cpu_busy: &'a [f64],
    pub arrival_cost: &'a [f64],
    pub host_scale_vm: &'a [f64],
    pub vcpus: &'a [f64],
    pub need: &'a [f64],
    pub virt: &'a [bool],
    pub pkt_bits: &'a [f64],
    /// VMs stopped for a migration's downtime; None when none is
    pub paused: Option<&'a [bool]>,
}

/// Each host's figures of the tick (one value per host).
pub struct HostTick<'a> {
    pub backend_vm_frac: &'a [f64],
    pub tx_host: &'a [f64],
    pub rx_host: &'a [f64],
    pub host_need: &'a [f64],
    pub cores: &'a [f64],
    pub capacity: &'a [f64],
}

/// The cumulative counters a driver reads, advanced in place.
pub struct Counters<'a> {
    pub cpu_ns: &'a mut [f64],
    pub steal_ns: &'a mut [f64],
    pub tx_b: &'a mut [f64],
    pub rx_b: &'a mut [f64],
    pub tx_pk: &'a mut [f64],
    pub rx_pk: &'a mut [f64],
    pub h_cpu_ns: &'a mut [f64],
    pub h_tx_b: &'a mut [f64],
    pub h_rx_b: &'a mut [f64],
}

/// The tick's constants.
#[derive(Debug, Clone, Copy)]
pub struct CountParams {
    pub dt: f64,
    /// host CPU ns per virtio packet (the backend's work)
    pub virtio_host_ns_per_packet: f64,
    /// bits per received ACK packet
    pub ack_bits: f64,
    /// some host's CPU is oversubscribed (`host_scale.min() < 1`): steal is counted
    pub steal: bool,
    /// threads to share the VMs among (1: this thread alone); the outputs are the same
    /// bits for any number (each VM's arithmetic is its own, each host's sums run on one
    /// thread in VM index order)
    pub threads: usize,
}

/// The last tick's figures: each VM's CPU use (share of its vCPUs), each host's CPU and
/// link utilisation.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    pub cpu_use: Vec<f64>,
    pub host_cpu_util: Vec<f64>,
    pub host_net_util: Vec<f64>,
}

fn check(vm: &VmTick<'_>, hosts: &HostTick<'_>, c: &Counters<'_>) -> Result<(), InputError> {
    let n = vm.tx.len();
    let h = hosts.tx_host.len();
    let per_vm = [
        ("host", vm.host.len()),
        ("rx", vm.rx.len()),
        ("pkts_per_bit", vm.pkts_per_bit.len()),
        ("ns_pkt", vm.ns_pkt.len()),
        ("ns_per_byte", vm.ns_per_byte.len()),
        ("cpu_busy", vm.cpu_busy.len()),
        ("arrival_cost", vm.arrival_cost.len()),
        ("host_scale_vm", vm.host_scale_vm.len()),
        ("vcpus", vm.vcpus.len()),
        ("need", vm.need.len()),
        ("virt", vm.virt.len()),
        ("pkt_bits", vm.pkt_bits.len()),
        ("paused", vm.paused.map_or(n, <[bool]>::len)),
        ("cpu_ns", c.cpu_ns.len()),
        ("steal_ns", c.steal_ns.len()),
        ("tx_b", c.tx_b.len()),
        ("rx_b", c.rx_b.len()),
        ("tx_pk", c.tx_pk.len()),
        ("rx_pk", c.rx_pk.len()),
    ];
    for (name, len) in per_vm {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    let per_host = [
        ("backend_vm_frac", hosts.backend_vm_frac.len()),
        ("rx_host", hosts.rx_host.len()),
        ("host_need", hosts.host_need.len()),
        ("cores", hosts.cores.len()),
        ("capacity", hosts.capacity.len()),
        ("h_cpu_ns", c.h_cpu_ns.len()),
        ("h_tx_b", c.h_tx_b.len()),
        ("h_rx_b", c.h_rx_b.len()),
    ];
    for (name, len) in per_host {
        if len != h {
            return Err(InputError(format!("{name}: {len} values for {h} hosts")));
        }
    }
    if let Some((i, &g)) = vm
        .host
        .iter()
        .enumerate()
        .find(|(_, g)| usize::try_from(**g).map_or(true, |g| g >= h))
    {
        return Err(InputError(format!("host[{i}]: {g} outside 0..{h}")));
    }
    Ok(())
}

/// One tick's counters (all a driver reads) and figures: each VM's CPU time (guest work
/// per packet and per byte, its benchmark, its requests, slowed by its host's share of
/// the cores and capped by its vCPUs), the steal it waited, bytes and packets each way;
/// each host's CPU (the vCPUs' and the virtio backend's) and bytes. The VMs' own
/// arithmetic in runs of [`RUN`] shared among `p.threads` threads, then each host's sums
/// in VM index order on this thread (the same additions whatever the threads).
pub fn count(
    vm: &VmTick<'_>,
    hosts: &HostTick<'_>,
    c: &mut Counters<'_>,
    p: CountParams,
) -> Result<Figures, InputError> {
    check_threads(p.threads)?;
    check(vm, hosts, c)?;
    let n_hosts = hosts.tx_host.len();
    let n = vm.tx.len();
    let dt = p.dt;
    let mut cpu_use = vec![0.0; n];
    // each VM's backend work and CPU, for the hosts' sums below
    let mut backend_vm = vec![0.0; n];
    let mut cpu_vm = vec![0.0; n];
    let mut runs = Vec::with_capacity(n.div_ceil(RUN));
    {
        let mut cols = [
            &mut c.cpu_ns[..n],
            &mut c.steal_ns[..n],
            &mut c.tx_b[..n],
            &mut c.rx_b[..n],
            &mut c.tx_pk[..n],
            &mut c.rx_pk[..n],
            &mut cpu_use[..],
            &mut backend_vm[..],
            &mut cpu_vm[..],
        ]
        .map(|col| col.chunks_mut(RUN));
        for k in 0..n.div_ceil(RUN) {
            // (every column is n long: a run of each)
            let cols = cols.each_mut().map(|col| col.next().unwrap_or_default());
            runs.push(CountRun {
                base: k * RUN,
                cols,
            });
        }
    }
    parallel::with_threads(if n > RUN { p.threads } else { 1 }, |threads| {
        threads.for_each(runs, |r| count_run(vm, p, r));
    });
    let mut backend_used = vec![0.0; n_hosts];
    let mut host_cpu = vec![0.0; n_hosts];
    for ((&h, &b), &u) in vm.host[..n].iter().zip(&backend_vm).zip(&cpu_vm) {
        // (in range: checked above)
        let h = h as usize;
        backend_used[h] += b;
        host_cpu[h] += u;
    }
    let mut host_cpu_util = vec![0.0; n_hosts];
    let mut host_net_util = vec![0.0; n_hosts];
    for h in 0..n_hosts {
        let backend = backend_used[h] + hosts.backend_vm_frac[h] * 1e9;
        let mut cpu = host_cpu[h] * 1e9;
        cpu += backend;
        cpu *= dt;
        c.h_cpu_ns[h] += cpu;
        c.h_tx_b[h] += hosts.tx_host[h] * dt / 8.0;
        c.h_rx_b[h] += hosts.rx_host[h] * dt / 8.0;
        host_cpu_util[h] = np_min(1.0, hosts.host_need[h] / hosts.cores[h]);
        host_net_util[h] = np_max(hosts.tx_host[h], hosts.rx_host[h]) / hosts.capacity[h];
    }
    Ok(Figures {
        cpu_use,
        host_cpu_util,
        host_net_util,
    })
}

/// A count of threads: at least one.
pub fn check_threads(threads: usize) -> Result<(), InputError> {
    if threads == 0 {
        return Err(InputError("threads: 0, not a count of threads >= 1".into()));
    }
    Ok(())
}

/// A run of VMs from `base`: its counters (`cpu_ns`, `steal_ns`, `tx_b`, `rx_b`, `tx_pk`,
/// `rx_pk`) and outputs (`cpu_use`, backend work, CPU), in that order.
struct CountRun<'a> {
    base: usize,
    cols: [&'a mut [f64]; 9],
}

/// The VMs of a run: their counters advanced, their CPU use, backend work and CPU.
fn count_run(vm: &VmTick<'_>, p: CountParams, r: CountRun<'_>) {
    let dt = p.dt;
    let [
        cpu_ns,
        steal_ns,
        tx_b,
        rx_b,
        tx_pk,
        rx_pk,
        cpu_use,
        backend_vm,
        cpu_vm,
    ] = r.cols;
    let len = cpu_ns.len();
    let span = r.base..r.base + len;
    // each array cut to the run (checked in `count`), so the loop indexes without a
    // bounds check per value
    let (tx, rx, ppb, ns_pkt) = (
        &vm.tx[span.clone()],
        &vm.rx[span.clone()],
        &vm.pkts_per_bit[span.clone()],
        &vm.ns_pkt[span.clone()],
    );
    let (ns_per_byte, cpu_busy) = (&vm.ns_per_byte[span.clone()], &vm.cpu_busy[span.clone()]);
    let (arrival_cost, scale) = (
        &vm.arrival_cost[span.clone()],
        &vm.host_scale_vm[span.clone()],
    );
    let (vcpus, need, virt) = (
        &vm.vcpus[span.clone()],
        &vm.need[span.clone()],
        &vm.virt[span.clone()],
    );
    let pkt_bits = &vm.pkt_bits[span.clone()];
    let paused = vm.paused.map(|pz| &pz[span.clone()]);
    let (steal_ns, tx_b, rx_b) = (&mut steal_ns[..len], &mut tx_b[..len], &mut rx_b[..len]);
    let (tx_pk, rx_pk, cpu_use) = (&mut tx_pk[..len], &mut rx_pk[..len], &mut cpu_use[..len]);
    let (backend_vm, cpu_vm) = (&mut backend_vm[..len], &mut cpu_vm[..len]);
    for i in 0..len {
        let tx_i = tx[i];
        let tx_ppb = tx_i * ppb[i];
        let mut cpu_used = tx_ppb * ns_pkt[i];
        cpu_used += tx_i / 8.0 * ns_per_byte[i];
        cpu_used /= 1e9;
        cpu_used += cpu_busy[i];
        cpu_used += arrival_cost[i];
        cpu_used *= scale[i];
        cpu_used = np_min(cpu_used, vcpus[i]);
        if paused.is_some_and(|paused| paused[i]) {
            cpu_used = 0.0;
        }
        if p.steal {
            let mut wanted = np_min(need[i], vcpus[i]);
            wanted -= cpu_used;
            wanted = np_max(0.0, wanted);
            wanted *= dt;
            wanted *= 1e9;
            wanted *= if scale[i] < 1.0 { 1.0 } else { 0.0 };
            steal_ns[i] += wanted;
        }
        cpu_ns[i] += cpu_used * dt * 1e9;
        tx_b[i] += tx_i * dt / 8.0;
        rx_b[i] += rx[i] * dt / 8.0;
        tx_pk[i] += tx_i / pkt_bits[i] * dt;
        rx_pk[i] += rx[i] / p.ack_bits * dt;
        let v = if virt[i] { 1.0 } else { 0.0 };
        backend_vm[i] = tx_ppb * p.virtio_host_ns_per_packet * v;
        cpu_vm[i] = cpu_used;
        cpu_use[i] = cpu_used / vcpus[i];
    }
}

/// Where the renewed cycles' lengths come from: uniform on `[cycle_min, cycle_max]`, draw
/// `pass` of stream `stream` for the VM at tick `tick` (crate::rng).
#[derive(Debug, Clone, Copy)]
pub struct Renewals {
    pub seed: u64,
    pub stream: u64,
    pub tick: u64,
    pub cycle_min: f64,
    pub cycle_max: f64,
}

/// A duty cycle renewed at most this many times in one tick (cycles are >= `cycle_min`
/// long, so a few passes cover a tick); the last renewal is drawn but covers no more of it.
const PASSES: u64 = 64;

/// The duty cycles' exact on-time share of `(t0, t1]`: for each live on/off process `j`
/// (VM `live[j]`, on for the first `duty[j]` of its cycle of `length` from `start`), the
/// on-time of its current cycle inside the tick, `max(min(t1, end, start + duty·length)
/// − t0, 0)`, then of each next cycle that starts inside it (its length drawn, `start` and
/// `length` advanced in place), divided by the tick's length into `frac[live[j]]`. Each
/// process draws from its own key, so the processes are independent of each other's order.
#[allow(clippy::too_many_arguments)] // the state arrays and the tick, one argument each
pub fn on_fraction(
    start: &mut [f64],
    length: &mut [f64],
    live: &[i64],
    duty: &[f64],
    frac: &mut [f64],
    t0: f64,
    t1: f64,
    r: Renewals,
) -> Result<(), InputError> {
    let mut c = Cycles {
        start,
        length,
        live,
        duty,
        frac,
    };
    check_cycles(&c)?;
    Renewal::new(t0, t1, r).run(0, &mut c);
    Ok(())
}

/// The lengths of a process kind's arrays, and its live VMs in range.
fn check_cycles(c: &Cycles<'_>) -> Result<(), InputError> {
    let n = c.start.len();
    if c.duty.len() != c.live.len() {
        return Err(InputError(format!(
            "duty: {} values for {} live processes",
            c.duty.len(),
            c.live.len()
        )));
    }
    for (name, len) in [("length", c.length.len()), ("frac", c.frac.len())] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    rng::check_indices("live", c.live, n)
}

/// One tick's renewal arithmetic for one process kind, its key's `(seed, stream)` folded.
#[derive(Debug, Clone, Copy)]
struct Renewal {
    t0: f64,
    t1: f64,
    dt: f64,
    cycle_min: f64,
    span: f64,
    prefix: u64,
    tick: u64,
}

impl Renewal {
    fn new(t0: f64, t1: f64, r: Renewals) -> Self {
        Renewal {
            t0,
            t1,
            dt: t1 - t0,
            cycle_min: r.cycle_min,
            span: r.cycle_max - r.cycle_min,
            prefix: rng::prefix(r.seed, r.stream),
            tick: r.tick,
        }
    }

    /// The processes of `c` in order; `c`'s VM arrays start at VM `base` (a run of them
    /// for one thread, see [`split_cycles`]). Indices checked by [`check_cycles`].
    fn run(&self, base: usize, c: &mut Cycles<'_>) {
        for (live, duty) in c.live.chunks(BATCH).zip(c.duty.chunks(BATCH)) {
            // the batch's keys and first draws, hashed together (most processes renew
            // once a tick; the others' are unused)
            let mut vms = [0; BATCH];
            for (v, &i) in vms.iter_mut().zip(live) {
                *v = i as u64;
            }
            let (keys, first) = rng::keys_each(self.prefix, &vms, self.tick);
            for (j, (&i, &d)) in live.iter().zip(duty).enumerate() {
                let k = i as usize - base;
                let (s, ln, f) = self.process((keys[j], first[j]), c.start[k], c.length[k], d);
                c.start[k] = s;
                c.length[k] = ln;
                c.frac[k] = f;
            }
        }
    }

    /// A process from its cycle `(s, ln)` at duty `d`, its renewals' key and their first
    /// draw (`drawn`: [`rng::keys_each`]): its cycle after the tick and its on-time share.
    #[inline]
    fn process(&self, drawn: (u64, f64), s: f64, ln: f64, d: f64) -> (f64, f64, f64) {
        let (t0, t1) = (self.t0, self.t1);
        let end = s + ln;
        let mut x = d * ln;
        x += s;
        let mut on = np_max(np_min(np_min(t1, end), x) - t0, 0.0);
        let (mut s, mut ln) = (s, ln);
        if end <= t1 {
            let (key, first) = drawn;
            let mut cur = end; // where the next cycle starts
            for pass in 0..PASSES {
                s = cur;
                let u = if pass == 0 {
                    first
                } else {
                    Draws::at(key, pass).uniform()
                };
                let ln_k = self.cycle_min + self.span * u;
                ln = ln_k;
                if pass == PASSES - 1 {
                    break;
                }
                let end_k = cur + ln_k;
                let mut x = d * ln_k;
                x += cur;
                x = np_min(np_min(t1, end_k), x);
                x -= cur;
                on += np_max(x, 0.0);
                if end_k > t1 {
                    break;
                }
                cur = end_k;
            }
        }
        (s, ln, on / self.dt)
    }
}

/// One on/off process kind's state for [`offer`]: see [`on_fraction`].
pub struct Cycles<'a> {
    pub start: &'a mut [f64],
    pub length: &'a mut [f64],
    pub live: &'a [i64],
    pub duty: &'a [f64],
    /// the share of the non-live processes on entry (1 or 0), every VM's share on exit
    pub frac: &'a mut [f64],
}

/// Each VM's workload parameters as [`offer`] reads them (the simulator's `LoadStatic`).
pub struct Load<'a> {
    pub rate: &'a [f64],
    pub streams: &'a [f64],
    /// duty cycles and bulk streams: they offer `frac · rate · streams · jitter`
    pub streamy: &'a [bool],
    pub resp_bytes: &'a [f64],
    pub backlog_bits: &'a [f64],
    pub is_req: &'a [bool],
    /// file transfers with bytes left (offer their full rate); None when there are none
    pub is_file: Option<&'a [bool]>,
    /// each VM's ingress limit (bit/s) and 8·max(request bytes, 1); None when no VM has one
    pub ingress: Option<(&'a [f64], &'a [f64])>,
    /// the VMs with a request rate and their mean arrivals this tick
    pub asks: &'a [i64],
    pub ask_means: &'a [f64],
}

/// The tick's constants for [`offer`].
#[derive(Debug, Clone, Copy)]
pub struct OfferParams {
    pub seed: u64,
    pub tick: u64,
    pub t0: f64,
    pub t1: f64,
    pub cycle_min: f64,
    pub cycle_max: f64,
    pub rate_jitter: f64,
    pub cpu_jitter: f64,
    /// some VM serves requests (else their terms, all 0.0, are skipped as numpy's form does)
    pub any_req: bool,
    /// guest CPU ns per arriving request
    pub guest_ns_per_request: f64,
    /// threads to share the VMs among (1: this thread alone); the outputs are the same
    /// bits for any number (every draw is a function of its key, every VM's arithmetic
    /// its own)
    pub threads: usize,
}

/// What each VM offers this tick, before the host and the network have their say.
#[derive(Debug, Clone, PartialEq)]
pub struct Offered {
    pub offered: Vec<f64>,
    pub jit: Vec<f64>,
    pub cj: Vec<f64>,
    pub arrivals: Vec<f64>,
    pub req_bits: Vec<f64>,
    pub arrival_cost: Vec<f64>,
}

/// One tick's offered load in one pass: the duty cycles' on-time (net and CPU, renewed
/// where they end, [`on_fraction`]), the tick's draws ([`crate::rng::tick_draws`]),
/// requests above a VM's ingress limit dropped, then each VM's offer: its streams'
/// `frac · rate · streams · jitter`, plus its responses and backlog over the tick for a
/// request VM, or its full rate for a file with bytes left; and each VM's guest CPU for
/// its arrivals. The numpy form's expressions in its order, one VM at a time, in runs of
/// VMs shared among `p.threads` threads.
pub fn offer(
    mut net: Cycles<'_>,
    mut cpu: Cycles<'_>,
    load: &Load<'_>,
    p: OfferParams,
) -> Result<Offered, InputError> {
    let n = load.rate.len();
    check_threads(p.threads)?;
    check_load(load, &net, &cpu)?;
    check_cycles(&net)?;
    check_cycles(&cpu)?;
    rng::check_asks(load.asks, load.ask_means, n)?;
    let renew = |stream| {
        Renewal::new(
            p.t0,
            p.t1,
            Renewals {
                seed: p.seed,
                stream,
                tick: p.tick,
                cycle_min: p.cycle_min,
                cycle_max: p.cycle_max,
            },
        )
    };
    let (net_r, cpu_r) = (renew(rng::stream::NET_CYCLE), renew(rng::stream::CPU_CYCLE));
    // each VM's mean arrivals, -1 where it asks none (a VM listed twice: the later mean,
    // as tick_draws has it)
    let mut mean = vec![-1.0; n];
    for (&i, &m) in load.asks.iter().zip(load.ask_means) {
        mean[i as usize] = m; // (in range: checked above)
    }
    let mut out = Offered {
        offered: vec![0.0; n],
        jit: vec![0.0; n],
        cj: vec![0.0; n],
        arrivals: vec![0.0; n],
        req_bits: vec![0.0; n],
        arrival_cost: vec![0.0; n],
    };
    let vms = VmOffer {
        load,
        mean: &mean,
        keys: TickKeys::new(p.seed, p.tick, p.rate_jitter, p.cpu_jitter),
        dt: p.t1 - p.t0,
        any_req: p.any_req,
        guest_ns_per_request: p.guest_ns_per_request,
    };
    parallel::with_threads(p.threads, |threads| {
        threads.for_each(split_cycles(&mut cpu), |(base, mut c)| {
            cpu_r.run(base, &mut c)
        });
        threads.for_each(split_cycles(&mut net), |(base, mut c)| {
            net_r.run(base, &mut c)
        });
        let runs = Runs::new(&mut out).split(&net.frac[..]);
        threads.for_each(runs, |run| vms.run(run));
    });
    Ok(out)
}

/// The per-VM arrays of [`offer`], each `n` long (n: `rate`'s).
fn check_load(load: &Load<'_>, net: &Cycles<'_>, cpu: &Cycles<'_>) -> Result<(), InputError> {
    let n = load.rate.len();
    let per_vm = [
        ("streams", load.streams.len()),
        ("streamy", load.streamy.len()),
        ("resp_bytes", load.resp_bytes.len()),
        ("backlog_bits", load.backlog_bits.len()),
        ("is_req", load.is_req.len()),
        ("is_file", load.is_file.map_or(n, <[bool]>::len)),
        ("ingress_limit", load.ingress.map_or(n, |(l, _)| l.len())),
        ("ingress_div", load.ingress.map_or(n, |(_, d)| d.len())),
        ("net_frac", net.frac.len()),
        ("cpu_frac", cpu.frac.len()),
    ];
    for (name, len) in per_vm {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    Ok(())
}

/// VMs per run a thread takes at a time: ~100-200 µs of work, so a run's hand-over is
/// small beside it, and enough runs at a thousand hosts to even out two threads.
pub(crate) const RUN: usize = 2048;

/// The live processes of `c` cut into runs of about [`RUN`], each with the VMs' arrays it
/// alone writes (from its first VM, `base`, to the next run's): the whole of `c` in one
/// run unless `live` is strictly increasing (a VM listed twice renews in list order).
fn split_cycles<'a>(c: &'a mut Cycles<'_>) -> Vec<(usize, Cycles<'a>)> {
    let whole = |c: &'a mut Cycles<'_>| Cycles {
        start: &mut *c.start,
        length: &mut *c.length,
        live: c.live,
        duty: c.duty,
        frac: &mut *c.frac,
    };
    if c.live.len() <= RUN || !c.live.windows(2).all(|w| w[0] < w[1]) {
        return vec![(0, whole(c))];
    }
    let (live, duty) = (c.live, c.duty);
    let mut rest = whole(c);
    let mut base = 0;
    let mut runs = Vec::new();
    for j in (RUN..live.len()).step_by(RUN) {
        let cut = live[j] as usize - base; // the next run's first VM
        let (start, s_rest) = std::mem::take(&mut rest.start).split_at_mut(cut);
        let (length, l_rest) = std::mem::take(&mut rest.length).split_at_mut(cut);
        let (frac, f_rest) = std::mem::take(&mut rest.frac).split_at_mut(cut);
        let first = j - RUN;
        let run = Cycles {
            start,
            length,
            live: &live[first..j],
            duty: &duty[first..j],
            frac,
        };
        runs.push((base, run));
        rest = Cycles {
            start: s_rest,
            length: l_rest,
            live: &live[j..],
            duty: &duty[j..],
            frac: f_rest,
        };
        base += cut;
    }
    runs.push((base, rest));
    runs
}

/// The per-VM outputs of a run of VMs from `base`, with its VMs' network on-time shares.
struct Runs<'a> {
    base: usize,
    net_frac: &'a [f64],
    offered: &'a mut [f64],
    jit: &'a mut [f64],
    cj: &'a mut [f64],
    arrivals: &'a mut [f64],
    req_bits: &'a mut [f64],
    arrival_cost: &'a mut [f64],
}

impl<'a> Runs<'a> {
    fn new(o: &'a mut Offered) -> Self {
        Runs {
            base: 0,
            net_frac: &[],
            offered: &mut o.offered,
            jit: &mut o.jit,
            cj: &mut o.cj,
            arrivals: &mut o.arrivals,
            req_bits: &mut o.req_bits,
            arrival_cost: &mut o.arrival_cost,
        }
    }

    /// All VMs cut into runs of [`RUN`].
    fn split(self, net_frac: &'a [f64]) -> Vec<Runs<'a>> {
        let mut rest = Runs { net_frac, ..self };
        let mut runs = Vec::new();
        while rest.offered.len() > RUN {
            let cut = |s: &'a mut [f64]| s.split_at_mut(RUN);
            let (offered, o) = cut(rest.offered);
            let (jit, j) = cut(rest.jit);
            let (cj, c) = cut(rest.cj);
            let (arrivals, a) = cut(rest.arrivals);
            let (req_bits, r) = cut(rest.req_bits);
            let (arrival_cost, ac) = cut(rest.arrival_cost);
            let (net_frac, nf) = rest.net_frac.split_at(RUN);
            runs.push(Runs {
                base: rest.base,
                net_frac,
                offered,
                jit,
                cj,
                arrivals,
                req_bits,
                arrival_cost,
            });
            rest = Runs {
                base: rest.base + RUN,
                net_frac: nf,
                offered: o,
                jit: j,
                cj: c,
                arrivals: a,
                req_bits: r,
                arrival_cost: ac,
            };
        }
        runs.push(rest);
        runs
    }
}

/// What every VM's offer reads besides its run's outputs.
struct VmOffer<'a> {
    load: &'a Load<'a>,
    mean: &'a [f64],
    keys: TickKeys,
    dt: f64,
    any_req: bool,
    guest_ns_per_request: f64,
}

impl<'a> VmOffer<'a> {
    /// The draws and offer of each VM of `r`.
    fn run(&self, r: Runs<'_>) {
        let (l, dt) = (self.load, self.dt);
        let zero = Draws::at(0, 0);
        let (mut jd, mut cd) = ([zero; BATCH], [zero; BATCH]);
        // the run's part of every per-VM array, each cut to the run's length, so the loop
        // indexes without a bounds check per value
        let len = r.offered.len();
        let span = r.base..r.base + len;
        let cut = |a: &'a [f64]| &a[span.clone()];
        let (mean, rate, streams) = (cut(self.mean), cut(l.rate), cut(l.streams));
        let (resp_bytes, backlog_bits) = (cut(l.resp_bytes), cut(l.backlog_bits));
        let (streamy, is_req) = (&l.streamy[span.clone()], &l.is_req[span.clone()]);
        let is_file = l.is_file.map(|f| &f[span.clone()]);
        let ingress = l.ingress.map(|(limit, div)| (cut(limit), cut(div)));
        let net_frac = &r.net_frac[..len];
        let (jit_out, cj_out) = (&mut r.jit[..len], &mut r.cj[..len]);
        let (arrivals_out, req_bits) = (&mut r.arrivals[..len], &mut r.req_bits[..len]);
        let (offered, arrival_cost) = (&mut r.offered[..len], &mut r.arrival_cost[..len]);
        for k in 0..len {
            let i = r.base + k;
            let b = k % BATCH;
            if b == 0 {
                // the next batch's keys, hashed together (past the run's end: unused)
                (jd, cd) = (self.keys.jit_batch(i as u64), self.keys.cj_batch(i as u64));
            }
            let jit = self.keys.jit_of(jd[b]);
            jit_out[k] = jit;
            cj_out[k] = self.keys.cj_of(cd[b]);
            let m = mean[k];
            let mut arrivals = if m >= 0.0 {
                self.keys.arrivals(i as u64, m)
            } else {
                0.0
            };
            if let Some((limit, div)) = ingress {
                arrivals = np_min(arrivals, limit[k] * dt / div[k]);
            }
            arrivals_out[k] = arrivals;
            let mut f = net_frac[k] * rate[k];
            f *= streams[k];
            f *= jit;
            let mut o = if streamy[k] { f } else { 0.0 };
            let mut rb = arrivals * resp_bytes[k];
            rb *= 8.0;
            req_bits[k] = rb;
            if self.any_req {
                let mut q = rb + backlog_bits[k];
                q /= dt;
                q *= if is_req[k] { 1.0 } else { 0.0 };
                o += q;
            }
            if is_file.is_some_and(|file| file[k]) {
                o = rate[k];
            }
            offered[k] = o;
            if self.guest_ns_per_request != 0.0 {
                let mut a = arrivals / dt;
                a *= self.guest_ns_per_request;
                a /= 1e9;
                arrival_cost[k] = a;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One tick of [`count`] from zeroed counters of `V` VMs and `H` hosts: its figures,
    /// the VM counters (cpu_ns, steal_ns, tx_b, rx_b, tx_pk, rx_pk) and the host ones
    /// (h_cpu_ns, h_tx_b, h_rx_b), one array each.
    fn count_from_zero<const V: usize, const H: usize>(
        vm: &VmTick<'_>,
        hosts: &HostTick<'_>,
        p: CountParams,
    ) -> (Figures, [[f64; V]; 6], [[f64; H]; 3]) {
        let mut cols = [[0.0; V]; 6];
        let mut hcols = [[0.0; H]; 3];
        let [cpu_ns, steal_ns, tx_b, rx_b, tx_pk, rx_pk] = &mut cols;
        let [h_cpu_ns, h_tx_b, h_rx_b] = &mut hcols;
        let mut c = Counters {
            cpu_ns,
            steal_ns,
            tx_b,
            rx_b,
            tx_pk,
            rx_pk,
            h_cpu_ns,
            h_tx_b,
            h_rx_b,
        };
        let f = count(vm, hosts, &mut c, p).unwrap();
        (f, cols, hcols)
    }

    /// [`count`] of `n` VMs over 97 hosts (VMs interleaved across hosts, so every host's
    /// sums cross runs; some paused, some on a VF, some short of CPU) on `threads` threads:
    /// figures and counters after two ticks, as bits.
    fn count_bits(n: usize, threads: usize) -> Result<Vec<Vec<u64>>, InputError> {
        let x = |i: usize, a: f64| (i as f64 * a).fract();
        let h = 97;
        let host: Vec<i64> = (0..n).map(|i| ((i * 31) % h) as i64).collect();
        let tx: Vec<f64> = (0..n).map(|i| 1e9 * x(i, 0.37)).collect();
        let rx: Vec<f64> = (0..n).map(|i| 1e8 * x(i, 0.71)).collect();
        let ppb: Vec<f64> = (0..n).map(|i| 1e-5 + 1e-4 * x(i, 0.13)).collect();
        let ns_pkt: Vec<f64> = (0..n).map(|i| 500.0 + 3000.0 * x(i, 0.29)).collect();
        let nspb: Vec<f64> = (0..n).map(|i| x(i, 0.53)).collect();
        let busy: Vec<f64> = (0..n).map(|i| 2.0 * x(i, 0.19)).collect();
        let ac: Vec<f64> = (0..n).map(|i| 0.1 * x(i, 0.43)).collect();
        let scale: Vec<f64> = (0..n).map(|i| 0.5 + x(i, 0.61)).collect();
        let vcpus: Vec<f64> = (0..n).map(|i| (1 + i % 4) as f64).collect();
        let need: Vec<f64> = (0..n).map(|i| 3.0 * x(i, 0.23)).collect();
        let virt: Vec<bool> = (0..n).map(|i| i % 3 != 0).collect();
        let pkt_bits: Vec<f64> = (0..n).map(|i| 800.0 + 11200.0 * x(i, 0.47)).collect();
        let paused: Vec<bool> = (0..n).map(|i| i % 17 == 5).collect();
        let per_host = |a: f64| (0..h).map(|k| 1e8 + 1e9 * x(k, a)).collect::<Vec<_>>();
        let (bvf, txh, rxh, hn) = (
            per_host(0.11),
            per_host(0.31),
            per_host(0.41),
            per_host(0.59),
        );
        let cores = vec![8.0; h];
        let cap = vec![1e10; h];
        let vm = VmTick {
            host: &host,
            tx: &tx,
            rx: &rx,
            pkts_per_bit: &ppb,
            ns_pkt: &ns_pkt,
            ns_per_byte: &nspb,
            cpu_busy: &busy,
            arrival_cost: &ac,
            host_scale_vm: &scale,
            vcpus: &vcpus,
            need: &need,
            virt: &virt,
            pkt_bits: &pkt_bits,
            paused: Some(&paused),
        };
        let hosts = HostTick {
            backend_vm_frac: &bvf,
            tx_host: &txh,
            rx_host: &rxh,
            host_need: &hn,
            cores: &cores,
            capacity: &cap,
        };
        let mut cols: Vec<Vec<f64>> = (0..6).map(|k| vec![k as f64; n]).collect();
        let mut hcols: Vec<Vec<f64>> = (0..3).map(|k| vec![k as f64; h]).collect();
        let p = CountParams {
            dt: 0.5,
            virtio_host_ns_per_packet: 3000.0,
            ack_bits: 528.0,
            steal: true,
            threads,
        };
        let mut figs = Vec::new();
        for _ in 0..2 {
            let [cpu_ns, steal_ns, tx_b, rx_b, tx_pk, rx_pk] = &mut cols[..] else {
                unreachable!()
            };
            let [h_cpu_ns, h_tx_b, h_rx_b] = &mut hcols[..] else {
                unreachable!()
            };
            let mut c = Counters {
                cpu_ns,
                steal_ns,
                tx_b,
                rx_b,
                tx_pk,
                rx_pk,
                h_cpu_ns,
                h_tx_b,
                h_rx_b,
            };
            let f = count(&vm, &hosts, &mut c, p)?;
            figs.extend([f.cpu_use, f.host_cpu_util, f.host_net_util]);
        }
        let bits = |v: &Vec<f64>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        Ok(figs.iter().chain(&cols).chain(&hcols).map(bits).collect())
    }

    #[test]
    fn count_is_the_same_bits_on_one_thread_or_several() {
        // 10,000 VMs: five runs of RUN (the last shorter), each host's VMs in all of them
        let one = count_bits(10_000, 1).unwrap();
        for threads in [2, 3] {
            assert!(
                one == count_bits(10_000, threads).unwrap(),
                "{threads} threads"
            );
        }
        // the counts moved: steal somewhere, some VM's CPU capped, a paused VM idle
        let cpu_use = |i: usize| f64::from_bits(one[0][i]);
        assert!((0..10_000).any(|i| cpu_use(i) == 1.0) && cpu_use(5) == 0.0);
        assert!(one[7].iter().any(|&s| f64::from_bits(s) > 1.0));
        let e = count_bits(10, 0).unwrap_err();
        assert_eq!(e.0, "threads: 0, not a count of threads >= 1");
    }

    #[test]
    fn one_host_two_vms() {
        // vm0: 8 Gbit/s on a VF at 1e-5 packets per bit (80 kpps), 1,000 ns a packet and
        // 0.5 ns a byte: (80,000·1,000 + 1e9·0.5) / 1e9 = 0.58 cores, plus 0.2 busy;
        // vm1: virtio, 1 Gbit/s at 1e-4 packets per bit (100 kpps), 2,000 ns a packet:
        // 0.2 cores, plus 0.1 of requests; capped by its one vCPU only when over.
        let host = [0i64, 0];
        let (tx, rx) = ([8e9, 1e9], [1e8, 0.0]);
        let vm = VmTick {
            host: &host,
            tx: &tx,
            rx: &rx,
            pkts_per_bit: &[1e-5, 1e-4],
            ns_pkt: &[1000.0, 2000.0],
            ns_per_byte: &[0.5, 0.0],
            cpu_busy: &[0.2, 0.0],
            arrival_cost: &[0.0, 0.1],
            host_scale_vm: &[1.0, 1.0],
            vcpus: &[2.0, 1.0],
            need: &[0.78, 0.3],
            virt: &[false, true],
            pkt_bits: &[12000.0, 12000.0],
            paused: None,
        };
        let hosts = HostTick {
            backend_vm_frac: &[0.0],
            tx_host: &[9e9],
            rx_host: &[1e8],
            host_need: &[2.0],
            cores: &[4.0],
            capacity: &[1e10],
        };
        let p = CountParams {
            dt: 0.5,
            virtio_host_ns_per_packet: 3000.0,
            ack_bits: 528.0,
            steal: false,
            threads: 1,
        };
        let (f, cols, hcols) = count_from_zero::<2, 1>(&vm, &hosts, p);
        let vm0 = (8e9 * 1e-5 * 1000.0 + 8e9 / 8.0 * 0.5) / 1e9 + 0.2;
        let vm1 = (1e9 * 1e-4 * 2000.0) / 1e9 + 0.1;
        assert_eq!(f.cpu_use, [vm0 / 2.0, vm1]);
        assert_eq!(f.host_cpu_util, [0.5]);
        assert_eq!(f.host_net_util, [0.9]);
        assert_eq!(cols[0], [vm0 * 0.5 * 1e9, vm1 * 0.5 * 1e9]);
        assert_eq!(cols[1], [0.0, 0.0]);
        assert_eq!(cols[2], [5e8, 6.25e7]); // 8e9 · 0.5 / 8 bytes
        // the backend: vm1's 100 kpps at 3,000 ns (vm0's VF costs it nothing)
        let backend = 1e9 * 1e-4 * 3000.0;
        assert_eq!(hcols[0], [((vm0 + vm1) * 1e9 + backend) * 0.5]);
    }

    #[test]
    fn steal_where_the_host_is_short_and_paused_vms_use_nothing() {
        // vm0 wants 2 cores, its host runs it at half speed: 1 core used, 1 waited
        // (1e9 ns a second of steal); vm1 is paused: no CPU, but its wait counts
        let host = [0i64, 0];
        let z = [0.0, 0.0];
        let paused = [false, true];
        let vm = VmTick {
            host: &host,
            tx: &z,
            rx: &z,
            pkts_per_bit: &z,
            ns_pkt: &z,
            ns_per_byte: &z,
            cpu_busy: &[2.0, 1.0],
            arrival_cost: &z,
            host_scale_vm: &[0.5, 0.5],
            vcpus: &[2.0, 1.0],
            need: &[2.0, 1.0],
            virt: &[false, false],
            pkt_bits: &[12000.0, 12000.0],
            paused: Some(&paused),
        };
        let hosts = HostTick {
            backend_vm_frac: &[0.0],
            tx_host: &[0.0],
            rx_host: &[0.0],
            host_need: &[3.0],
            cores: &[1.5],
            capacity: &[1e10],
        };
        let p = CountParams {
            dt: 1.0,
            virtio_host_ns_per_packet: 0.0,
            ack_bits: 528.0,
            steal: true,
            threads: 1,
        };
        let (f, cols, _) = count_from_zero::<2, 1>(&vm, &hosts, p);
        assert_eq!(f.cpu_use, [0.5, 0.0]);
        assert_eq!(f.host_cpu_util, [1.0]);
        assert_eq!(cols[0], [1e9, 0.0]);
        assert_eq!(cols[1], [1e9, 1e9]);
    }

    #[test]
    fn on_time_of_the_current_and_renewed_cycles() {
        // VM 0: a 4 s cycle from t = -1 at duty 0.5, on until 1: in (0, 1] on all of it;
        // VM 2: a 10 s cycle from -9.5 at duty 0.5, on until -4.5: off, and it ends at
        // 0.5, inside the tick: renewed from 0.5 with a length in [4, 8] (>= 0.5 s left,
        // on for the first half of >= 2 s: on for all of (0.5, 1]); VM 1 is not live
        let mut start = [-1.0, 0.0, -9.5];
        let mut length = [4.0, 1.0, 10.0];
        let mut frac = [0.0, 7.0, 0.0];
        let r = Renewals {
            seed: 3,
            stream: 4,
            tick: 0,
            cycle_min: 4.0,
            cycle_max: 8.0,
        };
        on_fraction(
            &mut start,
            &mut length,
            &[0, 2],
            &[0.5, 0.5],
            &mut frac,
            0.0,
            1.0,
            r,
        )
        .unwrap();
        assert_eq!(frac, [1.0, 7.0, 0.5]);
        assert_eq!(start, [-1.0, 0.0, 0.5]);
        let u = Draws::new(3, 4, 2, 0, 0).uniform();
        assert_eq!(length[..2], [4.0, 1.0]);
        assert_eq!(length[2], 4.0 + 4.0 * u);
        let e = on_fraction(
            &mut start,
            &mut length,
            &[3],
            &[0.5],
            &mut frac,
            0.0,
            1.0,
            r,
        );
        assert_eq!(e.unwrap_err().0, "live[0]: 3 outside 0..3");
    }

    #[test]
    fn short_cycles_renew_many_times_and_stop_at_the_last_pass() {
        // cycles of exactly 0.01 s at duty 0.25 over (0, 1]: the current one ends at 0,
        // then 100 cycles would fit but only 63 are covered (the 64th is drawn, not
        // covered): on-time 63 · 0.0025 s, and the VM's cycle is the 64th, from 0.63
        let mut start = [-0.01];
        let mut length = [0.01];
        let mut frac = [0.0];
        let r = Renewals {
            seed: 1,
            stream: 5,
            tick: 9,
            cycle_min: 0.01,
            cycle_max: 0.01,
        };
        on_fraction(
            &mut start,
            &mut length,
            &[0],
            &[0.25],
            &mut frac,
            0.0,
            1.0,
            r,
        )
        .unwrap();
        assert!((frac[0] - 63.0 * 0.0025).abs() < 1e-12, "{}", frac[0]);
        assert!((start[0] - 0.63).abs() < 1e-12, "{}", start[0]);
    }

    #[test]
    fn processes_split_across_calls_in_any_order_give_the_same_bits() {
        // what two threads would do: each half of the live processes on its own, the
        // second half first; every start, length and share is the same bits as one call
        let n = 200;
        let start0: Vec<f64> = (0..n).map(|i| -(i as f64) * 0.37 % 5.0).collect();
        let length0: Vec<f64> = (0..n).map(|i| 0.5 + (i as f64 * 0.61) % 1.5).collect();
        let live: Vec<i64> = (0..n as i64).filter(|i| i % 7 != 3).collect();
        let duty: Vec<f64> = live.iter().map(|&i| (i as f64 * 0.13) % 1.0).collect();
        let r = Renewals {
            seed: 42,
            stream: 4,
            tick: 17,
            cycle_min: 0.5,
            cycle_max: 2.0,
        };
        let (mut s1, mut l1, mut f1) = (start0.clone(), length0.clone(), vec![0.0; n]);
        on_fraction(&mut s1, &mut l1, &live, &duty, &mut f1, 3.0, 4.0, r).unwrap();
        let (mut s2, mut l2, mut f2) = (start0, length0, vec![0.0; n]);
        let k = live.len() / 2;
        on_fraction(
            &mut s2,
            &mut l2,
            &live[k..],
            &duty[k..],
            &mut f2,
            3.0,
            4.0,
            r,
        )
        .unwrap();
        on_fraction(
            &mut s2,
            &mut l2,
            &live[..k],
            &duty[..k],
            &mut f2,
            3.0,
            4.0,
            r,
        )
        .unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&s1), bits(&s2));
        assert_eq!(bits(&l1), bits(&l2));
        assert_eq!(bits(&f1), bits(&f2));
        assert!(f1.iter().any(|&f| f > 0.0) && s1.iter().any(|&s| s > 3.0)); // renewals ran
    }

    #[test]
    fn offer_of_each_kind() {
        // VM 0, a bulk stream (duty 1, no live process): 1 Gbit/s · 2 streams, no jitter;
        // VM 1, requests behind an ingress limit of 0: none admitted, its 8,000 backlog
        // bits over the 0.5 s tick, 16 kbit/s; VM 2, a file with bytes left: its full
        // 3 Gbit/s; VM 3, requests at a mean of 100 of 1,000 bytes: its draw's
        // arrivals · 8,000 bits / 0.5 s, and 5e4 ns of guest CPU each
        let empty: [i64; 0] = [];
        let (mut s, mut l) = ([0.0; 4], [1.0; 4]);
        let (mut s2, mut l2) = ([0.0; 4], [1.0; 4]);
        let mut net_frac = [1.0, 0.0, 0.0, 0.0];
        let mut cpu_frac = [0.0; 4];
        let net = Cycles {
            start: &mut s,
            length: &mut l,
            live: &empty,
            duty: &[],
            frac: &mut net_frac,
        };
        let cpu = Cycles {
            start: &mut s2,
            length: &mut l2,
            live: &empty,
            duty: &[],
            frac: &mut cpu_frac,
        };
        let inf = f64::INFINITY;
        let load = Load {
            rate: &[1e9, 0.0, 3e9, 0.0],
            streams: &[2.0, 1.0, 1.0, 1.0],
            streamy: &[true, false, false, false],
            resp_bytes: &[0.0, 1000.0, 0.0, 1000.0],
            backlog_bits: &[0.0, 8000.0, 0.0, 0.0],
            is_req: &[false, true, false, true],
            is_file: Some(&[false, false, true, false]),
            ingress: Some((&[inf, 0.0, inf, inf], &[8.0, 8.0, 8.0, 8.0])),
            asks: &[1, 3],
            ask_means: &[100.0, 100.0],
        };
        let p = OfferParams {
            seed: 5,
            tick: 2,
            t0: 1.0,
            t1: 1.5,
            cycle_min: 1.0,
            cycle_max: 2.0,
            rate_jitter: 0.0,
            cpu_jitter: 0.0,
            any_req: true,
            guest_ns_per_request: 5e4,
            threads: 1,
        };
        let got = offer(net, cpu, &load, p).unwrap();
        let k = Draws::new(5, rng::stream::ARRIVALS, 3, 2, 0).poisson(100.0);
        assert!(k > 50.0 && k < 150.0);
        assert_eq!(got.arrivals, [0.0, 0.0, 0.0, k]);
        assert_eq!(got.offered, [2e9, 16_000.0, 3e9, k * 8000.0 / 0.5]);
        assert_eq!(got.req_bits, [0.0, 0.0, 0.0, k * 8000.0]);
        assert_eq!(got.arrival_cost, [0.0, 0.0, 0.0, k / 0.5 * 5e4 / 1e9]);
        assert_eq!((got.jit, got.cj), (vec![1.0; 4], vec![1.0; 4]));
        assert_eq!(cpu_frac, [0.0; 4]);
    }

    /// [`offer`] of a world of `n` VMs (every kind, duty cycles renewed, requests behind
    /// limits) on `threads` threads, `live` in the order given: every output and the
    /// advanced cycles, as bits (the draws and the cycles checked against the kernels of
    /// each part, [`on_fraction`] and [`rng::tick_draws`], on the way).
    fn offer_bits(n: usize, threads: usize, reversed: bool) -> Vec<Vec<u64>> {
        let x = |i: usize, a: f64| (i as f64 * a).fract();
        let mut net_start: Vec<f64> = (0..n).map(|i| 9.0 - 2.0 * x(i, 0.37)).collect();
        let mut net_len: Vec<f64> = (0..n).map(|i| 0.5 + 1.5 * x(i, 0.61)).collect();
        let mut cpu_start = net_start.clone();
        let mut cpu_len: Vec<f64> = (0..n).map(|i| 0.5 + 1.5 * x(i, 0.29)).collect();
        // a third of the VMs without a live net process, a fifth without a CPU one
        let mut net_live: Vec<i64> = (0..n as i64).filter(|i| i % 3 != 1).collect();
        let mut cpu_live: Vec<i64> = (0..n as i64).filter(|i| i % 5 != 2).collect();
        if reversed {
            net_live.reverse();
            cpu_live.reverse();
        }
        let net_duty: Vec<f64> = net_live.iter().map(|&i| x(i as usize, 0.13)).collect();
        let cpu_duty: Vec<f64> = cpu_live.iter().map(|&i| x(i as usize, 0.17)).collect();
        let mut net_frac: Vec<f64> = (0..n).map(|i| (i % 2) as f64).collect();
        let mut cpu_frac = vec![0.0; n];
        let rate: Vec<f64> = (0..n).map(|i| 1e8 + 5e8 * x(i, 0.23)).collect();
        let streams = vec![2.0; n];
        let streamy: Vec<bool> = (0..n).map(|i| i % 4 != 0).collect();
        let resp: Vec<f64> = (0..n).map(|i| 1000.0 * (i % 7) as f64).collect();
        let backlog: Vec<f64> = (0..n).map(|i| 100.0 * (i % 3) as f64).collect();
        let is_req: Vec<bool> = (0..n).map(|i| i % 4 == 0).collect();
        let is_file: Vec<bool> = (0..n).map(|i| i % 11 == 5).collect();
        let limit: Vec<f64> = (0..n).map(|i| 1e6 * (i % 13) as f64).collect();
        let div = vec![8000.0; n];
        let asks: Vec<i64> = (0..n as i64).step_by(4).collect();
        // means on both sides of the Poisson's switch at 10
        let means: Vec<f64> = asks.iter().map(|&i| 30.0 * x(i as usize, 0.41)).collect();
        // the parts' own kernels, for the runs' bookkeeping: each cycle's renewal, each
        // VM's draws
        let renewals = |stream| Renewals {
            seed: 11,
            stream,
            tick: 9,
            cycle_min: 0.5,
            cycle_max: 2.0,
        };
        let (mut ns, mut nl, mut nf) = (net_start.clone(), net_len.clone(), net_frac.clone());
        let r = renewals(rng::stream::NET_CYCLE);
        on_fraction(
            &mut ns, &mut nl, &net_live, &net_duty, &mut nf, 9.0, 10.0, r,
        )
        .unwrap();
        let (mut cs, mut cl, mut cf) = (cpu_start.clone(), cpu_len.clone(), cpu_frac.clone());
        let r = renewals(rng::stream::CPU_CYCLE);
        on_fraction(
            &mut cs, &mut cl, &cpu_live, &cpu_duty, &mut cf, 9.0, 10.0, r,
        )
        .unwrap();
        let d = rng::tick_draws(11, 9, n, 0.05, 0.03, &asks, &means).unwrap();
        let net = Cycles {
            start: &mut net_start,
            length: &mut net_len,
            live: &net_live,
            duty: &net_duty,
            frac: &mut net_frac,
        };
        let cpu = Cycles {
            start: &mut cpu_start,
            length: &mut cpu_len,
            live: &cpu_live,
            duty: &cpu_duty,
            frac: &mut cpu_frac,
        };
        let load = Load {
            rate: &rate,
            streams: &streams,
            streamy: &streamy,
            resp_bytes: &resp,
            backlog_bits: &backlog,
            is_req: &is_req,
            is_file: Some(&is_file),
            ingress: Some((&limit, &div)),
            asks: &asks,
            ask_means: &means,
        };
        let p = OfferParams {
            seed: 11,
            tick: 9,
            t0: 9.0,
            t1: 10.0,
            cycle_min: 0.5,
            cycle_max: 2.0,
            rate_jitter: 0.05,
            cpu_jitter: 0.03,
            any_req: true,
            guest_ns_per_request: 2e4,
            threads,
        };
        let o = offer(net, cpu, &load, p).unwrap();
        let admitted: Vec<f64> = (0..n)
            .map(|i| np_min(d.arrivals[i], limit[i] * 1.0 / div[i]))
            .collect();
        assert_eq!((&o.jit, &o.cj, &o.arrivals), (&d.jit, &d.cj, &admitted));
        let parts = [&ns, &nl, &nf, &cs, &cl, &cf];
        let state = [
            &net_start, &net_len, &net_frac, &cpu_start, &cpu_len, &cpu_frac,
        ];
        assert!(parts == state);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let outs = [
            &o.offered,
            &o.jit,
            &o.cj,
            &o.arrivals,
            &o.req_bits,
            &o.arrival_cost,
        ];
        outs.iter().chain(&state).map(|v| bits(v)).collect()
    }

    #[test]
    fn offer_is_the_same_bits_on_one_thread_or_several() {
        // 10,000 VMs: five runs of RUN VMs (the last shorter), 6,667 live net processes
        // in four runs; the threads take the runs in whatever order they get them
        let one = offer_bits(10_000, 1, false);
        for threads in [2, 3] {
            assert!(
                one == offer_bits(10_000, threads, false),
                "{threads} threads"
            );
        }
        // live in reverse: one run of processes, whatever the threads (a VM listed twice
        // would renew in list order), the same bits again
        assert!(one == offer_bits(10_000, 2, true));
        let e = std::panic::catch_unwind(|| offer_bits(10, 0, false)).unwrap_err();
        let e = e.downcast_ref::<String>().unwrap();
        assert!(e.contains("threads: 0, not a count of threads >= 1"), "{e}");
        // the world did something: renewals, arrivals, offers of every kind
        let renewed = |k: usize| one[k].iter().filter(|&&s| f64::from_bits(s) > 9.0).count();
        assert!(
            renewed(6) > 1000 && renewed(9) > 1000,
            "{} {}",
            renewed(6),
            renewed(9)
        );
        assert!(one[3].iter().filter(|&&a| f64::from_bits(a) > 0.0).count() > 1000);
    }

    #[test]
    fn nan_propagates_as_numpy_does() {
        assert!(np_min(f64::NAN, 1.0).is_nan());
        assert!(np_min(1.0, f64::NAN).is_nan());
        assert!(np_max(0.0, f64::NAN).is_nan());
        assert_eq!(np_max(0.0, -0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(np_min(2.0, 1.0), 1.0);
    }
}
