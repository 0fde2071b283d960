"""The simulated cluster's state: every VM of every host in flat numpy arrays, and its
operations (see :mod:`sova.sim.engine` for what a tick does with them).

Split from the engine so that the tick's parts (:mod:`sova.sim.workload`,
:mod:`sova.sim.network`, :mod:`sova.sim.migration`) are written against the state they
read and write, and the engine, which composes them, is the only module importing them.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from sova import model
from sova.clock import Environment
from sova.policy.sharing import ShareHosts, ShareParams
from sova.policy.waterfill import Links
from sova.scenario import Scenario

INF = float("inf")


@dataclass
class Op:
    op_id: str
    host: str
    action: model.Action
    state: str = "pending"
    detail: str = ""


@dataclass(frozen=True)
class FileDone:
    vm: str
    host: str
    start_s: float
    end_s: float
    size_bytes: int


@dataclass
class MigrationState:
    vm: int
    src: int
    dst: int
    op: Op
    cap_bps: float
    start_s: float
    copy_from_s: float
    round_left_bytes: float
    dirty_bytes: float = 0.0
    rounds: int = 1
    sent_bytes: float = 0.0
    fail_at_round: int = 0  # 0 = does not fail


@dataclass
class LoadStatic:
    """What the tick derives from the workload parameters alone (kind, duty, rate,
    packet size, ...), which only :func:`set_workload` writes: derived once per change
    instead of every tick (the workloads are piecewise constant). Each array is computed
    by the same expression the tick used, so every value is the same float."""

    net_live: np.ndarray  # VMs whose network duty cycle is strictly between 0 and 1
    net_full: np.ndarray  # 1.0 where the network duty is >= 1, else 0.0
    net_live_duty: np.ndarray
    cpu_live: np.ndarray
    cpu_full: np.ndarray
    cpu_live_duty: np.ndarray
    asks: np.ndarray  # VMs with a request rate
    ask_rate: np.ndarray  # their rates
    streamy: np.ndarray  # kind <= 1 (duty and bulk streams)
    is_req: np.ndarray  # kind == 2
    req_idx: np.ndarray  # flatnonzero(kind == 2)
    any_req: bool
    file_kind: np.ndarray  # kind == 3
    any_file_kind: bool
    traces: np.ndarray  # flatnonzero(kind == 4)
    ingress_div: np.ndarray  # 8 * max(request bytes, 1)
    pkt_bits: np.ndarray  # pkt_bytes * 8.0
    pkts_per_bit: np.ndarray
    weights: np.ndarray  # max(streams, 1): the PF's TCP-stream weights
    weights_whole: bool  # every weight a whole number (the water-fill's exact sums)
    link_clocked: np.ndarray  # (kind <= 1) | (kind == 3)
    req_resp_bits: np.ndarray  # resp_bytes[req_idx] * 8.0


class EngineState:
    """The arrays, the operations and their listeners, and where each VM runs;
    :class:`sova.sim.engine.Engine` adds the tick and the driver views."""

    def __init__(self, scn: Scenario) -> None:
        self.scn = scn
        self.profile = scn.profile
        # threads the compiled core shares each tick's VMs and hosts among (`sova simulate
        # --threads`): the same outputs for any number, set before the first tick
        self.threads = 1
        self.env = Environment()
        self.host_names = [h.name for h in scn.hosts]
        self.host_index = {n: i for i, n in enumerate(self.host_names)}
        self.hosts = [scn.model_host(h) for h in scn.hosts]
        self.vm_names = [v.name for v in scn.vms]
        self.vm_index = {n: i for i, n in enumerate(self.vm_names)}
        self.vms = scn.model_vms()
        H, N = len(self.hosts), len(self.vms)
        self.H, self.N = H, N
        self.cores = np.array([h.cores for h in self.hosts], dtype=float)
        self.host_mem = np.array([h.memory_bytes for h in self.hosts], dtype=float)
        self.capacity = np.array([h.nic.capacity_bps for h in self.hosts], dtype=float)
        # each VM's host, a map built once (a scan per VM is O(hosts): 20k-VM worlds)
        home: dict[str, str] = {}
        for hs in scn.hosts:
            for v in hs.vms:
                home.setdefault(v, hs.name)
        self.host = np.array([self.host_index[home[v]] for v in self.vm_names], dtype=np.int64)
        self.vcpus = np.array([v.vcpus for v in self.vms], dtype=float)
        self.mem = np.array([v.memory_bytes for v in self.vms], dtype=float)
        self.ready = np.array([v.failover_ready for v in scn.vms], dtype=bool)
        # Cores of a driver domain (Xen IDD) that runs the backend apart from the vCPUs;
        # 0 = the backend shares the host's cores (KVM vhost).
        self.backend_cores = np.array([h.backend_cores or 0.0 for h in scn.hosts], dtype=float)
        self._dedicated_backend = bool((self.backend_cores > 0).any())
        # device-level ingress QoS (bit/s of incoming requests; inf = none)
        self.ingress_limit = np.array(
            [INF if v.ingress_limit is None else v.ingress_limit for v in scn.vms], dtype=float
        )
        self._ingress_limited = bool(np.isfinite(self.ingress_limit).any())
        # one array per VM (or host) and quantity, zeroed: the engine's state
        self._init_workload(N)
        self._init_nic(N)
        self._init_counters(N, H)
        # the last tick's tx summed by host, without migration streams (the world's
        # statistics read it); None after a VM moved
        self.tx_by_host: np.ndarray | None = None
        # The workloads' draws are the core's counter-based streams (sova.policy.tick), keyed
        # by the seed, the tick's number and each VM's number of resets: policy-independent.
        self.seed = scn.seed
        self.ticks = 0  # ticks run so far: the next tick's number
        self.resets = np.zeros(N, dtype=np.int64)
        self.orng = np.random.default_rng([scn.seed, 2])  # operations
        self.ops: dict[str, Op] = {}
        self._ids = itertools.count()
        self.migrations: dict[int, MigrationState] = {}
        self.files_done: list[FileDone] = []
        self.migration_log: list[dict[str, float | str]] = []
        self.on_op_done: list[Callable[[float, Op], None]] = []
        self.on_submit: list[Callable[[float, Op], None]] = []
        self._members: list[np.ndarray] | None = None
        self._links: Links | None = None
        self._trace_cache: dict[str, dict[str, np.ndarray]] = {}
        self._load_static: LoadStatic | None = None  # rebuilt after set_workload
        # the tick's host columns and parameters, with what they were built from
        # (sova.sim.network._fixed)
        self._share_fixed: tuple[Links, LoadStatic, float, ShareHosts, ShareParams] | None = None

    def _init_workload(self, N: int) -> None:
        """Each VM's workload parameters and duty-cycle state (set by set_workload)."""
        f = np.zeros
        # workload parameters
        self.kind = f(N, dtype=np.int64)
        self.net_duty, self.cpu_duty = f(N), f(N)
        self.rate, self.streams = f(N), np.ones(N)
        self.pkt_bytes, self.rx_share = np.full(N, 1448.0), np.full(N, 0.023)
        self.req_rate, self.resp_bytes, self.req_bytes = f(N), f(N), f(N)
        self.ns_per_byte = f(N)
        self.file_left, self.file_size = f(N), f(N)
        self.file_start = f(N)
        self.trace_col: list[np.ndarray | None] = [None] * N
        self.trace_t: list[np.ndarray | None] = [None] * N
        # per-sample CPU busy share (0..1 of the vCPUs) of trace VMs with a cpu_column
        self.trace_cpu: list[np.ndarray | None] = [None] * N
        # duty-cycle state: cycle start and length, for the network and the CPU benchmark
        self.net_start, self.net_len = f(N), np.ones(N)
        self.cpu_start, self.cpu_len = f(N), np.ones(N)

    def _init_nic(self, N: int) -> None:
        """Each VM's NIC state: VF held, its rates, guest limits, pauses, migrations."""
        f = np.zeros
        # NIC state
        self.on_vf = f(N, dtype=bool)
        self.vf_index = np.full(N, -1, dtype=np.int64)
        self.vf_max = np.full(N, INF)
        self.vf_min = f(N)
        self.guest_limit = np.full(N, INF)
        self.guest_pps = np.full(N, INF)
        self.paused_until = np.full(N, -INF)
        # the latest paused_until: no VM is paused from then on (the tick skips the mask)
        self.paused_through = -INF
        self._no_vms = f(N, dtype=bool)
        self.migrating = f(N, dtype=bool)

    def _init_counters(self, N: int, H: int) -> None:
        """The cumulative counters drivers read, and the last tick's figures for reports."""
        f = np.zeros
        # counters (cumulative, what drivers read)
        self.cpu_ns, self.steal_ns = f(N), f(N)
        self.rx_b, self.tx_b, self.rx_pk, self.tx_pk = f(N), f(N), f(N), f(N)
        self.h_cpu_ns, self.h_rx_b, self.h_tx_b = f(H), f(H), f(H)
        # last tick, for reports
        self.offered, self.tx, self.rx, self.cpu_use = f(N), f(N), f(N), f(N)
        self.resp_s, self.served_req = f(N), f(N)
        self.backlog_bits = f(N)
        self.host_cpu_util, self.host_net_util = f(H), f(H)
        self._host_scale_vm = np.ones(N)

    def _complete(self, op: Op, state: str, detail: str) -> None:
        op.state, op.detail = state, detail
        for listener in self.on_op_done:
            listener(self.env.now, op)

    # ------------------------------------------------------------------ placement

    def move(self, i: int, dst: int) -> None:
        """VM ``i`` now runs on host ``dst`` (a finished migration): the only writer of
        ``host``, so the per-host member lists the driver views read stay right."""
        self.host[i] = dst
        self._members = None
        self._links = None
        self.tx_by_host = None  # summed before the move: no longer each host's

    def links(self) -> Links:
        """Every VM laid out by host (the tick's water-fills), rebuilt after a move."""
        if self._links is None:
            self._links = Links.of(self.host, self.H)
        return self._links

    def _members_of(self, hi: int) -> np.ndarray:
        # Every agent reads its host's VMs several times a second: a scan of all N VMs per
        # read made a tick cost O(hosts x VMs). One stable sort per placement change keeps
        # each host's VMs in index order, as the scan gave them.
        if self._members is None:
            order = np.argsort(self.host, kind="stable")
            bounds = np.searchsorted(self.host[order], np.arange(self.H + 1))
            self._members = [order[bounds[h] : bounds[h + 1]] for h in range(self.H)]
        return self._members[hi]
