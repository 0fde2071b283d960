//! Load shares: each host's (cpu, mem, net) utilisation over a period and each VM's share
//! of its host's capacity, the numbers the manager's hotspot detection judges
//! (docs/design.md#hotspots), for one host (the agent) or every host of a fleet (the
//! simulator) at once.

use crate::waterfill::InputError;

/// Nanoseconds per second: CPU counters are in ns.
const NS: f64 = 1e9;

/// `min(1, x)` as numpy's `minimum(1.0, x)` gives it: a NaN stays NaN (only a period
/// that is not valid can make one, and its share is not read).
fn at_most_one(x: f64) -> f64 {
    if x > 1.0 { 1.0 } else { x }
}

/// One period's counter differences. Each is a whole number, exact as f64 when computed
/// from integers (the agent) or from floats below 2^53 (the simulator): the divisions
/// below then round as the per-host form's integer-over-float ones do.
pub struct Period<'a> {
    /// The period's length in seconds; not above 0 makes no share valid.
    pub dt: f64,
    /// Per host (3 rows of `hosts` values): cpu busy ns, NIC rx bytes, NIC tx bytes.
    pub d_totals: &'a [f64],
    /// Per VM (6 rows of `vms` values): cpu ns, steal ns, rx bytes, tx bytes, rx and tx packets.
    pub d_counters: &'a [f64],
    /// VMs not on their host at the period's start (their host has no earlier reading).
    pub moved: &'a [bool],
    /// Each VM's host index.
    pub host: &'a [i64],
    /// Each VM's memory in use, bytes.
    pub vm_memory: &'a [f64],
    /// Each host's memory in use, bytes; None: the sum of its VMs' in index order, truncated.
    pub host_memory: Option<&'a [f64]>,
}

/// Each host's size: cores, memory bytes, NIC capacity bit/s (0 for memory or capacity: no share).
pub struct Hosts<'a> {
    pub cores: &'a [f64],
    pub memory: &'a [f64],
    pub capacity: &'a [f64],
}

/// The shares, one vector per resource; `*_ok` false where the per-host form gives no
/// share (a counter went back, the VM moved, or `dt` ≤ 0).
#[derive(Debug, Default, PartialEq)]
pub struct Shares {
    pub host_cpu: Vec<f64>,
    pub host_mem: Vec<f64>,
    pub host_net: Vec<f64>,
    pub host_ok: Vec<bool>,
    pub vm_cpu: Vec<f64>,
    pub vm_mem: Vec<f64>,
    pub vm_net: Vec<f64>,
    pub vm_ok: Vec<bool>,
}

fn check_len(name: &str, len: usize, want: usize, what: &str) -> Result<(), InputError> {
    if len != want {
        return Err(InputError(format!(
            "{name}: {len} values for {want} {what}"
        )));
    }
    Ok(())
}

/// Every host's and VM's load shares over one period.
pub fn load_shares(p: &Period<'_>, hosts: &Hosts<'_>) -> Result<Shares, InputError> {
    let nh = hosts.cores.len();
    let n = p.host.len();
    check_len("memory", hosts.memory.len(), nh, "hosts")?;
    check_len("capacity", hosts.capacity.len(), nh, "hosts")?;
    check_len(
        "d_totals",
        p.d_totals.len(),
        3 * nh,
        "host counters (3 x hosts)",
    )?;
    check_len(
        "d_counters",
        p.d_counters.len(),
        6 * n,
        "VM counters (6 x VMs)",
    )?;
    check_len("moved", p.moved.len(), n, "VMs")?;
    check_len("vm_memory", p.vm_memory.len(), n, "VMs")?;
    if let Some(m) = p.host_memory {
        check_len("host_memory", m.len(), nh, "hosts")?;
    }
    if let Some(&h) = p.host.iter().find(|&&h| h < 0 || h as usize >= nh) {
        return Err(InputError(format!("host: index {h} outside 0..{nh}")));
    }
    let dt = p.dt;
    let valid_dt = dt > 0.0;
    let cap_ns: Vec<f64> = hosts.cores.iter().map(|&c| dt * NS * c).collect();
    let used = match p.host_memory {
        Some(m) => m.to_vec(),
        None => {
            let mut used = vec![0.0; nh];
            for (&h, &m) in p.host.iter().zip(p.vm_memory) {
                used[h as usize] += m;
            }
            used.iter_mut().for_each(|u| *u = u.trunc());
            used
        }
    };
    let (cpu, rx, tx) = (
        &p.d_totals[..nh],
        &p.d_totals[nh..2 * nh],
        &p.d_totals[2 * nh..],
    );
    let mut s = Shares::default();
    for h in 0..nh {
        let (mem, cap) = (hosts.memory[h], hosts.capacity[h]);
        s.host_ok
            .push(valid_dt && cpu[h] >= 0.0 && rx[h] >= 0.0 && tx[h] >= 0.0);
        s.host_cpu.push(at_most_one(cpu[h] / cap_ns[h]));
        s.host_mem.push(if mem > 0.0 {
            at_most_one(used[h] / mem)
        } else {
            0.0
        });
        s.host_net.push(if cap > 0.0 {
            at_most_one(8.0 * rx[h].max(tx[h]) / (dt * cap))
        } else {
            0.0
        });
    }
    let row = |r: usize| &p.d_counters[r * n..(r + 1) * n];
    let (v_cpu, v_rx, v_tx) = (row(0), row(2), row(3));
    for i in 0..n {
        let h = p.host[i] as usize;
        let (mem, cap) = (hosts.memory[h], hosts.capacity[h]);
        let reset = (0..6).any(|r| p.d_counters[r * n + i] < 0.0);
        s.vm_ok.push(valid_dt && !p.moved[i] && !reset);
        s.vm_cpu.push(at_most_one(v_cpu[i] / cap_ns[h]));
        s.vm_mem.push(if mem > 0.0 {
            at_most_one(p.vm_memory[i] / mem)
        } else {
            0.0
        });
        s.vm_net.push(if cap > 0.0 {
            at_most_one(8.0 * v_rx[i].max(v_tx[i]) / (dt * cap))
        } else {
            0.0
        });
    }
    Ok(s)
}

/// Each censored VM's unmet demand (its demand estimate above its latest rate, as a share
/// of its host's link) added to its own net share and its host's, at most 1
/// (docs/design.md#demand-hotspots). A VM without a share this period (`vm_ok` false), a
/// VM not censored and a host without a link size add nothing. `host_net` and `vm_net`
/// are changed in place; the extra of a host is summed in VM index order from 0.
#[allow(clippy::too_many_arguments)] // one column per VM field, two shares changed in place
pub fn demand_loads(
    host: &[i64],
    censored: &[bool],
    demand_est_bps: &[f64],
    last_rate_bps: &[f64],
    vm_ok: &[bool],
    capacity: &[f64],
    host_net: &mut [f64],
    vm_net: &mut [f64],
) -> Result<(), InputError> {
    let (n, nh) = (host.len(), capacity.len());
    check_len("censored", censored.len(), n, "VMs")?;
    check_len("demand_est_bps", demand_est_bps.len(), n, "VMs")?;
    check_len("last_rate_bps", last_rate_bps.len(), n, "VMs")?;
    check_len("vm_ok", vm_ok.len(), n, "VMs")?;
    check_len("vm_net", vm_net.len(), n, "VMs")?;
    check_len("host_net", host_net.len(), nh, "hosts")?;
    if let Some(&h) = host.iter().find(|&&h| h < 0 || h as usize >= nh) {
        return Err(InputError(format!("host: index {h} outside 0..{nh}")));
    }
    let mut extra = vec![0.0; nh];
    for i in 0..n {
        let h = host[i] as usize;
        let cap = capacity[h];
        if !(censored[i] && vm_ok[i] && cap > 0.0) {
            continue;
        }
        let unmet = (demand_est_bps[i] - last_rate_bps[i]).max(0.0) / cap;
        if unmet > 0.0 {
            vm_net[i] = at_most_one(vm_net[i] + unmet);
            extra[h] += unmet;
        }
    }
    for (net, e) in host_net.iter_mut().zip(extra) {
        if e > 0.0 {
            *net = at_most_one(*net + e);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_of_two_hosts() {
        // host 0: 4 cores, 2 s -> 8e9 ns of CPU; 2e9 busy = 0.25. NIC 10 Gbit/s: tx 1.25e9 B
        // in 2 s = 5 Gbit/s = 0.5 (the busier direction). 16 GiB, its two VMs use 4 + 4 GiB
        // = 0.5. host 1: a counter went back (rx), no memory or NIC size: shares 0.
        let gib = 1024.0 * 1024.0 * 1024.0;
        let p = Period {
            dt: 2.0,
            d_totals: &[2e9, 5e9, 1e6, -5.0, 1.25e9, 0.0],
            // vm0 and vm1 on host 0, vm2 on host 1; vm1's steal went back, vm2 moved
            d_counters: &[
                1e9, 16e9, 0.0, // cpu ns: vm0 0.125 of its host; vm1 2.0 clamps to 1
                0.0, -1.0, 0.0, // steal
                2.5e9, 0.0, 0.0, // rx: vm0 10 Gbit/s -> 1
                0.0, 0.0, 0.0, // tx
                0.0, 0.0, 0.0, 0.0, 0.0, 0.0, // packets
            ],
            moved: &[false, false, true],
            host: &[0, 0, 1],
            vm_memory: &[4.0 * gib, 4.0 * gib, 1.0],
            host_memory: None,
        };
        let hosts = Hosts {
            cores: &[4.0, 2.0],
            memory: &[16.0 * gib, 0.0],
            capacity: &[10e9, 0.0],
        };
        let s = load_shares(&p, &hosts).unwrap();
        assert_eq!(s.host_ok, [true, false]);
        assert_eq!(s.host_cpu[0], 0.25);
        assert_eq!(s.host_mem, [0.5, 0.0]);
        assert_eq!(s.host_net, [0.5, 0.0]);
        assert_eq!(s.vm_ok, [true, false, false]);
        assert_eq!(s.vm_cpu[..2], [0.125, 1.0]);
        assert_eq!(s.vm_mem, [0.25, 0.25, 0.0]);
        assert_eq!(s.vm_net, [1.0, 0.0, 0.0]);
    }

    #[test]
    fn a_period_of_no_length_gives_no_share() {
        let p = Period {
            dt: 0.0,
            d_totals: &[0.0, 0.0, 0.0],
            d_counters: &[0.0; 6],
            moved: &[false],
            host: &[0],
            vm_memory: &[1.0],
            host_memory: Some(&[3.0]),
        };
        let hosts = Hosts {
            cores: &[1.0],
            memory: &[4.0],
            capacity: &[1.0],
        };
        let s = load_shares(&p, &hosts).unwrap();
        assert_eq!((s.host_ok[0], s.vm_ok[0]), (false, false));
        assert_eq!(s.host_mem[0], 0.75); // the given host memory, not the VMs' sum
    }

    #[test]
    fn bad_shapes_and_indices_are_named() {
        let hosts = Hosts {
            cores: &[1.0],
            memory: &[1.0],
            capacity: &[1.0],
        };
        let mut p = Period {
            dt: 1.0,
            d_totals: &[0.0, 0.0, 0.0],
            d_counters: &[0.0; 6],
            moved: &[false],
            host: &[1],
            vm_memory: &[1.0],
            host_memory: None,
        };
        assert_eq!(
            load_shares(&p, &hosts).unwrap_err().0,
            "host: index 1 outside 0..1"
        );
        p.host = &[0];
        p.d_counters = &[0.0; 5];
        assert_eq!(
            load_shares(&p, &hosts).unwrap_err().0,
            "d_counters: 5 values for 6 VM counters (6 x VMs)"
        );
    }

    #[test]
    fn unmet_demand_of_censored_vms_adds_to_their_shares() {
        // a 10 Gbit/s link: vm0 censored, wants 3 Gbit/s, got 2: +0.1 on 0.2 -> 0.3000...;
        // vm1 censored, wants 9, got 1: +0.8 on 0.5 -> 1 (capped); vm2 not censored;
        // vm3 censored but without a share this period. Host 0: 0.7 + 0.1 + 0.8 -> 1.
        // Host 1 has no link size: nothing added to vm4 or to it.
        let mut host_net = [0.7, 0.4];
        let mut vm_net = [0.2, 0.5, 0.3, 0.1, 0.4];
        demand_loads(
            &[0, 0, 0, 0, 1],
            &[true, true, false, true, true],
            &[3e9, 9e9, 8e9, 8e9, 8e9],
            &[2e9, 1e9, 1e9, 1e9, 1e9],
            &[true, true, true, false, true],
            &[10e9, 0.0],
            &mut host_net,
            &mut vm_net,
        )
        .unwrap();
        assert_eq!(vm_net, [0.2 + 0.1, 1.0, 0.3, 0.1, 0.4]);
        assert_eq!(host_net, [1.0, 0.4]);
    }
}
