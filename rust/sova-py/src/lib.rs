//! `sova.policy._core`: sova-core's kernels for Python.
//!
//! Arrays come in as numpy views (read-only, C-contiguous, no copy), the work runs with the
//! GIL released, and each result is a new numpy array that takes over the Rust vector's
//! buffer. The typed facades in `sova.policy` are the only callers; they shape the inputs
//! (dtype, contiguity) so errors here are programming errors, reported as ValueError with
//! the field and the value.

use numpy::{PyArray1, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use sova_core::allocate;
use sova_core::bandwidth;
use sova_core::coldspots::{self, Movers, Query, Ranked};
use sova_core::hotness::{self, Metric};
use sova_core::loads::{self, Hosts, Period};
use sova_core::metering;
use sova_core::rng;
use sova_core::sensing::{self, Params};
use sova_core::share::{
    self, Copying, Latencies, LatencyParams, Requests, ShareHosts, ShareParams, ShareVms,
};
use sova_core::stats::{self, Guarantees, Sums};
use sova_core::sum;
use sova_core::tick::{self, CountParams, Counters, HostTick, VmTick};
use sova_core::verdicts::{self, Windows};
use sova_core::vfsched;
use sova_core::waterfill::{self, Flows, InputError, Layout};

fn value_error(e: InputError) -> PyErr {
    PyValueError::new_err(e.0)
}

fn slice<'a, T: numpy::Element>(name: &str, a: &'a PyReadonlyArray1<'_, T>) -> PyResult<&'a [T]> {
    a.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{name}: not a C-contiguous array")))
}

fn slice_mut<'a>(name: &str, a: &'a mut PyReadwriteArray1<'_, f64>) -> PyResult<&'a mut [f64]> {
    a.as_slice_mut()
        .map_err(|_| PyValueError::new_err(format!("{name}: not a C-contiguous array")))
}

/// Each named array argument borrowed as a slice under its own name, refused by that name
/// when it is not C-contiguous: a kernel's binding lists its arrays once.
macro_rules! slices {
    ($($name:ident),+ $(,)?) => {
        $(let $name = slice(stringify!($name), &$name)?;)+
    };
}

/// [`slices!`] for optional arrays (None stays None).
macro_rules! optional_slices {
    ($($name:ident),+ $(,)?) => {
        $(let $name = $name.as_ref().map(|a| slice(stringify!($name), a)).transpose()?;)+
    };
}

/// [`slices!`] for the arrays a kernel advances in place.
macro_rules! slices_mut {
    ($($name:ident),+ $(,)?) => {
        $(let $name = slice_mut(stringify!($name), &mut $name)?;)+
    };
}

/// Each vector handed to numpy as a new array that takes over its buffer, in a tuple as
/// Python unpacks it.
macro_rules! arrays {
    ($py:expr; $($v:expr),+ $(,)?) => {
        ($(PyArray1::from_vec($py, $v),)+)
    };
}

/// A kernel run with the GIL released; what it refuses is a ValueError.
fn detached<T: Send>(
    py: Python<'_>,
    kernel: impl Send + FnOnce() -> Result<T, InputError>,
) -> PyResult<T> {
    py.detach(kernel).map_err(value_error)
}

/// A per-flow kernel over the links of `order`/`start` (`n` flows), detached: what it
/// writes into a zeroed value per flow, as a new array.
fn per_flow<'py>(
    py: Python<'py>,
    order: &[i64],
    start: &[i64],
    n: usize,
    kernel: impl Send + FnOnce(&Layout<'_>, &mut [f64]) -> Result<(), InputError>,
) -> PyResult<F64Array<'py>> {
    let out = detached(py, || {
        let layout = Layout::new(order, start, n)?;
        let mut out = vec![0.0; n];
        kernel(&layout, &mut out)?;
        Ok(out)
    })?;
    Ok(PyArray1::from_vec(py, out))
}

/// Water-fill every link at once: link `h`'s flows are `order[start[h]:start[h + 1]]`.
/// `whole`: whether every weight is a whole number (checked here when None). Flows outside
/// the layout or not in `member` get 0.
#[pyfunction]
#[pyo3(signature = (capacity, order, start, demands, weights=None, member=None, whole=None))]
#[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
fn links_waterfill<'py>(
    py: Python<'py>,
    capacity: PyReadonlyArray1<'py, f64>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    demands: PyReadonlyArray1<'py, f64>,
    weights: Option<PyReadonlyArray1<'py, f64>>,
    member: Option<PyReadonlyArray1<'py, bool>>,
    whole: Option<bool>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    slices! { capacity, order, start, demands }
    optional_slices! { weights, member }
    let flows = Flows {
        demands,
        weights,
        member,
    };
    per_flow(py, order, start, demands.len(), |layout, out| {
        let whole = whole.unwrap_or_else(|| waterfill::whole_weights(weights));
        waterfill::links_waterfill(capacity, layout, flows, whole, out.len(), out)
    })
}

/// `math.fsum` of each link's flows: link `h`'s are `values[order[start[h]:start[h + 1]]]`.
#[pyfunction]
fn links_fsum<'py>(
    py: Python<'py>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    values: PyReadonlyArray1<'py, f64>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    slices! { order, start, values }
    let out = detached(py, || {
        let layout = Layout::new(order, start, values.len())?;
        let mut out = vec![0.0; layout.links()];
        sum::links_fsum(&layout, values, &mut out)?;
        Ok(out)
    })?;
    Ok(PyArray1::from_vec(py, out))
}

/// One tick's counters, advanced in place (`cpu_ns` .. `h_rx_b`), and its figures: (each
/// VM's CPU use, each host's CPU and link utilisation). `paused`: None when no VM is.
#[pyfunction]
#[pyo3(signature = (
    host, tx, rx, pkts_per_bit, ns_pkt, ns_per_byte, cpu_busy, arrival_cost, host_scale_vm,
    vcpus, need, virt, pkt_bits, paused,
    backend_vm_frac, tx_host, rx_host, host_need, cores, capacity,
    cpu_ns, steal_ns, tx_b, rx_b, tx_pk, rx_pk, h_cpu_ns, h_tx_b, h_rx_b,
    dt, virtio_host_ns_per_packet, ack_bits, steal, threads=1,
))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature, one array per argument
fn tick_count<'py>(
    py: Python<'py>,
    host: PyReadonlyArray1<'py, i64>,
    tx: PyReadonlyArray1<'py, f64>,
    rx: PyReadonlyArray1<'py, f64>,
    pkts_per_bit: PyReadonlyArray1<'py, f64>,
    ns_pkt: PyReadonlyArray1<'py, f64>,
    ns_per_byte: PyReadonlyArray1<'py, f64>,
    cpu_busy: PyReadonlyArray1<'py, f64>,
    arrival_cost: PyReadonlyArray1<'py, f64>,
    host_scale_vm: PyReadonlyArray1<'py, f64>,
    vcpus: PyReadonlyArray1<'py, f64>,
    need: PyReadonlyArray1<'py, f64>,
    virt: PyReadonlyArray1<'py, bool>,
    pkt_bits: PyReadonlyArray1<'py, f64>,
    paused: Option<PyReadonlyArray1<'py, bool>>,
    backend_vm_frac: PyReadonlyArray1<'py, f64>,
    tx_host: PyReadonlyArray1<'py, f64>,
    rx_host: PyReadonlyArray1<'py, f64>,
    host_need: PyReadonlyArray1<'py, f64>,
    cores: PyReadonlyArray1<'py, f64>,
    capacity: PyReadonlyArray1<'py, f64>,
    mut cpu_ns: PyReadwriteArray1<'py, f64>,
    mut steal_ns: PyReadwriteArray1<'py, f64>,
    mut tx_b: PyReadwriteArray1<'py, f64>,
    mut rx_b: PyReadwriteArray1<'py, f64>,
    mut tx_pk: PyReadwriteArray1<'py, f64>,
    mut rx_pk: PyReadwriteArray1<'py, f64>,
    mut h_cpu_ns: PyReadwriteArray1<'py, f64>,
    mut h_tx_b: PyReadwriteArray1<'py, f64>,
    mut h_rx_b: PyReadwriteArray1<'py, f64>,
    dt: f64,
    virtio_host_ns_per_packet: f64,
    ack_bits: f64,
    steal: bool,
    threads: usize,
) -> PyResult<(F64Array<'py>, F64Array<'py>, F64Array<'py>)> {
    slices! {
        host, tx, rx, pkts_per_bit, ns_pkt, ns_per_byte, cpu_busy, arrival_cost, host_scale_vm,
        vcpus, need, virt, pkt_bits,
    }
    optional_slices! { paused }
    slices! { backend_vm_frac, tx_host, rx_host, host_need, cores, capacity }
    slices_mut! { cpu_ns, steal_ns, tx_b, rx_b, tx_pk, rx_pk, h_cpu_ns, h_tx_b, h_rx_b }
    let vm = VmTick {
        host,
        tx,
        rx,
        pkts_per_bit,
        ns_pkt,
        ns_per_byte,
        cpu_busy,
        arrival_cost,
        host_scale_vm,
        vcpus,
        need,
        virt,
        pkt_bits,
        paused,
    };
    let hosts = HostTick {
        backend_vm_frac,
        tx_host,
        rx_host,
        host_need,
        cores,
        capacity,
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
    let p = CountParams {
        dt,
        virtio_host_ns_per_packet,
        ack_bits,
        steal,
        threads,
    };
    let f = detached(py, || tick::count(&vm, &hosts, &mut c, p))?;
    Ok(arrays!(py; f.cpu_use, f.host_cpu_util, f.host_net_util))
}

/// One tick added to the world's run statistics in place; see sova_core::stats::accumulate.
/// `pos`, `guarantee`, `held`: all three or none (no VM has a guarantee).
#[pyfunction]
#[pyo3(signature = (
    tx, rx, tx_by_host, served_req, resp_s, offered, pos, guarantee, held, edges,
    tx_bits, rx_bits, host_tx_bits, req_weight, req_time, resp_hist, guar_intervals, guar_met,
    dt, measure,
))]
#[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
fn tick_stats(
    tx: PyReadonlyArray1<'_, f64>,
    rx: PyReadonlyArray1<'_, f64>,
    tx_by_host: PyReadonlyArray1<'_, f64>,
    served_req: PyReadonlyArray1<'_, f64>,
    resp_s: PyReadonlyArray1<'_, f64>,
    offered: PyReadonlyArray1<'_, f64>,
    pos: Option<PyReadonlyArray1<'_, bool>>,
    guarantee: Option<PyReadonlyArray1<'_, f64>>,
    held: Option<PyReadonlyArray1<'_, f64>>,
    edges: PyReadonlyArray1<'_, f64>,
    mut tx_bits: PyReadwriteArray1<'_, f64>,
    mut rx_bits: PyReadwriteArray1<'_, f64>,
    mut host_tx_bits: PyReadwriteArray1<'_, f64>,
    mut req_weight: PyReadwriteArray1<'_, f64>,
    mut req_time: PyReadwriteArray1<'_, f64>,
    mut resp_hist: PyReadwriteArray1<'_, f64>,
    mut guar_intervals: PyReadwriteArray1<'_, f64>,
    mut guar_met: PyReadwriteArray1<'_, f64>,
    dt: f64,
    measure: bool,
) -> PyResult<()> {
    slices! { tx, rx, tx_by_host, served_req, resp_s, offered, edges }
    optional_slices! { pos, guarantee, held }
    slices_mut! {
        tx_bits, rx_bits, host_tx_bits, req_weight, req_time, resp_hist, guar_intervals,
        guar_met,
    }
    let g = match (pos, guarantee, held) {
        (Some(pos), Some(guarantee), Some(held)) => Some(Guarantees {
            pos,
            guarantee,
            held,
        }),
        (None, None, None) => None,
        _ => {
            return Err(PyValueError::new_err(
                "pos, guarantee, held: all three or none",
            ));
        }
    };
    let t = stats::Tick {
        tx,
        rx,
        tx_by_host,
        served_req,
        resp_s,
        offered,
    };
    let mut s = Sums {
        tx_bits,
        rx_bits,
        host_tx_bits,
        req_weight,
        req_time,
        resp_hist,
        guar_intervals,
        guar_met,
    };
    // a few microseconds of work: not worth releasing the GIL for
    stats::accumulate(&t, g.as_ref(), edges, dt, measure, &mut s).map_err(value_error)
}

/// One tick's offered load: the duty cycles (renewed in place), the draws, each VM's
/// offer; see sova_core::tick::offer. `threads`: how many share the VMs (the same bits
/// for any number).
#[pyfunction]
#[pyo3(signature = (
    net_start, net_len, net_live, net_duty, net_frac,
    cpu_start, cpu_len, cpu_live, cpu_duty, cpu_frac,
    rate, streams, streamy, resp_bytes, backlog_bits, is_req, is_file, ingress_limit,
    ingress_div, asks, ask_means,
    seed, tick, t0, t1, cycle_min, cycle_max, rate_jitter, cpu_jitter, any_req,
    guest_ns_per_request, threads=1,
))]
#[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
#[allow(clippy::type_complexity)] // six arrays, as Python unpacks them
fn tick_offer<'py>(
    py: Python<'py>,
    mut net_start: PyReadwriteArray1<'py, f64>,
    mut net_len: PyReadwriteArray1<'py, f64>,
    net_live: PyReadonlyArray1<'py, i64>,
    net_duty: PyReadonlyArray1<'py, f64>,
    mut net_frac: PyReadwriteArray1<'py, f64>,
    mut cpu_start: PyReadwriteArray1<'py, f64>,
    mut cpu_len: PyReadwriteArray1<'py, f64>,
    cpu_live: PyReadonlyArray1<'py, i64>,
    cpu_duty: PyReadonlyArray1<'py, f64>,
    mut cpu_frac: PyReadwriteArray1<'py, f64>,
    rate: PyReadonlyArray1<'py, f64>,
    streams: PyReadonlyArray1<'py, f64>,
    streamy: PyReadonlyArray1<'py, bool>,
    resp_bytes: PyReadonlyArray1<'py, f64>,
    backlog_bits: PyReadonlyArray1<'py, f64>,
    is_req: PyReadonlyArray1<'py, bool>,
    is_file: Option<PyReadonlyArray1<'py, bool>>,
    ingress_limit: Option<PyReadonlyArray1<'py, f64>>,
    ingress_div: Option<PyReadonlyArray1<'py, f64>>,
    asks: PyReadonlyArray1<'py, i64>,
    ask_means: PyReadonlyArray1<'py, f64>,
    seed: u64,
    tick: u64,
    t0: f64,
    t1: f64,
    cycle_min: f64,
    cycle_max: f64,
    rate_jitter: f64,
    cpu_jitter: f64,
    any_req: bool,
    guest_ns_per_request: f64,
    threads: usize,
) -> PyResult<(
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
)> {
    slices! { net_live, net_duty, cpu_live, cpu_duty }
    slices! { rate, streams, streamy, resp_bytes, backlog_bits, is_req, asks, ask_means }
    optional_slices! { is_file, ingress_limit, ingress_div }
    slices_mut! { net_start, net_len, net_frac, cpu_start, cpu_len, cpu_frac }
    let net = tick::Cycles {
        start: net_start,
        length: net_len,
        live: net_live,
        duty: net_duty,
        frac: net_frac,
    };
    let cpu = tick::Cycles {
        start: cpu_start,
        length: cpu_len,
        live: cpu_live,
        duty: cpu_duty,
        frac: cpu_frac,
    };
    let load = tick::Load {
        rate,
        streams,
        streamy,
        resp_bytes,
        backlog_bits,
        is_req,
        is_file,
        ingress: ingress_limit.zip(ingress_div),
        asks,
        ask_means,
    };
    let p = tick::OfferParams {
        seed,
        tick,
        t0,
        t1,
        cycle_min,
        cycle_max,
        rate_jitter,
        cpu_jitter,
        any_req,
        guest_ns_per_request,
        threads,
    };
    let got = detached(py, || tick::offer(net, cpu, &load, p))?;
    Ok(arrays!(py; got.offered, got.jit, got.cj, got.arrivals, got.req_bits, got.arrival_cost))
}

/// One tick's per-VM draws: rate jitter, CPU jitter, Poisson arrivals of VMs `asks`.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python signature
fn tick_draws<'py>(
    py: Python<'py>,
    seed: u64,
    tick: u64,
    n: usize,
    rate_jitter: f64,
    cpu_jitter: f64,
    asks: PyReadonlyArray1<'py, i64>,
    means: PyReadonlyArray1<'py, f64>,
) -> PyResult<(F64Array<'py>, F64Array<'py>, F64Array<'py>)> {
    slices! { asks, means }
    let got = detached(py, || {
        rng::tick_draws(seed, tick, n, rate_jitter, cpu_jitter, asks, means)
    })?;
    Ok(arrays!(py; got.jit, got.cj, got.arrivals))
}

/// Uniform draw `draw` of `stream` for each VM `vms[j]` at its `counters[j]`.
#[pyfunction]
fn uniforms<'py>(
    py: Python<'py>,
    seed: u64,
    stream: u64,
    vms: PyReadonlyArray1<'py, i64>,
    counters: PyReadonlyArray1<'py, i64>,
    draw: u64,
) -> PyResult<F64Array<'py>> {
    slices! { vms, counters }
    let out = detached(py, || rng::uniforms(seed, stream, vms, counters, draw))?;
    Ok(PyArray1::from_vec(py, out))
}

/// Water-fill where flow `i` gets at least `floors[i]` (up to its demand); `group[i]` is
/// the link flow `i` crosses.
#[pyfunction]
fn floored_waterfill<'py>(
    py: Python<'py>,
    capacity: PyReadonlyArray1<'py, f64>,
    group: PyReadonlyArray1<'py, i64>,
    demands: PyReadonlyArray1<'py, f64>,
    weights: PyReadonlyArray1<'py, f64>,
    floors: PyReadonlyArray1<'py, f64>,
) -> PyResult<Bound<'py, PyArray1<f64>>> {
    slices! { capacity, group, demands, weights, floors }
    let out = detached(py, || {
        let mut out = vec![0.0; demands.len()];
        waterfill::floored_waterfill(capacity, group, demands, weights, floors, &mut out)?;
        Ok(out)
    })?;
    Ok(PyArray1::from_vec(py, out))
}

/// Each VM's (valid, bit/s, mean packet bytes) between two readings of its counters.
#[pyfunction]
#[allow(clippy::type_complexity)] // three arrays, as Python unpacks them
fn measure<'py>(
    py: Python<'py>,
    prev_tx: PyReadonlyArray1<'py, f64>,
    prev_pk: PyReadonlyArray1<'py, f64>,
    tx: PyReadonlyArray1<'py, f64>,
    pk: PyReadonlyArray1<'py, f64>,
    dt: f64,
) -> PyResult<(
    Bound<'py, PyArray1<bool>>,
    Bound<'py, PyArray1<f64>>,
    Bound<'py, PyArray1<f64>>,
)> {
    slices! { prev_tx, prev_pk, tx, pk }
    let (valid, bps, pkt) = detached(py, || {
        let n = tx.len();
        let (mut valid, mut bps, mut pkt) = (vec![false; n], vec![0.0; n], vec![0.0; n]);
        metering::measure(prev_tx, prev_pk, tx, pk, dt, &mut valid, &mut bps, &mut pkt)?;
        Ok((valid, bps, pkt))
    })?;
    Ok(arrays!(py; valid, bps, pkt))
}

type F64Array<'py> = Bound<'py, PyArray1<f64>>;
type BoolArray<'py> = Bound<'py, PyArray1<bool>>;

/// Every host's and VM's load shares over one period, from the period's counter
/// differences: (host cpu, mem, net, ok, VM cpu, mem, net, ok).
#[pyfunction]
#[pyo3(signature = (dt, d_totals, d_counters, moved, host, vm_memory, cores, memory, capacity, host_memory=None))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature, one array per argument
fn load_shares<'py>(
    py: Python<'py>,
    dt: f64,
    d_totals: PyReadonlyArray1<'py, f64>,
    d_counters: PyReadonlyArray1<'py, f64>,
    moved: PyReadonlyArray1<'py, bool>,
    host: PyReadonlyArray1<'py, i64>,
    vm_memory: PyReadonlyArray1<'py, f64>,
    cores: PyReadonlyArray1<'py, f64>,
    memory: PyReadonlyArray1<'py, f64>,
    capacity: PyReadonlyArray1<'py, f64>,
    host_memory: Option<PyReadonlyArray1<'py, f64>>,
) -> PyResult<(
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    BoolArray<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    BoolArray<'py>,
)> {
    slices! { d_totals, d_counters, moved, host, vm_memory, cores, memory, capacity }
    optional_slices! { host_memory }
    let period = Period {
        dt,
        d_totals,
        d_counters,
        moved,
        host,
        vm_memory,
        host_memory,
    };
    let hosts = Hosts {
        cores,
        memory,
        capacity,
    };
    let s = detached(py, || loads::load_shares(&period, &hosts))?;
    Ok(arrays!(py;
        s.host_cpu, s.host_mem, s.host_net, s.host_ok,
        s.vm_cpu, s.vm_mem, s.vm_net, s.vm_ok,
    ))
}

/// One host's load shares from one packed array (the agent's form: one conversion and one
/// crossing a period): `packed` is 3 host counter differences, 6 rows of `n` VM counter
/// differences, `n` VM memories, then cores, memory, capacity and the host's memory in use.
/// Returns one array: host cpu, mem, net, ok (1.0 or 0.0), then n each of VM cpu, mem,
/// net and ok.
#[pyfunction]
fn host_load_shares<'py>(
    py: Python<'py>,
    dt: f64,
    packed: PyReadonlyArray1<'py, f64>,
    n: usize,
) -> PyResult<F64Array<'py>> {
    let b = slice("packed", &packed)?;
    if b.len() != 7 * n + 7 {
        return Err(PyValueError::new_err(format!(
            "packed: {} values for {n} VMs (want 7 x VMs + 7)",
            b.len()
        )));
    }
    let at = 3 + 7 * n;
    let (moved, host) = (vec![false; n], vec![0i64; n]);
    let period = Period {
        dt,
        d_totals: &b[..3],
        d_counters: &b[3..3 + 6 * n],
        moved: &moved,
        host: &host,
        vm_memory: &b[3 + 6 * n..at],
        host_memory: Some(&b[at + 3..]),
    };
    let hosts = Hosts {
        cores: &b[at..at + 1],
        memory: &b[at + 1..at + 2],
        capacity: &b[at + 2..at + 3],
    };
    let s = loads::load_shares(&period, &hosts).map_err(value_error)?;
    let flag = |ok: &[bool]| {
        ok.iter()
            .map(|&o| f64::from(u8::from(o)))
            .collect::<Vec<_>>()
    };
    let mut out = Vec::with_capacity(4 + 4 * n);
    out.extend([s.host_cpu[0], s.host_mem[0], s.host_net[0]]);
    out.extend(flag(&s.host_ok));
    for v in [&s.vm_cpu, &s.vm_mem, &s.vm_net] {
        out.extend_from_slice(v);
    }
    out.extend(flag(&s.vm_ok));
    Ok(PyArray1::from_vec(py, out))
}

/// Each censored VM's unmet demand added to its net share and its host's: the new
/// (host_net, vm_net).
#[pyfunction]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature
fn demand_loads<'py>(
    py: Python<'py>,
    host: PyReadonlyArray1<'py, i64>,
    censored: PyReadonlyArray1<'py, bool>,
    demand_est_bps: PyReadonlyArray1<'py, f64>,
    last_rate_bps: PyReadonlyArray1<'py, f64>,
    vm_ok: PyReadonlyArray1<'py, bool>,
    capacity: PyReadonlyArray1<'py, f64>,
    host_net: PyReadonlyArray1<'py, f64>,
    vm_net: PyReadonlyArray1<'py, f64>,
) -> PyResult<(F64Array<'py>, F64Array<'py>)> {
    slices! { host, censored, demand_est_bps, last_rate_bps, vm_ok, capacity, host_net, vm_net }
    let (mut hn, mut vn) = (host_net.to_vec(), vm_net.to_vec());
    detached(py, || {
        let (est, last) = (demand_est_bps, last_rate_bps);
        loads::demand_loads(host, censored, est, last, vm_ok, capacity, &mut hn, &mut vn)
    })?;
    Ok(arrays!(py; hn, vn))
}

fn index(name: &str, i: usize, x: i64) -> PyResult<usize> {
    usize::try_from(x)
        .map_err(|_| PyValueError::new_err(format!("{name}[{i}] must be >= 0, got {x}")))
}

fn indices(name: &str, a: &[i64]) -> PyResult<Vec<usize>> {
    a.iter()
        .enumerate()
        .map(|(i, &x)| index(name, i, x))
        .collect()
}

/// A position or -1 for none.
fn optional(x: i64) -> Option<usize> {
    usize::try_from(x).ok()
}

/// Cold-spot screening for every hot host of a round at once: query `q` (source position
/// `src[q]`, -1 if not ranked) tries movers `first[q]..end[q]` after last time's proposal
/// (`keep_mover[q]`, `keep_dst[q]`, -1 for none). Returns each query's target, mover (-1:
/// none) and whether it was kept, and each mover's open hosts before its target, the
/// first `LISTED` of them (-1 pads), their loads after the move and why each was refused
/// (bits: busy per resource, then full per resource).
#[pyfunction]
#[pyo3(signature = (now, caps, src_caps, alpha, limit, taken, src, first, end, keep_mover, keep_dst, share, barred_start, barred))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature
fn screen_round<'py>(
    py: Python<'py>,
    now: PyReadonlyArray1<'py, f64>,
    caps: Option<PyReadonlyArray1<'py, f64>>,
    src_caps: Option<PyReadonlyArray1<'py, f64>>,
    alpha: f64,
    limit: f64,
    taken: PyReadonlyArray1<'py, bool>,
    src: PyReadonlyArray1<'py, i64>,
    first: PyReadonlyArray1<'py, i64>,
    end: PyReadonlyArray1<'py, i64>,
    keep_mover: PyReadonlyArray1<'py, i64>,
    keep_dst: PyReadonlyArray1<'py, i64>,
    share: PyReadonlyArray1<'py, f64>,
    barred_start: PyReadonlyArray1<'py, i64>,
    barred: PyReadonlyArray1<'py, i64>,
) -> PyResult<(
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    BoolArray<'py>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    F64Array<'py>,
    Bound<'py, PyArray1<u8>>,
)> {
    slices! { now, taken, src, first, end, keep_mover, keep_dst, share, barred_start, barred }
    optional_slices! { caps, src_caps }
    let (km, kd) = (keep_mover, keep_dst);
    let q = src.len();
    if [first.len(), end.len(), km.len(), kd.len()]
        .iter()
        .any(|&l| l != q)
    {
        return Err(PyValueError::new_err(format!(
            "queries: src, first, end, keep_mover, keep_dst differ in length ({q}, {}, {}, {}, {})",
            first.len(),
            end.len(),
            km.len(),
            kd.len()
        )));
    }
    let mut queries = Vec::with_capacity(q);
    for i in 0..q {
        queries.push(Query {
            src: optional(src[i]),
            first: index("first", i, first[i])?,
            end: index("end", i, end[i])?,
            keep: optional(km[i]).zip(optional(kd[i])),
        });
    }
    let barred_start = indices("barred_start", barred_start)?;
    let barred = indices("barred", barred)?;
    let ranked = Ranked {
        now,
        caps,
        src_caps,
        alpha,
        limit,
    };
    let movers = Movers {
        share,
        barred_start: &barred_start,
        barred: &barred,
    };
    let out = detached(py, || {
        coldspots::screen_round(&ranked, taken, &queries, &movers)
    })?;
    let signed = |v: Vec<Option<usize>>| -> Vec<i64> {
        v.into_iter().map(|x| x.map_or(-1, |i| i as i64)).collect()
    };
    let listed = out
        .listed
        .into_iter()
        .map(|i| if i == usize::MAX { -1 } else { i as i64 })
        .collect();
    let tried = out.tried.into_iter().map(|t| t as i64).collect();
    Ok(arrays!(py;
        signed(out.target), signed(out.mover), out.kept, tried, listed, out.after, out.why,
    ))
}

fn metric(skewness: bool) -> Metric {
    if skewness {
        Metric::Skewness
    } else {
        Metric::Volume
    }
}

/// The hotness of every row of `values` (C-ordered rows of `width` resources): volume
/// with each value clamped to `clamp`, or skewness.
#[pyfunction]
fn hotness_rows<'py>(
    py: Python<'py>,
    values: PyReadonlyArray1<'py, f64>,
    width: usize,
    skewness: bool,
    clamp: f64,
) -> PyResult<F64Array<'py>> {
    slices! { values }
    let out = detached(py, || {
        hotness::hotness(values, width, metric(skewness), clamp)
    })?;
    Ok(PyArray1::from_vec(py, out))
}

/// The hotness of one load vector (a host's or a VM's), without an array: what a per-host
/// caller ranking a few hosts or VMs asks, at the cost of a function call.
#[pyfunction]
fn hotness_one(values: Vec<f64>, skewness: bool, clamp: f64) -> PyResult<f64> {
    let out =
        hotness::hotness(&values, values.len(), metric(skewness), clamp).map_err(value_error)?;
    Ok(out[0])
}

/// Hotspot verdicts of C-ordered (hosts, n_obs, width) windows: (over, φ, forecast, hot),
/// one per host and resource.
#[pyfunction]
#[allow(clippy::type_complexity)] // four arrays, as Python unpacks them
fn hotspot_verdicts<'py>(
    py: Python<'py>,
    windows: PyReadonlyArray1<'py, f64>,
    n_obs: usize,
    width: usize,
    alpha: f64,
    k: i64,
) -> PyResult<(
    Bound<'py, PyArray1<i64>>,
    F64Array<'py>,
    F64Array<'py>,
    BoolArray<'py>,
)> {
    slices! { windows }
    let w = Windows {
        values: windows,
        n_obs,
        width,
    };
    let v = detached(py, || verdicts::verdicts(&w, alpha, k))?;
    Ok(arrays!(py; v.over, v.phi, v.forecast, v.hot))
}

/// The Sova allocator for every link at once: link `h`'s flows are
/// `order[start[h]:start[h + 1]]`, in the order the per-host form sees them. Returns each
/// flow's rate in bit/s (flows outside the layout get 0).
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
fn sova_allocate<'py>(
    py: Python<'py>,
    capacity: PyReadonlyArray1<'py, f64>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    demand: PyReadonlyArray1<'py, f64>,
    minimum: PyReadonlyArray1<'py, f64>,
    maximum: PyReadonlyArray1<'py, f64>,
    max_pps: PyReadonlyArray1<'py, f64>,
    packet_bytes: PyReadonlyArray1<'py, f64>,
    weight: PyReadonlyArray1<'py, f64>,
) -> PyResult<F64Array<'py>> {
    slices! { capacity, order, start, demand, minimum, maximum, max_pps, packet_bytes, weight }
    let flows = allocate::Flows {
        demand,
        vm: None,
        minimum,
        maximum,
        max_pps,
        packet_bytes,
        weight,
    };
    per_flow(py, order, start, demand.len(), |layout, out| {
        allocate::sova_allocate(capacity, layout, &flows, out)
    })
}

/// One link's weighted max-min fill of `target` between floors `lo` and ceilings `hi`; a
/// sum `math.fsum` refuses is a ValueError, as `links_fsum` raises it.
#[pyfunction]
fn clamped_fill<'py>(
    py: Python<'py>,
    target: f64,
    lo: PyReadonlyArray1<'py, f64>,
    hi: PyReadonlyArray1<'py, f64>,
    weights: PyReadonlyArray1<'py, f64>,
) -> PyResult<F64Array<'py>> {
    slices! { lo, hi, weights }
    if hi.len() != lo.len() || weights.len() != lo.len() {
        return Err(PyValueError::new_err(format!(
            "lo, hi and weights must have the same length, got {}, {} and {}",
            lo.len(),
            hi.len(),
            weights.len()
        )));
    }
    let mut out = vec![0.0; lo.len()];
    allocate::clamped_fill(target, lo, hi, weights, &mut out).map_err(value_error)?;
    Ok(PyArray1::from_vec(py, out))
}

/// The scheduler's settings as Python passes them: (io_threshold_filter, io_threshold,
/// top_q, tolerance, hysteresis, min_dwell_s, top_senders, cost_benefit, virtio_lossless,
/// hotplug_blip, horizon, benefit_margin).
type VfConfig = (
    bool,
    f64,
    i64,
    f64,
    f64,
    f64,
    bool,
    bool,
    f64,
    f64,
    f64,
    f64,
);

type VfResult<'py> = (
    BoolArray<'py>,
    Bound<'py, PyArray1<i64>>,
    BoolArray<'py>,
    BoolArray<'py>,
    Bound<'py, PyArray1<i64>>,
    BoolArray<'py>,
    BoolArray<'py>,
);

/// One VF scheduling period of every host: (passed, rank, pq, dwell, ranked, served,
/// held_back).
#[pyfunction]
#[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
fn vf_schedule<'py>(
    py: Python<'py>,
    host: PyReadonlyArray1<'py, i64>,
    name_rank: PyReadonlyArray1<'py, i64>,
    io_score: PyReadonlyArray1<'py, f64>,
    net_score: PyReadonlyArray1<'py, f64>,
    has_traffic: PyReadonlyArray1<'py, bool>,
    eligible: PyReadonlyArray1<'py, bool>,
    holder: PyReadonlyArray1<'py, bool>,
    since: PyReadonlyArray1<'py, f64>,
    demand: PyReadonlyArray1<'py, f64>,
    vf_count: PyReadonlyArray1<'py, i64>,
    now_s: f64,
    config: VfConfig,
) -> PyResult<VfResult<'py>> {
    slices! {
        host, name_rank, io_score, net_score, has_traffic, eligible, holder, since, demand,
        vf_count,
    }
    let rows = vfsched::Rows {
        host,
        name_rank,
        io_score,
        net_score,
        has_traffic,
        eligible,
        holder,
        since,
        demand,
    };
    let (f, thr, q, tol, hyst, dwell, senders, cb, lossless, blip, horizon, margin) = config;
    let c = vfsched::Config {
        io_threshold_filter: f,
        io_threshold: thr,
        top_q: q,
        tolerance: tol,
        hysteresis: hyst,
        min_dwell_s: dwell,
        top_senders: senders,
        cost_benefit: cb,
        virtio_lossless: lossless,
        hotplug_blip: blip,
        horizon,
        benefit_margin: margin,
    };
    let s = detached(py, || vfsched::schedule(&rows, vf_count, now_s, &c))?;
    Ok(arrays!(py;
        s.passed, s.rank, s.pq, s.dwell, s.ranked, s.served, s.held_back,
    ))
}

/// Every VM's sensing windows (sova-core's `sensing::Sensor`): the facade
/// `sova.policy.sensing.SensorKernel` holds one, for one host's VMs or a fleet's.
#[pyclass(name = "Sensor", module = "sova.policy._core")]
struct Sensor(sensing::Sensor);

type FactorArrays<'py> = (
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    BoolArray<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    F64Array<'py>,
    BoolArray<'py>,
    F64Array<'py>,
);

#[pymethods]
impl Sensor {
    #[new]
    fn new(
        n: usize,
        num: i64,
        epsilon: f64,
        threshold_bps: f64,
        censor_margin: f64,
        cpu_saturation: f64,
    ) -> PyResult<Self> {
        // a negative window is refused as the core refuses 0, naming the value given
        let num = usize::try_from(num)
            .map_err(|_| PyValueError::new_err(format!("window num must be >= 1, got {num}")))?;
        let params = Params {
            num,
            epsilon,
            threshold_bps,
            censor_margin,
            cpu_saturation,
        };
        Ok(Sensor(
            sensing::Sensor::new(n, params).map_err(value_error)?,
        ))
    }

    /// Take a reading (`counters`: 6 rows of n whole numbers, C order); whether it was taken.
    #[pyo3(signature = (t, counters, vcpus, host, ceiling=None, virtio=None))]
    #[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
    fn observe(
        &mut self,
        py: Python<'_>,
        t: f64,
        counters: PyReadonlyArray1<'_, i64>,
        vcpus: PyReadonlyArray1<'_, f64>,
        host: PyReadonlyArray1<'_, i64>,
        ceiling: Option<PyReadonlyArray1<'_, f64>>,
        virtio: Option<PyReadonlyArray1<'_, bool>>,
    ) -> PyResult<bool> {
        slices! { counters, vcpus, host }
        optional_slices! { ceiling, virtio }
        let s = &mut self.0;
        detached(py, || s.observe(t, counters, vcpus, host, ceiling, virtio))
    }

    /// Every VM's factors: (cpu_usage, io_degree, io_factor, net_degree, net_factor,
    /// has_traffic, demand_bps, last_rate_bps, tx_bps, rx_bps, censored, demand_est_bps).
    fn factors<'py>(
        &self,
        py: Python<'py>,
        host: PyReadonlyArray1<'py, i64>,
        n_hosts: usize,
    ) -> PyResult<FactorArrays<'py>> {
        slices! { host }
        let s = &self.0;
        let f = detached(py, || s.factors(host, n_hosts))?;
        Ok(arrays!(py;
            f.cpu_usage, f.io_degree, f.io_factor, f.net_degree, f.net_factor, f.has_traffic,
            f.demand_bps, f.last_rate_bps, f.tx_bps, f.rx_bps, f.censored, f.demand_est_bps,
        ))
    }

    /// The same windows over another list of VMs: row i is old row keep[i], new where < 0.
    fn remap(&self, keep: PyReadonlyArray1<'_, i64>) -> PyResult<Sensor> {
        slices! { keep }
        Ok(Sensor(self.0.remap(keep).map_err(value_error)?))
    }

    /// Whether a reading at `t` would be taken (not a repeated or out-of-order one).
    fn accepts(&self, t: f64) -> bool {
        self.0.accepts(t)
    }

    /// Periods in each VM's window.
    #[getter]
    fn count<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<i64>> {
        PyArray1::from_slice(py, self.0.count())
    }

    /// Whether some VM has a period in its window.
    fn measured(&self) -> bool {
        self.0.count().iter().any(|&c| c > 0)
    }

    /// Readings where a VM's counter went back, so far.
    #[getter]
    fn resets(&self) -> u64 {
        self.0.resets()
    }
}

// ---- the bandwidth controller's period (sova_core::bandwidth), issue 36 -----------------

/// Reservation columns advanced in place: (quiet, level, fast), one entry per VM.
type HeldArrays<'py> = (
    PyReadwriteArray1<'py, i64>,
    PyReadwriteArray1<'py, f64>,
    PyReadwriteArray1<'py, bool>,
);

fn writable<'a, T: numpy::Element>(
    name: &str,
    a: &'a mut PyReadwriteArray1<'_, T>,
) -> PyResult<&'a mut [T]> {
    a.as_slice_mut()
        .map_err(|_| PyValueError::new_err(format!("{name}: not a C-contiguous array")))
}

/// The reservation columns, when given, as the core's mutable view.
fn held_columns<'a>(held: &'a mut Option<HeldArrays<'_>>) -> PyResult<Option<bandwidth::Held<'a>>> {
    Ok(match held.as_mut() {
        Some((q, l, f)) => Some(bandwidth::Held {
            quiet: writable("quiet", q)?,
            level: writable("level", l)?,
            fast: writable("held fast", f)?,
        }),
        None => None,
    })
}

/// The per-VM columns of a period, borrowed under their names.
macro_rules! period_vms {
    ($bps:ident, $packet_bytes:ident, $current:ident, $minimum:ident, $maximum:ident,
     $max_pps:ident, $weight:ident, $fast:ident) => {{
        slices! { $bps, $packet_bytes, $current, $minimum, $maximum, $max_pps, $weight, $fast }
        bandwidth::Vms {
            bps: $bps,
            packet_bytes: $packet_bytes,
            current: $current,
            minimum: $minimum,
            maximum: $maximum,
            max_pps: $max_pps,
            weight: $weight,
            fast: $fast,
        }
    }};
}

/// One period of the bandwidth controller with the Sova allocator, every host at once:
/// (each flow's cap, NaN none; its packet cap; the positions of the flows whose cap moved).
/// Flow `k` is VM `flows[k]`; the columns are per VM; `held` advances in place.
/// `threads`: how many share the hosts' allocations (the same bits for any number).
#[pyfunction]
#[pyo3(signature = (
    capacity, order, start, flows, bps, packet_bytes, current, minimum, maximum, max_pps,
    weight, fast, probe, spread_spare, lift, held=None, threads=1,
))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature, one array per argument
fn bandwidth_period<'py>(
    py: Python<'py>,
    capacity: PyReadonlyArray1<'py, f64>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    flows: PyReadonlyArray1<'py, i64>,
    bps: PyReadonlyArray1<'py, f64>,
    packet_bytes: PyReadonlyArray1<'py, f64>,
    current: PyReadonlyArray1<'py, f64>,
    minimum: PyReadonlyArray1<'py, f64>,
    maximum: PyReadonlyArray1<'py, f64>,
    max_pps: PyReadonlyArray1<'py, f64>,
    weight: PyReadonlyArray1<'py, f64>,
    fast: PyReadonlyArray1<'py, bool>,
    probe: f64,
    spread_spare: bool,
    lift: bool,
    held: Option<HeldArrays<'py>>,
    threads: usize,
) -> PyResult<(F64Array<'py>, F64Array<'py>, Bound<'py, PyArray1<i64>>)> {
    slices! { capacity, order, start, flows }
    let v = period_vms!(
        bps,
        packet_bytes,
        current,
        minimum,
        maximum,
        max_pps,
        weight,
        fast
    );
    let s = bandwidth::Settings {
        probe,
        spread_spare,
        lift,
    };
    let mut held = held;
    let mut cols = held_columns(&mut held)?;
    let (new, pps, changed) = detached(py, || {
        let fleet = bandwidth::Fleet {
            capacity,
            layout: Layout::new(order, start, flows.len())?,
            flows,
        };
        let (mut new, mut pps) = (vec![0.0; flows.len()], vec![0.0; flows.len()]);
        let changed = bandwidth::period(&fleet, &v, s, cols.as_mut(), &mut new, &mut pps, threads)?;
        Ok((new, pps, changed))
    })?;
    Ok(arrays!(py; new, pps, changed))
}

/// A period's demands for an allocator other than Sova's (called host by host in Python):
/// (each flow's demand, whether its cap is lifted). `held` advances in place.
#[pyfunction]
#[pyo3(signature = (
    capacity, order, start, flows, bps, packet_bytes, current, minimum, maximum, max_pps,
    weight, fast, probe, spread_spare, lift, held=None,
))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature, one array per argument
fn bandwidth_demand<'py>(
    py: Python<'py>,
    capacity: PyReadonlyArray1<'py, f64>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    flows: PyReadonlyArray1<'py, i64>,
    bps: PyReadonlyArray1<'py, f64>,
    packet_bytes: PyReadonlyArray1<'py, f64>,
    current: PyReadonlyArray1<'py, f64>,
    minimum: PyReadonlyArray1<'py, f64>,
    maximum: PyReadonlyArray1<'py, f64>,
    max_pps: PyReadonlyArray1<'py, f64>,
    weight: PyReadonlyArray1<'py, f64>,
    fast: PyReadonlyArray1<'py, bool>,
    probe: f64,
    spread_spare: bool,
    lift: bool,
    held: Option<HeldArrays<'py>>,
) -> PyResult<(F64Array<'py>, BoolArray<'py>)> {
    slices! { capacity, order, start, flows }
    let v = period_vms!(
        bps,
        packet_bytes,
        current,
        minimum,
        maximum,
        max_pps,
        weight,
        fast
    );
    let s = bandwidth::Settings {
        probe,
        spread_spare,
        lift,
    };
    let mut held = held;
    let mut cols = held_columns(&mut held)?;
    let (demand, lifted) = detached(py, || {
        let fleet = bandwidth::Fleet {
            capacity,
            layout: Layout::new(order, start, flows.len())?,
            flows,
        };
        let (mut demand, mut lifted) = (vec![0.0; flows.len()], vec![false; flows.len()]);
        bandwidth::demand(&fleet, &v, s, cols.as_mut(), &mut demand, &mut lifted)?;
        Ok((demand, lifted))
    })?;
    Ok(arrays!(py; demand, lifted))
}

/// A period's caps from another allocator's rates and packet caps: (each flow's cap, the
/// positions of the flows whose cap moved).
#[pyfunction]
#[pyo3(signature = (
    capacity, order, start, flows, current, rate, pps, lifted, probe, spread_spare,
))]
#[allow(clippy::too_many_arguments)] // the Python signature, one array per argument
fn bandwidth_limits<'py>(
    py: Python<'py>,
    capacity: PyReadonlyArray1<'py, f64>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    flows: PyReadonlyArray1<'py, i64>,
    current: PyReadonlyArray1<'py, f64>,
    rate: PyReadonlyArray1<'py, f64>,
    pps: PyReadonlyArray1<'py, f64>,
    lifted: PyReadonlyArray1<'py, bool>,
    probe: f64,
    spread_spare: bool,
) -> PyResult<(F64Array<'py>, Bound<'py, PyArray1<i64>>)> {
    slices! { capacity, order, start, flows, current, rate, pps, lifted }
    let s = bandwidth::Settings {
        probe,
        spread_spare,
        lift: false,
    };
    let (new, changed) = detached(py, || {
        let fleet = bandwidth::Fleet {
            capacity,
            layout: Layout::new(order, start, flows.len())?,
            flows,
        };
        let mut new = rate.to_vec();
        let changed = bandwidth::limits(&fleet, current, s, &mut new, pps, lifted)?;
        Ok((new, changed))
    })?;
    Ok(arrays!(py; new, changed))
}

// ---- end of the bandwidth controller's period ---------------------------------------------

// ---------------------------------------------------------------- the tick's sharing

/// One tick's sharing of the guests' vCPUs, the hosts' cores, the paths and the PF among
/// every VM (sova_core::share::share), then the request VMs' latency written into
/// `resp_s`, `served_req`, `backlog_bits` (sova_core::share::latency): `((want, tx, rx,
/// ns_pkt, cpu_busy, need, host_scale_vm, vcpu_load), (tx_host, tx_by_host, rx_host,
/// backend_pps, pps_limit, host_need, host_scale, backend_vm_frac), mig_rate)`;
/// `vcpu_load` is empty unless asked for. `order`/`start`: every VM laid out by host.
/// Then the file transfers' bytes left, in `file_left`; the last value is the transfers
/// that finished.
#[pyfunction]
#[pyo3(signature = (
    host, want, pkts_per_bit, pkt_bits, on_vf, ns_per_byte, arrival_cost, cpu_frac, cj, vcpus,
    paused, weights, link_clocked, vf_max, vf_min, is_file, file_left, rx_share, arrivals,
    req_bytes, capacity, cores, backend_cores, order, start, mig_src, mig_dst, mig_cap,
    offered, req_idx, req_resp_bits, resp_s, served_req, backlog_bits,
    dt, guest_ns_per_packet, virtio_guest_ns_per_packet, virtio_host_ns_per_packet,
    virtio_backend_ns_per_vm, virtio_pps_limit, virtio_flow_limit, tcp_link_clocked,
    dedicated_backend, vcpu_load, weights_whole, any_asks,
    vf_latency, virtio_latency, sched_quantum, request_round_trips, request_fixed_latency,
    guest_ns_per_request, threads=1,
))]
#[allow(clippy::too_many_arguments, clippy::type_complexity)] // the Python signature, one array per argument
fn tick_share<'py>(
    py: Python<'py>,
    host: PyReadonlyArray1<'py, i64>,
    want: PyReadonlyArray1<'py, f64>,
    pkts_per_bit: PyReadonlyArray1<'py, f64>,
    pkt_bits: PyReadonlyArray1<'py, f64>,
    on_vf: PyReadonlyArray1<'py, bool>,
    ns_per_byte: PyReadonlyArray1<'py, f64>,
    arrival_cost: PyReadonlyArray1<'py, f64>,
    cpu_frac: PyReadonlyArray1<'py, f64>,
    cj: PyReadonlyArray1<'py, f64>,
    vcpus: PyReadonlyArray1<'py, f64>,
    paused: Option<PyReadonlyArray1<'py, bool>>,
    weights: PyReadonlyArray1<'py, f64>,
    link_clocked: PyReadonlyArray1<'py, bool>,
    vf_max: PyReadonlyArray1<'py, f64>,
    vf_min: PyReadonlyArray1<'py, f64>,
    is_file: Option<PyReadonlyArray1<'py, bool>>,
    mut file_left: PyReadwriteArray1<'py, f64>,
    rx_share: PyReadonlyArray1<'py, f64>,
    arrivals: PyReadonlyArray1<'py, f64>,
    req_bytes: PyReadonlyArray1<'py, f64>,
    capacity: PyReadonlyArray1<'py, f64>,
    cores: PyReadonlyArray1<'py, f64>,
    backend_cores: PyReadonlyArray1<'py, f64>,
    order: PyReadonlyArray1<'py, i64>,
    start: PyReadonlyArray1<'py, i64>,
    mig_src: PyReadonlyArray1<'py, i64>,
    mig_dst: PyReadonlyArray1<'py, i64>,
    mig_cap: PyReadonlyArray1<'py, f64>,
    offered: PyReadonlyArray1<'py, f64>,
    req_idx: PyReadonlyArray1<'py, i64>,
    req_resp_bits: PyReadonlyArray1<'py, f64>,
    mut resp_s: PyReadwriteArray1<'py, f64>,
    mut served_req: PyReadwriteArray1<'py, f64>,
    mut backlog_bits: PyReadwriteArray1<'py, f64>,
    dt: f64,
    guest_ns_per_packet: f64,
    virtio_guest_ns_per_packet: f64,
    virtio_host_ns_per_packet: f64,
    virtio_backend_ns_per_vm: f64,
    virtio_pps_limit: f64,
    virtio_flow_limit: f64,
    tcp_link_clocked: bool,
    dedicated_backend: bool,
    vcpu_load: bool,
    weights_whole: bool,
    any_asks: bool,
    vf_latency: f64,
    virtio_latency: f64,
    sched_quantum: f64,
    request_round_trips: f64,
    request_fixed_latency: f64,
    guest_ns_per_request: f64,
    threads: usize,
) -> PyResult<(
    Bound<'py, PyTuple>,
    Bound<'py, PyTuple>,
    F64Array<'py>,
    Bound<'py, PyArray1<i64>>,
)> {
    slices! {
        host, want, pkts_per_bit, pkt_bits, on_vf, ns_per_byte, arrival_cost, cpu_frac, cj,
        vcpus, weights, link_clocked, vf_max, vf_min, rx_share, arrivals, req_bytes,
        capacity, cores, backend_cores, order, start, mig_src, mig_dst, mig_cap,
        offered, req_idx, req_resp_bits,
    }
    optional_slices! { paused, is_file }
    slices_mut! { resp_s, served_req, backlog_bits, file_left }
    let hosts = ShareHosts {
        capacity,
        cores,
        backend_cores,
    };
    let mig = Copying {
        src: mig_src,
        dst: mig_dst,
        cap: mig_cap,
    };
    let p = ShareParams {
        dt,
        guest_ns_per_packet,
        virtio_guest_ns_per_packet,
        virtio_host_ns_per_packet,
        virtio_backend_ns_per_vm,
        virtio_pps_limit,
        virtio_flow_limit,
        tcp_link_clocked,
        dedicated_backend,
        vcpu_load,
        weights_whole,
        any_asks,
        threads,
    };
    let req = Requests {
        idx: req_idx,
        resp_bits: req_resp_bits,
        offered,
    };
    let lp = LatencyParams {
        vf_latency,
        virtio_latency,
        sched_quantum,
        request_round_trips,
        request_fixed_latency,
        guest_ns_per_request,
        request_service_latency: vcpu_load,
    };
    let mut out = Latencies {
        resp_s,
        served_req,
        backlog_bits,
    };
    let (s, done) = detached(py, || {
        let layout = Layout::new(order, start, want.len())?;
        let s = {
            let vm = ShareVms {
                host,
                want,
                pkts_per_bit,
                pkt_bits,
                on_vf,
                ns_per_byte,
                arrival_cost,
                cpu_frac,
                cj,
                vcpus,
                paused,
                weights,
                link_clocked,
                vf_max,
                vf_min,
                is_file,
                file_left: &*file_left,
                rx_share,
                arrivals,
                req_bytes,
            };
            let s = share::share(&vm, &hosts, &mig, &layout, p)?;
            share::latency(&req, &vm, &hosts, &s, p, lp, &mut out)?;
            s
        };
        let done = match is_file {
            Some(is_file) => share::files(is_file, &s.tx, dt, file_left)?,
            None => Vec::new(),
        };
        Ok((s, done))
    })?;
    let vms = PyTuple::new(
        py,
        [
            s.want,
            s.tx,
            s.rx,
            s.ns_pkt,
            s.cpu_busy,
            s.need,
            s.host_scale_vm,
            s.vcpu_load,
        ]
        .map(|v| PyArray1::from_vec(py, v)),
    )?;
    let per_host = PyTuple::new(
        py,
        [
            s.tx_host,
            s.tx_by_host,
            s.rx_host,
            s.backend_pps,
            s.pps_limit,
            s.host_need,
            s.host_scale,
            s.backend_vm_frac,
        ]
        .map(|v| PyArray1::from_vec(py, v)),
    )?;
    Ok((
        vms,
        per_host,
        PyArray1::from_vec(py, s.mig_rate),
        PyArray1::from_vec(py, done),
    ))
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(links_waterfill, m)?)?;
    m.add_function(wrap_pyfunction!(floored_waterfill, m)?)?;
    m.add_function(wrap_pyfunction!(links_fsum, m)?)?;
    m.add_function(wrap_pyfunction!(tick_count, m)?)?;
    m.add_function(wrap_pyfunction!(tick_draws, m)?)?;
    m.add_function(wrap_pyfunction!(tick_offer, m)?)?;
    m.add_function(wrap_pyfunction!(tick_stats, m)?)?;
    m.add_function(wrap_pyfunction!(uniforms, m)?)?;
    for (name, value) in [
        ("STREAM_RATE_JITTER", rng::stream::RATE_JITTER),
        ("STREAM_CPU_JITTER", rng::stream::CPU_JITTER),
        ("STREAM_ARRIVALS", rng::stream::ARRIVALS),
        ("STREAM_NET_CYCLE", rng::stream::NET_CYCLE),
        ("STREAM_CPU_CYCLE", rng::stream::CPU_CYCLE),
        ("STREAM_RESET", rng::stream::RESET),
    ] {
        m.add(name, value)?;
    }
    m.add_function(wrap_pyfunction!(measure, m)?)?;
    m.add_function(wrap_pyfunction!(load_shares, m)?)?;
    m.add_function(wrap_pyfunction!(host_load_shares, m)?)?;
    m.add_function(wrap_pyfunction!(demand_loads, m)?)?;
    m.add_function(wrap_pyfunction!(hotspot_verdicts, m)?)?;
    m.add_function(wrap_pyfunction!(hotness_rows, m)?)?;
    m.add_function(wrap_pyfunction!(hotness_one, m)?)?;
    m.add_function(wrap_pyfunction!(screen_round, m)?)?;
    m.add_function(wrap_pyfunction!(sova_allocate, m)?)?;
    m.add_function(wrap_pyfunction!(clamped_fill, m)?)?;
    m.add_function(wrap_pyfunction!(vf_schedule, m)?)?;
    m.add_function(wrap_pyfunction!(bandwidth_period, m)?)?;
    m.add_function(wrap_pyfunction!(bandwidth_demand, m)?)?;
    m.add_function(wrap_pyfunction!(bandwidth_limits, m)?)?;
    m.add("FULL_LINK", bandwidth::FULL_LINK)?;
    m.add("HOLD_PERIODS", bandwidth::HOLD_PERIODS)?;

    m.add_function(wrap_pyfunction!(tick_share, m)?)?;
    m.add_class::<Sensor>()?;
    Ok(())
}
