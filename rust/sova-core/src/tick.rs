//! The simulated world's tick: the parts that are pure arithmetic over every VM of every
//! host at once (the random draws stay in the simulator, whose seed contract fixes them).
//!
//! Each function evaluates the expressions of the numpy form it replaced in that form's
//! order, one VM (or host) at a time, so every value is the same float: numpy's
//! elementwise operations are single IEEE operations (no fused multiply-add), and its
//! `bincount` is a running sum in index order. The readable numpy form is the oracle
//! (tests/test_tick_forms.py compares the engine's state byte for byte after every tick).

use crate::rng::{self, Draws, vm_indices};
use crate::waterfill::InputError;

/// `np.minimum`: NaN if either is NaN (the NaN operand itself), else the smaller; on a
/// tie the first.
fn np_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a <= b) {
        a
    } else {
        b
    }
}

/// `np.maximum`, likewise.
fn np_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || (!b.is_nan() && a >= b) {
        a
    } else {
        b
    }
}

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
/// each host's CPU (the vCPUs' and the virtio backend's) and bytes.
pub fn count(
    vm: &VmTick<'_>,
    hosts: &HostTick<'_>,
    c: &mut Counters<'_>,
    p: CountParams,
) -> Result<Figures, InputError> {
    check(vm, hosts, c)?;
    let n_hosts = hosts.tx_host.len();
    let dt = p.dt;
    let mut backend_used = vec![0.0; n_hosts];
    let mut host_cpu = vec![0.0; n_hosts];
    let mut cpu_use = vec![0.0; vm.tx.len()];
    for i in 0..vm.tx.len() {
        let tx = vm.tx[i];
        let tx_ppb = tx * vm.pkts_per_bit[i];
        let mut cpu_used = tx_ppb * vm.ns_pkt[i];
        cpu_used += tx / 8.0 * vm.ns_per_byte[i];
        cpu_used /= 1e9;
        cpu_used += vm.cpu_busy[i];
        cpu_used += vm.arrival_cost[i];
        cpu_used *= vm.host_scale_vm[i];
        cpu_used = np_min(cpu_used, vm.vcpus[i]);
        if vm.paused.is_some_and(|paused| paused[i]) {
            cpu_used = 0.0;
        }
        if p.steal {
            let mut wanted = np_min(vm.need[i], vm.vcpus[i]);
            wanted -= cpu_used;
            wanted = np_max(0.0, wanted);
            wanted *= dt;
            wanted *= 1e9;
            wanted *= if vm.host_scale_vm[i] < 1.0 { 1.0 } else { 0.0 };
            c.steal_ns[i] += wanted;
        }
        c.cpu_ns[i] += cpu_used * dt * 1e9;
        c.tx_b[i] += tx * dt / 8.0;
        c.rx_b[i] += vm.rx[i] * dt / 8.0;
        c.tx_pk[i] += tx / vm.pkt_bits[i] * dt;
        c.rx_pk[i] += vm.rx[i] / p.ack_bits * dt;
        let virt = if vm.virt[i] { 1.0 } else { 0.0 };
        // (in range: checked above)
        let h = vm.host[i] as usize;
        backend_used[h] += tx_ppb * p.virtio_host_ns_per_packet * virt;
        host_cpu[h] += cpu_used;
        cpu_use[i] = cpu_used / vm.vcpus[i];
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
    let n = start.len();
    if duty.len() != live.len() {
        return Err(InputError(format!(
            "duty: {} values for {} live processes",
            duty.len(),
            live.len()
        )));
    }
    for (name, len) in [("length", length.len()), ("frac", frac.len())] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    let live = vm_indices("live", live, n)?;
    let span = r.cycle_max - r.cycle_min;
    let dt = t1 - t0;
    let pre = rng::prefix(r.seed, r.stream);
    for (&i, &d) in live.iter().zip(duty) {
        let (s, ln) = (start[i], length[i]);
        let end = s + ln;
        let mut x = d * ln;
        x += s;
        let mut on = np_max(np_min(np_min(t1, end), x) - t0, 0.0);
        if end <= t1 {
            let mut cur = end; // where the next cycle starts
            for pass in 0..PASSES {
                start[i] = cur;
                let u = Draws::after(pre, i as u64, r.tick, pass).uniform();
                let ln_k = r.cycle_min + span * u;
                length[i] = ln_k;
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
        frac[i] = on / dt;
    }
    Ok(())
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

/// [`on_fraction`] of one process kind, when it has live processes.
fn cycles(c: &mut Cycles<'_>, t0: f64, t1: f64, r: Renewals) -> Result<(), InputError> {
    if c.live.is_empty() {
        return Ok(());
    }
    on_fraction(c.start, c.length, c.live, c.duty, c.frac, t0, t1, r)
}

/// One tick's offered load in one pass: the duty cycles' on-time (net and CPU, renewed
/// where they end, [`on_fraction`]), the tick's draws ([`crate::rng::tick_draws`]),
/// requests above a VM's ingress limit dropped, then each VM's offer: its streams'
/// `frac · rate · streams · jitter`, plus its responses and backlog over the tick for a
/// request VM, or its full rate for a file with bytes left; and each VM's guest CPU for
/// its arrivals. The numpy form's expressions in its order, one VM at a time.
pub fn offer(
    mut net: Cycles<'_>,
    mut cpu: Cycles<'_>,
    load: &Load<'_>,
    p: OfferParams,
) -> Result<Offered, InputError> {
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
    let renew = |stream| Renewals {
        seed: p.seed,
        stream,
        tick: p.tick,
        cycle_min: p.cycle_min,
        cycle_max: p.cycle_max,
    };
    let (t0, t1) = (p.t0, p.t1);
    cycles(&mut net, t0, t1, renew(rng::stream::NET_CYCLE))?;
    cycles(&mut cpu, t0, t1, renew(rng::stream::CPU_CYCLE))?;
    let got = rng::tick_draws(
        p.seed,
        p.tick,
        n,
        p.rate_jitter,
        p.cpu_jitter,
        load.asks,
        load.ask_means,
    )?;
    let dt = t1 - t0;
    let mut arrivals = got.arrivals;
    if let Some((limit, div)) = load.ingress {
        for i in 0..n {
            arrivals[i] = np_min(arrivals[i], limit[i] * dt / div[i]);
        }
    }
    let mut offered = vec![0.0; n];
    let mut req_bits = vec![0.0; n];
    let mut arrival_cost = vec![0.0; n];
    for i in 0..n {
        let mut f = net.frac[i] * load.rate[i];
        f *= load.streams[i];
        f *= got.jit[i];
        let mut o = if load.streamy[i] { f } else { 0.0 };
        let mut rb = arrivals[i] * load.resp_bytes[i];
        rb *= 8.0;
        req_bits[i] = rb;
        if p.any_req {
            let mut r = rb + load.backlog_bits[i];
            r /= dt;
            r *= if load.is_req[i] { 1.0 } else { 0.0 };
            o += r;
        }
        if load.is_file.is_some_and(|file| file[i]) {
            o = load.rate[i];
        }
        offered[i] = o;
        if p.guest_ns_per_request != 0.0 {
            let mut a = arrivals[i] / dt;
            a *= p.guest_ns_per_request;
            a /= 1e9;
            arrival_cost[i] = a;
        }
    }
    Ok(Offered {
        offered,
        jit: got.jit,
        cj: got.cj,
        arrivals,
        req_bits,
        arrival_cost,
    })
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

    #[test]
    fn nan_propagates_as_numpy_does() {
        assert!(np_min(f64::NAN, 1.0).is_nan());
        assert!(np_min(1.0, f64::NAN).is_nan());
        assert!(np_max(0.0, f64::NAN).is_nan());
        assert_eq!(np_max(0.0, -0.0).to_bits(), 0.0f64.to_bits());
        assert_eq!(np_min(2.0, 1.0), 1.0);
    }
}
