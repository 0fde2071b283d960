# The compiled policy core (rust/sova-py, built by setup.py): its functions' types for
# mypy. Only the facades in sova.policy call it; they pass C-contiguous arrays of these
# dtypes, and the core raises ValueError naming the field on anything else.
import numpy as np
import numpy.typing as npt

def links_waterfill(
    capacity: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    demands: npt.NDArray[np.float64],
    weights: npt.NDArray[np.float64] | None = None,
    member: npt.NDArray[np.bool_] | None = None,
    whole: bool | None = None,
) -> npt.NDArray[np.float64]: ...
def floored_waterfill(
    capacity: npt.NDArray[np.float64],
    group: npt.NDArray[np.int64],
    demands: npt.NDArray[np.float64],
    weights: npt.NDArray[np.float64],
    floors: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]: ...
def measure(
    prev_tx: npt.NDArray[np.float64],
    prev_pk: npt.NDArray[np.float64],
    tx: npt.NDArray[np.float64],
    pk: npt.NDArray[np.float64],
    dt: float,
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def load_shares(
    dt: float,
    d_totals: npt.NDArray[np.float64],
    d_counters: npt.NDArray[np.float64],
    moved: npt.NDArray[np.bool_],
    host: npt.NDArray[np.int64],
    vm_memory: npt.NDArray[np.float64],
    cores: npt.NDArray[np.float64],
    memory: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    host_memory: npt.NDArray[np.float64] | None = None,
) -> tuple[
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.bool_],
]: ...
def host_load_shares(
    dt: float, packed: npt.NDArray[np.float64], n: int
) -> npt.NDArray[np.float64]: ...
def demand_loads(
    host: npt.NDArray[np.int64],
    censored: npt.NDArray[np.bool_],
    demand_est_bps: npt.NDArray[np.float64],
    last_rate_bps: npt.NDArray[np.float64],
    vm_ok: npt.NDArray[np.bool_],
    capacity: npt.NDArray[np.float64],
    host_net: npt.NDArray[np.float64],
    vm_net: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def hotspot_verdicts(
    windows: npt.NDArray[np.float64], n_obs: int, width: int, alpha: float, k: int
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.bool_],
]: ...
def hotness_rows(
    values: npt.NDArray[np.float64], width: int, skewness: bool, clamp: float
) -> npt.NDArray[np.float64]: ...
def hotness_one(values: list[float], skewness: bool, clamp: float) -> float: ...
def screen_round(
    now: npt.NDArray[np.float64],
    caps: npt.NDArray[np.float64] | None,
    src_caps: npt.NDArray[np.float64] | None,
    alpha: float,
    limit: float,
    taken: npt.NDArray[np.bool_],
    src: npt.NDArray[np.int64],
    first: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    keep_mover: npt.NDArray[np.int64],
    keep_dst: npt.NDArray[np.int64],
    share: npt.NDArray[np.float64],
    barred_start: npt.NDArray[np.int64],
    barred: npt.NDArray[np.int64],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
    npt.NDArray[np.uint8],
]: ...
def sova_allocate(
    capacity: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    demand: npt.NDArray[np.float64],
    minimum: npt.NDArray[np.float64],
    maximum: npt.NDArray[np.float64],
    max_pps: npt.NDArray[np.float64],
    packet_bytes: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]: ...
def clamped_fill(
    target: float,
    lo: npt.NDArray[np.float64],
    hi: npt.NDArray[np.float64],
    weights: npt.NDArray[np.float64],
) -> npt.NDArray[np.float64]: ...
def vf_schedule(
    host: npt.NDArray[np.int64],
    name_rank: npt.NDArray[np.int64],
    io_score: npt.NDArray[np.float64],
    net_score: npt.NDArray[np.float64],
    has_traffic: npt.NDArray[np.bool_],
    eligible: npt.NDArray[np.bool_],
    holder: npt.NDArray[np.bool_],
    since: npt.NDArray[np.float64],
    demand: npt.NDArray[np.float64],
    vf_count: npt.NDArray[np.int64],
    now_s: float,
    config: tuple[bool, float, int, float, float, float, bool, bool, float, float, float, float],
) -> tuple[
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.bool_],
    npt.NDArray[np.int64],
    npt.NDArray[np.bool_],
    npt.NDArray[np.bool_],
]: ...

class Sensor:
    def __init__(
        self,
        n: int,
        num: int,
        epsilon: float,
        threshold_bps: float,
        censor_margin: float,
        cpu_saturation: float,
    ) -> None: ...
    def observe(
        self,
        t: float,
        counters: npt.NDArray[np.int64],
        vcpus: npt.NDArray[np.float64],
        host: npt.NDArray[np.int64],
        ceiling: npt.NDArray[np.float64] | None = None,
        virtio: npt.NDArray[np.bool_] | None = None,
    ) -> bool: ...
    def factors(
        self, host: npt.NDArray[np.int64], n_hosts: int
    ) -> tuple[
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.float64],
        npt.NDArray[np.bool_],
        npt.NDArray[np.float64],
    ]: ...
    def remap(self, keep: npt.NDArray[np.int64]) -> Sensor: ...
    def accepts(self, t: float) -> bool: ...
    def measured(self) -> bool: ...
    @property
    def count(self) -> npt.NDArray[np.int64]: ...
    @property
    def resets(self) -> int: ...

def links_fsum(
    order: npt.NDArray[np.int64], start: npt.NDArray[np.int64], values: npt.NDArray[np.float64]
) -> npt.NDArray[np.float64]: ...
def tick_count(
    host: npt.NDArray[np.int64],
    tx: npt.NDArray[np.float64],
    rx: npt.NDArray[np.float64],
    pkts_per_bit: npt.NDArray[np.float64],
    ns_pkt: npt.NDArray[np.float64],
    ns_per_byte: npt.NDArray[np.float64],
    cpu_busy: npt.NDArray[np.float64],
    arrival_cost: npt.NDArray[np.float64],
    host_scale_vm: npt.NDArray[np.float64],
    vcpus: npt.NDArray[np.float64],
    need: npt.NDArray[np.float64],
    virt: npt.NDArray[np.bool_],
    pkt_bits: npt.NDArray[np.float64],
    paused: npt.NDArray[np.bool_] | None,
    backend_vm_frac: npt.NDArray[np.float64],
    tx_host: npt.NDArray[np.float64],
    rx_host: npt.NDArray[np.float64],
    host_need: npt.NDArray[np.float64],
    cores: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    cpu_ns: npt.NDArray[np.float64],
    steal_ns: npt.NDArray[np.float64],
    tx_b: npt.NDArray[np.float64],
    rx_b: npt.NDArray[np.float64],
    tx_pk: npt.NDArray[np.float64],
    rx_pk: npt.NDArray[np.float64],
    h_cpu_ns: npt.NDArray[np.float64],
    h_tx_b: npt.NDArray[np.float64],
    h_rx_b: npt.NDArray[np.float64],
    dt: float,
    virtio_host_ns_per_packet: float,
    ack_bits: float,
    steal: bool,
    threads: int = 1,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def tick_stats(
    tx: npt.NDArray[np.float64],
    rx: npt.NDArray[np.float64],
    tx_by_host: npt.NDArray[np.float64],
    served_req: npt.NDArray[np.float64],
    resp_s: npt.NDArray[np.float64],
    offered: npt.NDArray[np.float64],
    pos: npt.NDArray[np.bool_] | None,
    guarantee: npt.NDArray[np.float64] | None,
    held: npt.NDArray[np.float64] | None,
    edges: npt.NDArray[np.float64],
    tx_bits: npt.NDArray[np.float64],
    rx_bits: npt.NDArray[np.float64],
    host_tx_bits: npt.NDArray[np.float64],
    req_weight: npt.NDArray[np.float64],
    req_time: npt.NDArray[np.float64],
    resp_hist: npt.NDArray[np.float64],
    guar_intervals: npt.NDArray[np.float64],
    guar_met: npt.NDArray[np.float64],
    dt: float,
    measure: bool,
) -> None: ...
def tick_offer(
    net_start: npt.NDArray[np.float64],
    net_len: npt.NDArray[np.float64],
    net_live: npt.NDArray[np.int64],
    net_duty: npt.NDArray[np.float64],
    net_frac: npt.NDArray[np.float64],
    cpu_start: npt.NDArray[np.float64],
    cpu_len: npt.NDArray[np.float64],
    cpu_live: npt.NDArray[np.int64],
    cpu_duty: npt.NDArray[np.float64],
    cpu_frac: npt.NDArray[np.float64],
    rate: npt.NDArray[np.float64],
    streams: npt.NDArray[np.float64],
    streamy: npt.NDArray[np.bool_],
    resp_bytes: npt.NDArray[np.float64],
    backlog_bits: npt.NDArray[np.float64],
    is_req: npt.NDArray[np.bool_],
    is_file: npt.NDArray[np.bool_] | None,
    ingress_limit: npt.NDArray[np.float64] | None,
    ingress_div: npt.NDArray[np.float64] | None,
    asks: npt.NDArray[np.int64],
    ask_means: npt.NDArray[np.float64],
    seed: int,
    tick: int,
    t0: float,
    t1: float,
    cycle_min: float,
    cycle_max: float,
    rate_jitter: float,
    cpu_jitter: float,
    any_req: bool,
    guest_ns_per_request: float,
    threads: int = 1,
) -> tuple[
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
]: ...
def tick_draws(
    seed: int,
    tick: int,
    n: int,
    rate_jitter: float,
    cpu_jitter: float,
    asks: npt.NDArray[np.int64],
    means: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]: ...
def uniforms(
    seed: int,
    stream: int,
    vms: npt.NDArray[np.int64],
    counters: npt.NDArray[np.int64],
    draw: int,
) -> npt.NDArray[np.float64]: ...

STREAM_RATE_JITTER: int
STREAM_CPU_JITTER: int
STREAM_ARRIVALS: int
STREAM_NET_CYCLE: int
STREAM_CPU_CYCLE: int
STREAM_RESET: int

FULL_LINK: float
HOLD_PERIODS: int

def bandwidth_period(
    capacity: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    flows: npt.NDArray[np.int64],
    bps: npt.NDArray[np.float64],
    packet_bytes: npt.NDArray[np.float64],
    current: npt.NDArray[np.float64],
    minimum: npt.NDArray[np.float64],
    maximum: npt.NDArray[np.float64],
    max_pps: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64],
    fast: npt.NDArray[np.bool_],
    probe: float,
    spread_spare: bool,
    lift: bool,
    held: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]
    | None = None,
    threads: int = 1,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...
def bandwidth_demand(
    capacity: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    flows: npt.NDArray[np.int64],
    bps: npt.NDArray[np.float64],
    packet_bytes: npt.NDArray[np.float64],
    current: npt.NDArray[np.float64],
    minimum: npt.NDArray[np.float64],
    maximum: npt.NDArray[np.float64],
    max_pps: npt.NDArray[np.float64],
    weight: npt.NDArray[np.float64],
    fast: npt.NDArray[np.bool_],
    probe: float,
    spread_spare: bool,
    lift: bool,
    held: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.bool_]]
    | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]: ...
def bandwidth_limits(
    capacity: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    flows: npt.NDArray[np.int64],
    current: npt.NDArray[np.float64],
    rate: npt.NDArray[np.float64],
    pps: npt.NDArray[np.float64],
    lifted: npt.NDArray[np.bool_],
    probe: float,
    spread_spare: bool,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...

_Eight = tuple[
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
]

def tick_share(
    host: npt.NDArray[np.int64],
    want: npt.NDArray[np.float64],
    pkts_per_bit: npt.NDArray[np.float64],
    pkt_bits: npt.NDArray[np.float64],
    on_vf: npt.NDArray[np.bool_],
    ns_per_byte: npt.NDArray[np.float64],
    arrival_cost: npt.NDArray[np.float64],
    cpu_frac: npt.NDArray[np.float64],
    cj: npt.NDArray[np.float64],
    vcpus: npt.NDArray[np.float64],
    paused: npt.NDArray[np.bool_] | None,
    weights: npt.NDArray[np.float64],
    link_clocked: npt.NDArray[np.bool_],
    vf_max: npt.NDArray[np.float64],
    vf_min: npt.NDArray[np.float64],
    is_file: npt.NDArray[np.bool_] | None,
    file_left: npt.NDArray[np.float64],
    rx_share: npt.NDArray[np.float64],
    arrivals: npt.NDArray[np.float64],
    req_bytes: npt.NDArray[np.float64],
    capacity: npt.NDArray[np.float64],
    cores: npt.NDArray[np.float64],
    backend_cores: npt.NDArray[np.float64],
    order: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    mig_src: npt.NDArray[np.int64],
    mig_dst: npt.NDArray[np.int64],
    mig_cap: npt.NDArray[np.float64],
    offered: npt.NDArray[np.float64],
    req_idx: npt.NDArray[np.int64],
    req_resp_bits: npt.NDArray[np.float64],
    resp_s: npt.NDArray[np.float64],
    served_req: npt.NDArray[np.float64],
    backlog_bits: npt.NDArray[np.float64],
    dt: float,
    guest_ns_per_packet: float,
    virtio_guest_ns_per_packet: float,
    virtio_host_ns_per_packet: float,
    virtio_backend_ns_per_vm: float,
    virtio_pps_limit: float,
    virtio_flow_limit: float,
    tcp_link_clocked: bool,
    dedicated_backend: bool,
    vcpu_load: bool,
    weights_whole: bool,
    any_asks: bool,
    vf_latency: float,
    virtio_latency: float,
    sched_quantum: float,
    request_round_trips: float,
    request_fixed_latency: float,
    guest_ns_per_request: float,
    threads: int = 1,
) -> tuple[_Eight, _Eight, npt.NDArray[np.float64], npt.NDArray[np.int64]]: ...
