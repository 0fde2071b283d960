//! How one tick's offered load is served, for every VM of every host in one pass: the
//! guest's vCPUs, the host's cores (and a driver domain's), the paths' ceilings, then the
//! PF's egress shared with the migration streams, and what each host receives.
//!
//! As in [`crate::tick`], each quantity is the expression of the numpy form it replaced,
//! evaluated in that form's order one VM (or host) at a time, so every value is the same
//! float: elementwise operations are single IEEE operations, `np.minimum`/`np.maximum`
//! keep NaN, a per-host sum (`np.bincount`) runs in VM index order from +0.0, and the
//! fills are [`crate::waterfill`]'s. The readable numpy form is the oracle
//! (tests/test_tick_forms.py `ref_share`, held to the engine byte for byte).

use crate::npf::{np_max, np_min};
use crate::waterfill::{self, Flows, InputError, Layout};

/// 1.0 for true, 0.0 for false: a boolean array in numpy arithmetic.
fn one_if(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// Each VM's offer and state this tick (one value per VM).
pub struct ShareVms<'a> {
    pub host: &'a [i64],
    /// offered, capped by the guest's own limits (bit/s)
    pub want: &'a [f64],
    pub pkts_per_bit: &'a [f64],
    pub pkt_bits: &'a [f64],
    pub on_vf: &'a [bool],
    pub ns_per_byte: &'a [f64],
    /// guest CPU of this tick's requests (cores)
    pub arrival_cost: &'a [f64],
    pub cpu_frac: &'a [f64],
    pub cj: &'a [f64],
    pub vcpus: &'a [f64],
    /// VMs stopped for a migration's downtime; None when none is
    pub paused: Option<&'a [bool]>,
    /// the PF's TCP-stream weights
    pub weights: &'a [f64],
    /// senders clocked by their ACKs (duty, bulk, file)
    pub link_clocked: &'a [bool],
    pub vf_max: &'a [f64],
    pub vf_min: &'a [f64],
    /// file transfers with bytes left; None when none has
    pub is_file: Option<&'a [bool]>,
    pub file_left: &'a [f64],
    pub rx_share: &'a [f64],
    pub arrivals: &'a [f64],
    pub req_bytes: &'a [f64],
}

/// Each host's resources (one value per host).
pub struct ShareHosts<'a> {
    pub capacity: &'a [f64],
    pub cores: &'a [f64],
    pub backend_cores: &'a [f64],
}

/// The migrations copying this tick: source and target host, the stream's cap (bit/s).
pub struct Copying<'a> {
    pub src: &'a [i64],
    pub dst: &'a [i64],
    pub cap: &'a [f64],
}

/// The profile's constants and what the caller knows of the arrays.
#[derive(Debug, Clone, Copy)]
pub struct ShareParams {
    pub dt: f64,
    pub guest_ns_per_packet: f64,
    pub virtio_guest_ns_per_packet: f64,
    pub virtio_host_ns_per_packet: f64,
    /// per active virtio VM; 0.0: no such overhead
    pub virtio_backend_ns_per_vm: f64,
    pub virtio_pps_limit: f64,
    pub virtio_flow_limit: f64,
    pub tcp_link_clocked: bool,
    /// some host runs its backend in a driver domain (`backend_cores > 0`)
    pub dedicated_backend: bool,
    /// the per-VM vCPU load is wanted (the request service time)
    pub vcpu_load: bool,
    /// every weight is a whole number
    pub weights_whole: bool,
    /// some VM has requests (`rx` carries them)
    pub any_asks: bool,
    /// threads the fills share their hosts among
    /// ([`waterfill::links_waterfill_threads`]: the same bits for any number); the per-VM
    /// passes between them run on this thread
    pub threads: usize,
}

/// What each VM got this tick and the contention figures latency and counters need.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Shared {
    pub want: Vec<f64>,
    pub tx: Vec<f64>,
    pub rx: Vec<f64>,
    pub ns_pkt: Vec<f64>,
    pub cpu_busy: Vec<f64>,
    pub need: Vec<f64>,
    pub host_scale_vm: Vec<f64>,
    /// empty unless asked for
    pub vcpu_load: Vec<f64>,
    pub tx_host: Vec<f64>,
    /// each host's VMs' own tx, before the migration streams
    pub tx_by_host: Vec<f64>,
    pub rx_host: Vec<f64>,
    pub backend_pps: Vec<f64>,
    pub pps_limit: Vec<f64>,
    pub host_need: Vec<f64>,
    pub host_scale: Vec<f64>,
    pub backend_vm_frac: Vec<f64>,
    pub mig_rate: Vec<f64>,
}

fn check(
    vm: &ShareVms<'_>,
    hosts: &ShareHosts<'_>,
    mig: &Copying<'_>,
    layout: &Layout<'_>,
) -> Result<(), InputError> {
    let n = vm.want.len();
    let per_vm = [
        ("host", vm.host.len()),
        ("pkts_per_bit", vm.pkts_per_bit.len()),
        ("pkt_bits", vm.pkt_bits.len()),
        ("on_vf", vm.on_vf.len()),
        ("ns_per_byte", vm.ns_per_byte.len()),
        ("arrival_cost", vm.arrival_cost.len()),
        ("cpu_frac", vm.cpu_frac.len()),
        ("cj", vm.cj.len()),
        ("vcpus", vm.vcpus.len()),
        ("paused", vm.paused.map_or(n, <[bool]>::len)),
        ("weights", vm.weights.len()),
        ("link_clocked", vm.link_clocked.len()),
        ("vf_max", vm.vf_max.len()),
        ("vf_min", vm.vf_min.len()),
        ("is_file", vm.is_file.map_or(n, <[bool]>::len)),
        ("file_left", vm.file_left.len()),
        ("rx_share", vm.rx_share.len()),
        ("arrivals", vm.arrivals.len()),
        ("req_bytes", vm.req_bytes.len()),
    ];
    for (name, len) in per_vm {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    let h = hosts.capacity.len();
    for (name, len) in [
        ("cores", hosts.cores.len()),
        ("backend_cores", hosts.backend_cores.len()),
        ("layout", layout.links()),
    ] {
        if len != h {
            return Err(InputError(format!("{name}: {len} values for {h} hosts")));
        }
    }
    let in_range = |name: &str, a: &[i64]| match a
        .iter()
        .enumerate()
        .find(|(_, g)| usize::try_from(**g).map_or(true, |g| g >= h))
    {
        Some((i, g)) => Err(InputError(format!("{name}[{i}]: {g} outside 0..{h}"))),
        None => Ok(()),
    };
    in_range("host", vm.host)?;
    in_range("mig_src", mig.src)?;
    in_range("mig_dst", mig.dst)?;
    let m = mig.src.len();
    for (name, len) in [("mig_dst", mig.dst.len()), ("mig_cap", mig.cap.len())] {
        if len != m {
            return Err(InputError(format!(
                "{name}: {len} values for {m} migrations"
            )));
        }
    }
    Ok(())
}

/// `np.bincount(host, values, minlength=H)`: each host's sum in VM index order.
fn per_host(host: &[usize], n_hosts: usize, value: impl Fn(usize) -> f64) -> Vec<f64> {
    let mut s = vec![0.0; n_hosts];
    for (i, &h) in host.iter().enumerate() {
        s[h] += value(i);
    }
    s
}

/// `np.where(need > vcpus, vcpus / np.maximum(need, 1e-12), 1.0)`: the share of its
/// need a VM's vCPUs can run.
fn scale_to(need: f64, vcpus: f64) -> f64 {
    if need > vcpus {
        vcpus / np_max(need, 1e-12)
    } else {
        1.0
    }
}

/// One tick's contention, in the order the resources bind. `layout`: every VM by its
/// host (the fills' layout while no VM moves).
pub fn share(
    vm: &ShareVms<'_>,
    hosts: &ShareHosts<'_>,
    mig: &Copying<'_>,
    layout: &Layout<'_>,
    p: ShareParams,
) -> Result<Shared, InputError> {
    crate::tick::check_threads(p.threads)?;
    check(vm, hosts, mig, layout)?;
    // (in range: checked above)
    let host: Vec<usize> = vm.host.iter().map(|&h| h as usize).collect();
    let mut s = Shared::default();
    let need_scaled = guest_need(vm, hosts, &host, layout, p, &mut s)?;
    host_cpu(vm, hosts, &host, &need_scaled, p, &mut s);
    paths(vm, &host, layout, p, &mut s)?;
    egress(vm, hosts, mig, &host, layout, p, &mut s)?;
    Ok(s)
}

/// `(want * pkts_per_bit * ns_pkt + want / 8.0 * ns_per_byte) / 1e9 + arrival_cost`
fn net_cost(vm: &ShareVms<'_>, ns_pkt: f64, want: f64, i: usize) -> f64 {
    let mut c = want * vm.pkts_per_bit[i];
    c *= ns_pkt;
    let mut b = want / 8.0;
    b *= vm.ns_per_byte[i];
    c += b;
    c /= 1e9;
    c + vm.arrival_cost[i]
}

/// Guest CPU: fills `ns_pkt`, `cpu_busy`, `need` and `want` (what each VM sends within
/// the share of its need its vCPUs can run); a TCP sender first takes no more than its
/// share of the egress link drains. Returns each VM's need within that share.
fn guest_need(
    vm: &ShareVms<'_>,
    hosts: &ShareHosts<'_>,
    host: &[usize],
    layout: &Layout<'_>,
    p: ShareParams,
    s: &mut Shared,
) -> Result<Vec<f64>, InputError> {
    let n = vm.want.len();
    // the per-VM arrays cut to the VMs' count (checked in `share`): no bounds check per
    // value in the passes below
    let (on_vf, cpu_frac, cj) = (&vm.on_vf[..n], &vm.cpu_frac[..n], &vm.cj[..n]);
    let (vcpus, host) = (&vm.vcpus[..n], &host[..n]);
    let clocked = p.tcp_link_clocked;
    // one pass: each VM's packet cost and busy vCPUs, and for TCP senders its need at the
    // offered rate with each host's sum of it (in VM index order, as `per_host`)
    // (zeroed buffers written by index: cheaper than a push's capacity check per value)
    let mut ns_pkt = vec![0.0; n];
    let mut cpu_busy = vec![0.0; n];
    let mut need0 = vec![0.0; if clocked { n } else { 0 }];
    let mut busy0 = vec![0.0; if clocked { hosts.cores.len() } else { 0 }];
    for i in 0..n {
        let ns = p.virtio_guest_ns_per_packet * one_if(!on_vf[i]) + p.guest_ns_per_packet;
        let busy = np_min(np_max(0.0, cpu_frac[i] * cj[i]), 1.0) * vcpus[i];
        ns_pkt[i] = ns;
        cpu_busy[i] = busy;
        if clocked {
            let need = busy + net_cost(vm, ns, vm.want[i], i);
            need0[i] = need;
            busy0[host[i]] += np_min(need, vcpus[i]);
        }
    }
    s.ns_pkt = ns_pkt;
    s.cpu_busy = cpu_busy;
    s.want = vm.want.to_vec();
    if clocked {
        let fit: Vec<f64> = (0..busy0.len())
            .map(|h| np_min(1.0, hosts.cores[h] / np_max(busy0[h], 1e-12)))
            .collect();
        let own: Vec<f64> = (0..n)
            .map(|i| vm.want[i] * scale_to(need0[i], vm.vcpus[i]) * fit[host[i]])
            .collect();
        let mut fair = vec![0.0; n];
        let flows = Flows {
            demands: &own,
            weights: Some(vm.weights),
            member: None,
        };
        waterfill::links_waterfill_threads(
            hosts.capacity,
            layout,
            flows,
            p.weights_whole,
            n,
            &mut fair,
            p.threads,
        )?;
        for i in 0..n {
            // only the link's verdict caps: a CPU-bound sender is scaled down below anyway
            let link_cap = if fair[i] < own[i] * (1.0 - 1e-9) {
                fair[i]
            } else {
                f64::INFINITY
            };
            if vm.link_clocked[i] {
                s.want[i] = np_min(s.want[i], link_cap);
            }
        }
    }
    let mut needs = vec![0.0; n];
    let mut need_scaled = vec![0.0; n];
    let (ns_pkt, cpu_busy, want) = (&s.ns_pkt[..n], &s.cpu_busy[..n], &mut s.want[..n]);
    let paused = vm.paused.map(|pz| &pz[..n]);
    for i in 0..n {
        let need = cpu_busy[i] + net_cost(vm, ns_pkt[i], want[i], i);
        needs[i] = need;
        let vm_scale = if paused.is_some_and(|pz| pz[i]) {
            0.0
        } else {
            scale_to(need, vcpus[i])
        };
        want[i] *= vm_scale;
        need_scaled[i] = need * vm_scale;
    }
    s.need = needs;
    Ok(need_scaled)
}

/// Host CPU: the vCPUs and the virtio backend on the host's cores (or the backend on a
/// driver domain's own). Fills each host's need and scale, the backend's per-VM overhead,
/// `host_scale_vm`, `vcpu_load`, and scales `want` to what the cores run; leaves each
/// host's backend speed in `pps_limit` for [`paths`].
fn host_cpu(
    vm: &ShareVms<'_>,
    hosts: &ShareHosts<'_>,
    host: &[usize],
    need_scaled: &[f64],
    p: ShareParams,
    s: &mut Shared,
) {
    let n = vm.want.len();
    let n_hosts = hosts.cores.len();
    let ded = |h: usize| p.dedicated_backend && hosts.backend_cores[h] > 0.0;
    let (on_vf, ppb, host) = (&vm.on_vf[..n], &vm.pkts_per_bit[..n], &host[..n]);
    let need_scaled = &need_scaled[..n];
    // (Python's truth: NaN counts as set)
    let per_vm_cost = p.virtio_backend_ns_per_vm != 0.0;
    // one pass: each host's need (in VM index order, as `per_host`), its active virtio
    // VMs, and the backend's per-VM work where a driver domain runs it
    let mut backend_ns = vec![0.0; if p.dedicated_backend { n } else { 0 }];
    let mut host_need = vec![0.0; n_hosts];
    let mut n_virt = vec![0.0; if per_vm_cost { n_hosts } else { 0 }];
    {
        let want = &s.want[..n];
        for i in 0..n {
            let b = want[i] * ppb[i] * p.virtio_host_ns_per_packet * one_if(!on_vf[i]);
            let h = host[i];
            let shared_ns = if ded(h) { 0.0 } else { b };
            host_need[h] += need_scaled[i] + shared_ns / 1e9;
            if per_vm_cost {
                n_virt[h] += one_if(!on_vf[i] && want[i] > 0.0);
            }
            if p.dedicated_backend {
                backend_ns[i] = b;
            }
        }
    }
    s.host_need = host_need;
    s.backend_vm_frac = vec![0.0; n_hosts];
    if per_vm_cost {
        for (h, &count) in n_virt.iter().enumerate() {
            s.backend_vm_frac[h] = count * p.virtio_backend_ns_per_vm / 1e9;
            s.host_need[h] += s.backend_vm_frac[h];
        }
    }
    s.host_scale = (0..n_hosts)
        .map(|h| np_min(1.0, hosts.cores[h] / np_max(s.host_need[h], 1e-12)))
        .collect();
    let mut host_scale_vm = vec![0.0; n];
    {
        let want = &mut s.want[..n];
        for i in 0..n {
            let x = s.host_scale[host[i]];
            host_scale_vm[i] = x;
            want[i] *= x;
        }
    }
    s.host_scale_vm = host_scale_vm;
    // how fast the backend runs: slowed by vCPU contention unless it has its own cores;
    // then it saturates on its own, every virtio VM getting a proportional share of them
    s.pps_limit = s.host_scale.clone();
    if p.dedicated_backend {
        let dd_need = per_host(host, n_hosts, |i| {
            let ns = if ded(host[i]) { backend_ns[i] } else { 0.0 };
            ns * s.host_scale_vm[i] / 1e9
        });
        let dd_scale: Vec<f64> = (0..n_hosts)
            .map(|h| {
                if ded(h) {
                    np_min(1.0, hosts.backend_cores[h] / np_max(dd_need[h], 1e-12))
                } else {
                    1.0
                }
            })
            .collect();
        for i in 0..n {
            if !vm.on_vf[i] {
                s.want[i] *= dd_scale[host[i]];
            }
        }
        for h in 0..n_hosts {
            if ded(h) {
                s.pps_limit[h] = 1.0;
            }
        }
    }
    if p.vcpu_load {
        s.vcpu_load = (0..n)
            .map(|i| s.need[i] / np_max(vm.vcpus[i] * s.host_scale_vm[i], 1e-12))
            .collect();
    }
}

/// The paths: the VF's cap; virtio's per-VM ceiling and the backend's shared packet-rate
/// ceiling. Fills `pps_limit` (from the backend speed [`host_cpu`] left there) and
/// `backend_pps`.
fn paths(
    vm: &ShareVms<'_>,
    host: &[usize],
    layout: &Layout<'_>,
    p: ShareParams,
    s: &mut Shared,
) -> Result<(), InputError> {
    let n = vm.want.len();
    let (on_vf, vf_max, pkt_bits) = (&vm.on_vf[..n], &vm.vf_max[..n], &vm.pkt_bits[..n]);
    // one pass: each path's cap, who is on virtio and sends, its packet rate
    let mut vi = vec![false; n];
    let mut demands = vec![0.0; n];
    let mut any_vi = false;
    {
        let want = &mut s.want[..n];
        for i in 0..n {
            let cap = if on_vf[i] {
                vf_max[i]
            } else {
                p.virtio_flow_limit
            };
            let w = np_min(want[i], cap);
            want[i] = w;
            let v = !on_vf[i] && w > 0.0;
            vi[i] = v;
            any_vi |= v;
            demands[i] = w / pkt_bits[i];
        }
    }
    for h in 0..s.pps_limit.len() {
        let room = np_max(0.01, 1.0 - s.backend_vm_frac[h]);
        s.pps_limit[h] = p.virtio_pps_limit * s.pps_limit[h] * room;
    }
    s.backend_pps = vec![0.0; s.pps_limit.len()];
    if any_vi {
        let mut got = vec![0.0; n];
        let flows = Flows {
            demands: &demands,
            weights: None,
            member: Some(&vi),
        };
        waterfill::links_waterfill_threads(
            &s.pps_limit,
            layout,
            flows,
            true,
            n,
            &mut got,
            p.threads,
        )?;
        // the others got 0.0, which leaves each host's sum the same
        let (want, host, vi) = (&mut s.want[..n], &host[..n], &vi[..n]);
        for i in 0..n {
            if vi[i] {
                want[i] = got[i] * pkt_bits[i];
            }
            s.backend_pps[host[i]] += got[i];
        }
    }
    Ok(())
}

/// The PF's egress, shared with the migration streams, and what each host receives.
/// Fills `tx`, `rx`, the per-host sums and each migration's rate.
fn egress(
    vm: &ShareVms<'_>,
    hosts: &ShareHosts<'_>,
    mig: &Copying<'_>,
    host: &[usize],
    layout: &Layout<'_>,
    p: ShareParams,
    s: &mut Shared,
) -> Result<(), InputError> {
    let n = vm.want.len();
    let m = mig.src.len();
    let n_hosts = hosts.capacity.len();
    let mut got = vec![0.0; n + m];
    if vm.vf_min.iter().any(|&f| f != 0.0) || m > 0 {
        let groups: Vec<i64> = vm.host.iter().chain(mig.src).copied().collect();
        let demands: Vec<f64> = s.want.iter().chain(mig.cap).copied().collect();
        let weights: Vec<f64> = vm
            .weights
            .iter()
            .copied()
            .chain((0..m).map(|_| 1.0))
            .collect();
        if vm.vf_min.iter().any(|&f| f != 0.0) {
            // A VF's min_tx_rate (where the NIC honours it) is a floor: the VF gets its
            // floor or its fair share, whichever is larger (as the Sova allocator assumes).
            let floors: Vec<f64> = (0..n + m)
                .map(|i| {
                    if i < n && vm.on_vf[i] {
                        np_min(s.want[i], vm.vf_min[i])
                    } else {
                        0.0
                    }
                })
                .collect();
            waterfill::floored_waterfill(
                hosts.capacity,
                &groups,
                &demands,
                &weights,
                &floors,
                &mut got,
            )?;
        } else {
            let (order, start) = waterfill::layout_of(&groups, n_hosts)?;
            let grouped = Layout::new(&order, &start, n + m)?;
            let flows = Flows {
                demands: &demands,
                weights: Some(&weights),
                member: None,
            };
            let whole = waterfill::whole_weights(Some(&weights));
            waterfill::links_waterfill_threads(
                hosts.capacity,
                &grouped,
                flows,
                whole,
                n + m,
                &mut got,
                p.threads,
            )?;
        }
    } else {
        let flows = Flows {
            demands: &s.want,
            weights: Some(vm.weights),
            member: None,
        };
        waterfill::links_waterfill_threads(
            hosts.capacity,
            layout,
            flows,
            p.weights_whole,
            n,
            &mut got,
            p.threads,
        )?;
    }
    let mig_got = got[n..].to_vec();
    let mut tx = got;
    tx.truncate(n);
    // one pass: the files' caps, what each VM receives, each host's sums of both (in VM
    // index order, as `per_host`)
    let (rx_share, arrivals, req_bytes) =
        (&vm.rx_share[..n], &vm.arrivals[..n], &vm.req_bytes[..n]);
    let (file_left, is_file, host) = (&vm.file_left[..n], vm.is_file.map(|f| &f[..n]), &host[..n]);
    let mut rx = vec![0.0; n];
    let mut rx_host = vec![0.0; n_hosts];
    let mut tx_host = vec![0.0; n_hosts];
    for i in 0..n {
        if is_file.is_some_and(|f| f[i]) {
            tx[i] = np_min(tx[i], file_left[i] * 8.0 / p.dt);
        }
        let mut r = tx[i] * rx_share[i];
        if p.any_asks {
            // (without requests the term is 0.0 everywhere and rx is never -0.0)
            r += arrivals[i] * req_bytes[i] * 8.0 / p.dt;
        }
        rx[i] = r;
        rx_host[host[i]] += r;
        tx_host[host[i]] += tx[i];
    }
    s.rx = rx;
    s.tx = tx;
    s.rx_host = rx_host;
    s.mig_rate = Vec::with_capacity(m);
    for (&dst, &got) in mig.dst.iter().zip(&mig_got) {
        let dst = dst as usize;
        // Python's max(0.0, x) and min(a, b): the first unless the second is strictly
        // beyond it (NaN never is)
        let r = hosts.capacity[dst] - s.rx_host[dst];
        let room = if r > 0.0 { r } else { 0.0 };
        let rate = if room < got { room } else { got };
        s.mig_rate.push(rate);
        s.rx_host[dst] += rate;
    }
    s.tx_host = tx_host;
    s.tx_by_host = s.tx_host.clone();
    for k in 0..m {
        s.tx_host[mig.src[k] as usize] += s.mig_rate[k];
    }
    Ok(())
}

/// The request VMs: `idx[j]` is a VM with requests, `resp_bits[j]` its response's bits.
pub struct Requests<'a> {
    pub idx: &'a [i64],
    pub resp_bits: &'a [f64],
    /// bit/s each VM would send this tick
    pub offered: &'a [f64],
}

/// The profile's latency constants.
#[derive(Debug, Clone, Copy)]
pub struct LatencyParams {
    pub vf_latency: f64,
    pub virtio_latency: f64,
    pub sched_quantum: f64,
    pub request_round_trips: f64,
    pub request_fixed_latency: f64,
    pub guest_ns_per_request: f64,
    /// the server's own work on the request, queued at its vCPU, counts
    pub request_service_latency: bool,
}

/// Each request VM's response time, what it served and what waits, written in place
/// (every VM's `resp_s` and `served_req` zeroed first; `backlog_bits` only at the request
/// VMs).
pub struct Latencies<'a> {
    pub resp_s: &'a mut [f64],
    pub served_req: &'a mut [f64],
    pub backlog_bits: &'a mut [f64],
}

/// The latency of a request at each request VM, from this tick's sharing `s`: path
/// latency (virtio grows with backend load) + scheduling delay (one hop on a VF, two on
/// virtio) + transfer time at the rate the VM can get, stretched by link utilisation +
/// the backlog ahead of it; times the profile's round trips plus its fixed latency, and
/// the server's own work at its vCPU where the profile counts it.
pub fn latency(
    req: &Requests<'_>,
    vm: &ShareVms<'_>,
    hosts: &ShareHosts<'_>,
    s: &Shared,
    p: ShareParams,
    lp: LatencyParams,
    out: &mut Latencies<'_>,
) -> Result<(), InputError> {
    let n = vm.want.len();
    let m = req.idx.len();
    for (name, len) in [
        ("offered", req.offered.len()),
        ("resp_s", out.resp_s.len()),
        ("served_req", out.served_req.len()),
        ("backlog_bits", out.backlog_bits.len()),
    ] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    if req.resp_bits.len() != m {
        return Err(InputError(format!(
            "req_resp_bits: {} values for {m} request VMs",
            req.resp_bits.len()
        )));
    }
    if let Some((j, i)) = req
        .idx
        .iter()
        .enumerate()
        .find(|(_, i)| usize::try_from(**i).map_or(true, |i| i >= n))
    {
        return Err(InputError(format!("req_idx[{j}]: {i} outside 0..{n}")));
    }
    if lp.request_service_latency && s.vcpu_load.len() != n {
        return Err(InputError(
            "vcpu_load: not computed, the request service time needs it".into(),
        ));
    }
    out.resp_s.fill(0.0);
    out.served_req.fill(0.0);
    for (j, &i) in req.idx.iter().enumerate() {
        // (in range: checked above and in share)
        let i = i as usize;
        let h = vm.host[i] as usize;
        let resp_bits = req.resp_bits[j];
        let (cap, tx_host) = (hosts.capacity[h], s.tx_host[h]);
        // the rate this VM could get right now: what the others leave of the link
        let residual = np_max(cap - (tx_host - s.tx[i]), 1e3);
        let path_cap = if vm.on_vf[i] {
            vm.vf_max[i]
        } else {
            p.virtio_flow_limit
        };
        let service = np_min(residual, path_cap);
        let rho_link = np_min(0.99, tx_host / cap);
        let rho_b = np_min(0.99, s.backend_pps[h] / np_max(s.pps_limit[h], 1.0));
        let rho_c = np_min(0.99, s.host_need[h] / hosts.cores[h]);
        let sched = lp.sched_quantum * rho_c / (1.0 - rho_c);
        let mut path = if vm.on_vf[i] {
            lp.vf_latency + sched
        } else {
            lp.virtio_latency / (1.0 - rho_b) + 2.0 * sched
        };
        let transfer = resp_bits / service / (1.0 - rho_link);
        path = path * lp.request_round_trips + lp.request_fixed_latency;
        if lp.request_service_latency {
            let ns_pkt =
                p.guest_ns_per_packet + p.virtio_guest_ns_per_packet * one_if(!vm.on_vf[i]);
            let pkts = resp_bits * vm.pkts_per_bit[i];
            let s_req = (lp.guest_ns_per_request + pkts * ns_pkt) / 1e9;
            let s_req = s_req / np_max(s.host_scale_vm[i], 1e-3);
            let rho_v = np_min(0.99, s.vcpu_load[i]);
            path += s_req / (1.0 - rho_v);
        }
        // what could not be sent this tick waits; its delay is how long it takes to drain
        let sent = s.tx[i];
        let total_bits = req.offered[i] * p.dt;
        let backlog = np_max(0.0, total_bits - sent * p.dt);
        out.backlog_bits[i] = backlog;
        let wait = backlog / np_max(sent, 1e3) / 2.0;
        out.resp_s[i] = path + transfer + wait;
        out.served_req[i] = if resp_bits > 0.0 {
            np_min(total_bits, sent * p.dt) / resp_bits
        } else {
            0.0
        };
    }
    Ok(())
}

/// Each file transfer's bytes left after sending `tx` for `dt`, in place
/// (`max(0, left − tx·dt/8)` where `is_file`); returns the transfers that finished.
pub fn files(
    is_file: &[bool],
    tx: &[f64],
    dt: f64,
    file_left: &mut [f64],
) -> Result<Vec<i64>, InputError> {
    let n = file_left.len();
    for (name, len) in [("is_file", is_file.len()), ("tx", tx.len())] {
        if len != n {
            return Err(InputError(format!("{name}: {len} values for {n} VMs")));
        }
    }
    let mut done = Vec::new();
    for (i, _) in is_file.iter().enumerate().filter(|(_, f)| **f) {
        file_left[i] = np_max(0.0, file_left[i] - tx[i] * dt / 8.0);
        if file_left[i] <= 0.0 {
            done.push(i as i64);
        }
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::waterfill::layout_of;

    const INF: f64 = f64::INFINITY;

    struct World {
        host: Vec<i64>,
        want: Vec<f64>,
        on_vf: Vec<bool>,
        zeros: Vec<f64>,
        ones: Vec<f64>,
        falses: Vec<bool>,
        inf: Vec<f64>,
    }

    impl World {
        fn new(host: &[i64], want: &[f64], on_vf: &[bool]) -> Self {
            let n = host.len();
            Self {
                host: host.to_vec(),
                want: want.to_vec(),
                on_vf: on_vf.to_vec(),
                zeros: vec![0.0; n],
                ones: vec![1.0; n],
                falses: vec![false; n],
                inf: vec![INF; n],
            }
        }

        fn vms(&self) -> ShareVms<'_> {
            ShareVms {
                host: &self.host,
                want: &self.want,
                pkts_per_bit: &self.zeros,
                pkt_bits: &self.ones,
                on_vf: &self.on_vf,
                ns_per_byte: &self.zeros,
                arrival_cost: &self.zeros,
                cpu_frac: &self.zeros,
                cj: &self.ones,
                vcpus: &self.ones,
                paused: None,
                weights: &self.ones,
                link_clocked: &self.falses,
                vf_max: &self.inf,
                vf_min: &self.zeros,
                is_file: None,
                file_left: &self.zeros,
                rx_share: &self.zeros,
                arrivals: &self.zeros,
                req_bytes: &self.zeros,
            }
        }
    }

    fn params() -> ShareParams {
        ShareParams {
            dt: 1.0,
            guest_ns_per_packet: 0.0,
            virtio_guest_ns_per_packet: 0.0,
            virtio_host_ns_per_packet: 0.0,
            virtio_backend_ns_per_vm: 0.0,
            virtio_pps_limit: 100.0,
            virtio_flow_limit: INF,
            tcp_link_clocked: false,
            dedicated_backend: false,
            vcpu_load: false,
            weights_whole: true,
            any_asks: false,
            threads: 1,
        }
    }

    fn run(w: &World, capacity: &[f64], mig: &Copying<'_>) -> Result<Shared, InputError> {
        let n_hosts = capacity.len();
        let (order, start) = layout_of(&w.host, n_hosts)?;
        let layout = Layout::new(&order, &start, w.host.len())?;
        let cores = vec![4.0; n_hosts];
        let backend_cores = vec![0.0; n_hosts];
        let hosts = ShareHosts {
            capacity,
            cores: &cores,
            backend_cores: &backend_cores,
        };
        share(&w.vms(), &hosts, mig, &layout, params())
    }

    const NONE: Copying<'static> = Copying {
        src: &[],
        dst: &[],
        cap: &[],
    };

    #[test]
    fn the_pf_and_the_backend_are_shared_max_min() {
        // host 0's PF (10) between two VF senders of 8: 5 each. Host 1's two virtio VMs
        // want 80 and 10 packets/s of a backend of 100 pps: 80 and 10 fit; its PF (60)
        // then gives 10 and the rest 50 to the first.
        let w = World::new(
            &[0, 0, 1, 1],
            &[8.0, 8.0, 80.0, 10.0],
            &[true, true, false, false],
        );
        let s = run(&w, &[10.0, 60.0], &NONE).unwrap();
        assert_eq!(s.tx, [5.0, 5.0, 50.0, 10.0]);
        assert_eq!(s.tx_host, [10.0, 60.0]);
        assert_eq!(s.backend_pps, [0.0, 90.0]);
        assert_eq!(s.pps_limit, [100.0, 100.0]);
        assert_eq!(s.host_scale, [1.0, 1.0]);
    }

    #[test]
    fn a_migration_stream_shares_the_source_pf_and_the_target_ingress() {
        // host 0's PF (10): the VM (8) and the stream (cap 20) get 5 each; host 1 receives
        // nothing else, so the stream keeps its 5 (room 30), and host 0 sends 10.
        let w = World::new(&[0], &[8.0], &[true]);
        let mig = Copying {
            src: &[0],
            dst: &[1],
            cap: &[20.0],
        };
        let s = run(&w, &[10.0, 30.0], &mig).unwrap();
        assert_eq!(s.tx, [5.0]);
        assert_eq!(s.mig_rate, [5.0]);
        assert_eq!(s.tx_by_host, [5.0, 0.0]);
        assert_eq!(s.tx_host, [10.0, 0.0]);
        assert_eq!(s.rx_host, [0.0, 5.0]);
        // a target with 2 of ingress left takes only 2
        let s = run(&w, &[10.0, 2.0], &mig).unwrap();
        assert_eq!(s.mig_rate, [2.0]);
    }

    #[test]
    fn a_tick_is_the_same_bits_on_one_thread_or_several() {
        // 3,000 VMs over 150 hosts (spread, not grouped by host), VF and virtio senders
        // past their PFs and the backend's packet rate, a migration stream: the fills cut
        // into runs the threads share give every figure the same bits (Debug prints an
        // f64's shortest round trip: the same text, the same bits)
        let n = 3000;
        let hosts = 150;
        let x = |i: usize, a: f64| (i as f64 * a).fract();
        let host: Vec<i64> = (0..n).map(|i| ((i * 37) % hosts) as i64).collect();
        let want: Vec<f64> = (0..n).map(|i| 4.0 * x(i, 0.37)).collect();
        let on_vf: Vec<bool> = (0..n).map(|i| i % 3 == 0).collect();
        let w = World::new(&host, &want, &on_vf);
        let capacity: Vec<f64> = (0..hosts).map(|h| 10.0 + 40.0 * x(h, 0.61)).collect();
        let (order, start) = layout_of(&host, hosts).unwrap();
        let layout = Layout::new(&order, &start, n).unwrap();
        let cores = vec![4.0; hosts];
        let backend_cores = vec![0.0; hosts];
        let h = ShareHosts {
            capacity: &capacity,
            cores: &cores,
            backend_cores: &backend_cores,
        };
        let mig = Copying {
            src: &[3, 70],
            dst: &[5, 1],
            cap: &[20.0, 7.0],
        };
        let tick = |threads| {
            let p = ShareParams {
                threads,
                ..params()
            };
            share(&w.vms(), &h, &mig, &layout, p)
        };
        let one = tick(1).unwrap();
        for threads in [2, 3] {
            let got = tick(threads).unwrap();
            assert_eq!(format!("{one:?}"), format!("{got:?}"), "{threads} threads");
        }
        // contended: some VM got less than it wanted, on a PF and on the backend
        assert!((0..n).any(|i| on_vf[i] && one.tx[i] < 0.99 * want[i]));
        assert!((0..n).any(|i| !on_vf[i] && one.tx[i] < 0.99 * want[i]));
        assert_eq!(
            tick(0).unwrap_err().0,
            "threads: 0, not a count of threads >= 1"
        );
    }

    #[test]
    fn bad_input_names_the_field() {
        let w = World::new(&[0, 3], &[1.0, 1.0], &[true, true]);
        let (order, start) = layout_of(&[0, 0], 1).unwrap();
        let layout = Layout::new(&order, &start, 2).unwrap();
        let one = [1.0];
        let hosts = ShareHosts {
            capacity: &one,
            cores: &one,
            backend_cores: &one,
        };
        let e = share(&w.vms(), &hosts, &NONE, &layout, params()).unwrap_err();
        assert_eq!(e.0, "host[1]: 3 outside 0..1");
    }

    #[test]
    fn file_transfers_count_down_and_finish() {
        // 8 bit/s for 2 s is 2 bytes: 5 -> 3 left, 1 -> 0 (finished); not a file: untouched
        let mut left = [5.0, 1.0, 7.0];
        let done = files(&[true, true, false], &[8.0, 8.0, 8.0], 2.0, &mut left).unwrap();
        assert_eq!(left, [3.0, 0.0, 7.0]);
        assert_eq!(done, [1]);
    }
}
