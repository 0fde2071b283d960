"""The sim_scale workload through ``sova simulate`` itself: the command a user runs.

This script generates the workload (:func:`build`, :func:`initial_mix`, :func:`changes`:
duty, request, bulk and file VMs, duty drift every minute, surges on 5 % of the hosts;
formerly ``sim_scale.py``, which drove the engine with a second, benchmark-only copy of the
policy, now deleted) and writes it as a scenario YAML with the sova VF
policy and the sova bandwidth allocator every second, and runs
``sova simulate SCENARIO --no-progress`` in a child process per size, timing the whole
command (scenario load, simulation, outputs and report) and reading the child's peak RSS
from ``wait4``. ``--cloudsim DIR`` runs CloudSim Plus (``perf.ScaleBench`` from a built copy
of ``../shared/bench/cloudsim-compare``) at the same sizes, S = 1 s, and prints ratios.

    .venv/bin/python benchmarks/simulate_scale.py --sizes 100x3 --duration 300
    .venv/bin/python benchmarks/simulate_scale.py --sizes 100x3,1000x3 --duration 300 --reps 3
    .venv/bin/python benchmarks/simulate_scale.py --sizes 100x3 --duration 300 --profile
    .venv/bin/python benchmarks/simulate_scale.py --sizes 1000x20 --physics-only --reps 3
    .venv/bin/python benchmarks/simulate_scale.py --sizes 1000x3 --sim-only --sova-src OLD/src

Measured on the shared 2-core development machine while seven other sessions ran (load
average 9-11, so wall times swing 2-4x between runs; CPU time is the steadier figure), seed 1,
sova VF policy + sova bandwidth allocator, 100 hosts x 3 VMs, 300 simulated s, median of 3
runs of the whole ``sova simulate`` command (issue 23's session):

    code                         wall s  CPU s  VM-steps/s (wall)  peak RSS
    before (main c949132)          53.7   18.4              1,676   211 MiB
    after (branch sim)             53.0    8.5              1,700   151 MiB
    (walls before: 25.6, 53.7, 126.6 s; after: 53.0, 56.0, 36.1 s)

The CPU halved: ~70 % of the old command was the report (a legend entry per VM: 49 s of
66 s under cProfile), now aggregated past 20 VMs (sim/fleet.py); the engine's driver views
no longer scan all VMs per read.

Beside CloudSim Plus 8.5.7 (``--cloudsim``, interleaved, median of 3, same size, S = 1 s):

    hosts  VMs  Sova wall/CPU/RSS       CS+ wall/CPU/RSS       CS+/Sova: speed  memory
      100  300  40.4 s / 7.8 s / 149 MiB  15.0 s / 3.3 s / 304 MiB        0.37    2.04

so the product path is still ~2.5x slower than CloudSim Plus (the issue asks >= 10x faster)
and uses half its memory (the issue asks a quarter).

1,000 hosts x 3 VMs, 300 simulated s, ``run_policy`` then the outputs in one process:
simulation 250.8 s wall / 74.8 s CPU (~12 k VM-steps/s of CPU), peak RSS 384 MiB; writing
every output file 6.1 s wall / 2.3 s CPU and the report alone 4.2 s wall / 1.4 s CPU (median
of 3). An hour of it (1.08 M timeline rows) was not run in this session.

Issue 23's second session (branch sim): the bandwidth loop runs as array kernels
(``sova.agent.bandwidth``, ``sova.policy.kernels``) for every host at once
(``sova.sim.fleet_bandwidth``), and a round's limit calls land in one batch on the event
clock; golden outputs unchanged. Load average 18-32 on the 2 cores throughout, so CPU
seconds are the figure to compare; simulation only (``run_policy`` in one process):

    size (hosts x VMs x s)   before: CPU s   after: CPU s   VM-steps per CPU-s   peak RSS
    100 x 3 x 300                      5.0            1.6               56,300     67 MiB
    1,000 x 3 x 300                   74.8           15.3               58,700    151 MiB
    1,000 x 20 x 300                     -           92.1               65,200    582 MiB

(before at 1,000: the figure above, 384 MiB). Cost per VM-step is flat from 100 to 1,000
hosts and from 3 to 20 VMs per host (linear in hosts x VMs; 10,000 hosts not measured yet:
the run did not finish under this load). The issue's 5 M VM-steps/s is ~75x away. The whole
``sova simulate`` command beside CloudSim Plus 8.5.7 (``--cloudsim``, one run each, 300 s):

    hosts  VMs   Sova wall / CPU / RSS      CS+ wall / CPU / RSS     CS+/Sova: wall  CPU  memory
      100   300   75.7 s / 5.5 s / 137 MiB   22.5 s / 3.6 s / 304 MiB          0.30  0.65    2.22
    1,000 3,000  294.8 s / 24.4 s / 226 MiB  87.1 s / 7.5 s / 442 MiB          0.30  0.31    1.96

Sova is still ~3x slower than CloudSim Plus in CPU (the issue asks >= 10x faster) and uses
half its memory (a quarter asked). What remains is the control period's per-host Python:
sensing windows and factors, VF scheduling, hotspot reports and the timeline rows
(``HostAgent.step``, about half of the simulation now), then the engine's per-tick numpy
calls.

Issue 23, third session (branch sim2): the sensing runs as the policy's array kernel
(``sova.policy.kernels.SensorKernel``) for every host at once (``sova.sim.fleet_sensing``);
each agent gets its VMs' factors. Golden outputs unchanged. Simulation only (``run_policy``),
CPU seconds, load average 5-9 on the 2 cores, alternating before/after runs:

    size (hosts x VMs x s)   before: CPU s (median of 5)   after   VM-steps per CPU-s   peak RSS
    1,000 x 3 x 300                              10.98         8.33              108,000  134 MiB
    (runs: before 10.03-11.51 s, after 7.01-11.28 s; 100 x 3 x 300 once: 1.25 -> 0.96 s)

The VF scheduling still runs per host (``vfsched.schedule`` through the VF policies); its
array form, equality-tested, was in the deleted harness (git history before this change,
``benchmarks/batch_controller.py: schedule_batch``) for when ``World`` can call it.

Where the time of the simulation went before that (cProfile of ``run_policy``, 100 x 3, 300 s):
the agents' phases ~88 % (``HostAgent.bandwidth_step`` alone ~60 %: every host samples,
reads its inventory, allocates and submits a VF rate every second), the engine's driver views
(``sample``/``inventory``) ~24 % of that, operations on the event clock ~10 %; the vectorised
physics (``Engine.tick``) and the World's per-tick statistics are a few per cent. The
remaining speed-up is the issue's array kernels for the whole policy (src/sova/agent/**).

Issue 23, fourth session (branch speed). cProfile of ``run_policy`` (1,000 x 3 x 300 s) on
main: the agents' control step host by host ~40 % (VF scheduling ``vfsched.schedule`` ~13 %,
reading each host's sample for its loads ~7 %, inventories, candidates, reconcile), the
manager's round ~17 % (each agent's report ~6 %), the timeline rows ~15 % (a row built, then
copied by ``dataclasses.replace`` to add the world's columns), the bandwidth pass ~13 %, and
Python's cyclic garbage collector 27 % of the CPU without the profiler (``gc.callbacks``: 1,474
passes, ~1,000 cyclic objects found, the growing records rescanned on every pass). Changes:
the collector is off while a world runs (one full pass at the end), the host and VM load
shares come from an array kernel (``kernels.load_shares``, held equal to
``host_load``/``vm_loads`` by a property test) in the world's sensing pass so no agent reads a
sample, timeline rows are built once with the world's columns, agents with nothing in flight
are not polled, and limit changes of quiet hosts go into the round without per-flow checks.
Golden outputs unchanged. Simulation only (``run_policy``), CPU seconds, alternating
before/after, load average 20-29 on the 2 cores (walls 22-246 s, so not comparable):

    size (hosts x VMs x s)   before (main 8af3cf9): CPU s   after   VM-steps per CPU-s   peak RSS
    1,000 x 3 x 300                  11.86 (11.41-12.47)   6.58 (6.48-6.59)   137,000  149 MiB

(1.8x; main measured 8.3 s in the previous session at load 5-9, so the machine's load
inflates CPU seconds by ~40 % here.) After, one run each at load 17-56 (``run_policy``):

    size (hosts x VMs x s)   CPU s   VM-steps per CPU-s   peak RSS
    100 x 3 x 300             1.05               85,400     69 MiB
    1,000 x 3 x 300           6.58              137,000    149 MiB
    10,000 x 3 x 300         60.42              149,000    950 MiB
    1,000 x 20 x 300         26.93              223,000    556 MiB

Cost per VM-step is flat from 1,000 to 10,000 hosts (linear in hosts; 100 hosts pays the
fixed per-tick costs) and falls with more VMs per host (the per-host Python is shared).
The issue's 5 M VM-steps/s at 1,000 x 20 is ~22x away.

The issue's workload through ``sova simulate`` itself (1,000 x 3, one simulated hour, 1 s
ticks, sova VF policy + sova bandwidth allocator; outputs and report included) beside
CloudSim Plus 8.5.7 (``--cloudsim``, S = 1 s, one run each, load 17-56):

    hosts  VMs    Sova wall / CPU / RSS       CS+ wall / CPU / RSS     CS+/Sova: wall  CPU  memory
    1,000 3,000   681.8 s / 99.6 s / 895 MiB  361.7 s / 47.3 s / 463 MiB         0.53  0.47    0.52

Sova is ~2.1x slower than CloudSim Plus in CPU (the issue asks >= 10x faster: ~21x remain)
and uses ~1.9x its memory (a quarter asked: ~8x remain). The memory is the timeline: 1.08 M
``TimelineRow`` objects (a dataclass and ~10 float objects each) for the hour. The next
steps, by size: (1) the control step as array kernels for all hosts (the deleted harness's
``schedule_batch`` for VF scheduling, the operation table and the reconcile planned from
arrays, so per-host Python runs only for hosts whose VF holders change); (2) the timeline
kept as columns (numpy arrays per period) instead of row objects, for time and memory;
(3) the manager's reports as arrays (each agent's ``host_report`` builds validated objects per
VM every period); (4) then the engine's tick itself: the world without agents (physics and
per-tick statistics only) takes 0.74-0.82 CPU-s per 300 s at 1,000 x 3 (median of 3), i.e.
~1.1 M VM-steps per CPU-s as a ceiling, below 10x CloudSim Plus's ~230 k VM-steps per CPU-s
over an hour; the per-tick arithmetic (many small numpy calls) must be fused (fewer, larger
array calls, or a compiled kernel) to reach the issue's target.

Issue 23, fifth session, branch speedctl: the VF scheduling is one kernel over any number of
hosts (``sova.policy.vfkernel``; ``vfsched.schedule`` stays its specification, held equal by
property tests on random heterogeneous clusters). The VF policies call it for their one host;
the world calls it once for every host (``sova.sim.fleet_control``) and hands each agent its
decision, and a host whose decided holders and rates are in place, with nothing in flight or
leaving, skips the reconcile; the world re-reads a host's inventory only where a VM's state
changed (about 15 % of the host-periods here: the bandwidth loop moves limits on most hosts
every period); an agent's per-VM load report is built when the manager reads it. Golden
outputs unchanged. Simulation only (``run_policy``), CPU seconds, alternating before/after,
load average 8-12 on the 2 cores:

    size (hosts x VMs x s)   before (main 834e2c2): CPU s   after   VM-steps per CPU-s
    1,000 x 3 x 300                   5.91 (5.57-5.98)   4.94 (4.79-5.15)   152,000 -> 182,000

(1.20x). By phase (one run each, ``process_time`` around each part): the agents' control
steps with the world's scheduling 2.36 -> 1.89 CPU-s (of which the all-hosts scheduling,
inventories and per-host decisions 0.74), the manager's round with the reports 1.11 -> 0.80;
the rest is unchanged: sensing 0.53, timeline rows 0.59, the engine's tick 0.61, the
bandwidth loop. What remains of the control step is per host but small: each host's
``StepReport`` (inventory, operation table, decision objects), which ``World._record`` reads
for the timeline; built from arrays, with the timeline kept as columns, it would go.

Issue 23, fifth session, branch speedout (memory and outputs). The timeline is kept as
columns (``record.Timeline``: float64 and coded-text chunks of 8,192 rows, moved to an
unlinked temporary file past 16 MiB; ~110 bytes a row there), the per-tick host series
keep every tick only up to 10 hosts and per-period means past that
(``world.HostSeries``), ``timeline.csv`` is written a block of columns at a time with the
numbers laid out digit by digit (``writer.write_csv_columns``, byte-identical), and
matplotlib is imported only when the report draws. Golden outputs and the 1,000-host
report.md unchanged. The whole ``sova simulate`` command, one run each, load 10-13 (measured
before rebasing onto speedctl's branch):

    size (hosts x VMs x s)   before (main 834e2c2): wall / CPU / RSS   after: wall / CPU / RSS
    1,000 x 3 x 300             30.7 s / 11.4 s / 221 MiB                 26.0 s / 9.5 s / 169 MiB
    1,000 x 3 x 3,600           681.8 s / 99.6 s / 895 MiB (4th session)  225.9 s / 83.9 s / 218 MiB

So an hour now takes 218 MiB, ~0.47 of CloudSim Plus's 463 MiB (the issue asks a
quarter, ~115 MiB). Stages of the hour in one process (CPU s, peak RSS so far): the
imports 54 MiB; loading the scenario YAML (0.8 MB, PyYAML's pure-Python loader in
``scenario._yaml``) peaks at 114 MiB by itself, about the target before anything runs
(``yaml.CSafeLoader`` measured ~20 MiB less); the run 63 s, 142 MiB at its end with
1.08 M rows (before: ~860 MiB); then the summary 0.15 s, timeline.csv 3.5 s (161 MiB)
and the report 1.6 s (204 MiB: matplotlib and its figures add ~45 MiB). Writing at
1,000 x 3 x 300 s (CPU s, one process, before -> after): timeline.csv 0.71 -> 0.31, the
report 1.09 -> 1.05, the summary 0.06 -> 0.04; at one hour timeline.csv (111 MB) 3.5 s
(the row writer: ~8.5 s) and the report 1.6 s (the issue: <= 10 s; images looked at).
What remains for the quarter: the scenario loader's peak, matplotlib (~30 MiB when the
report draws) and the report's period x VM grids (float32, ~4 MB a metric an hour).

Issue 23, fifth session, branch speedeng: the engine's tick. The two water-fills of every
tick (the backend's packet-rate share, the PF's egress share) sorted all flows at once; they
now sort within each host's row of a per-host layout built once per placement
(``sova.policy.waterfill.Links``), keeping the flat form's running sums so every share is
the same float (property test against the flat form), and skip the sort when every host
clearly has room for its flows. Duty cycles advance only the processes whose cycle ended in
the tick, Poisson arrivals are drawn only for request VMs, and the bandwidth loop writes
landed limits into the agents' records when they are read instead of every VM every second.
Golden outputs unchanged. CPU seconds, before (main 834e2c2) and after (this branch on
834e2c2, without speedctl's changes) alternating, median of 3 (range in brackets), load
average 6-12 on the 2 cores; reproduce with
``--physics-only`` (the world without agents: engine ticks and per-tick statistics) or
``--sim-only`` (``run_policy``), ``--sova-src`` for the before tree:

    size (hosts x VMs x s)   what               before: CPU s        after: CPU s        VM-steps per CPU-s
    1,000 x 3 x 300          without agents     0.76 (0.64-0.91)     0.44 (0.34-0.46)    1.18 M -> 2.05 M
    1,000 x 20 x 300         without agents     3.85 (3.80-3.86)     1.86 (1.74-1.96)    1.56 M -> 3.23 M
    1,000 x 3 x 300          run_policy         5.40 (5.03-5.64)     4.74 (4.62-5.05)    167 k -> 190 k
    1,000 x 20 x 300         run_policy         24.97 (24.50-29.20)  20.51 (19.46-20.66)  240 k -> 293 k

The world without agents reaches ~3.2 M VM-steps per CPU-s at 1,000 x 20 (the issue asks
5 M for the whole run): what remains of a tick is mostly the random draws every VM needs
(rate and CPU jitter: ~0.6 ms of a ~6 ms tick at 20,000 VMs), the PF's fill on congested
hosts (a row sort per host) and ~150 small array operations. In ``run_policy`` the agents'
control period and the records dominate (see the sessions above).

The fifth session's branches together (main 834e2c2 before, cb774cc after; ``--sim-only
--reps 3``, ``--sova-src`` for the before tree, run back to back at load 5-9):

    size (hosts x VMs x s)   before: CPU s   after: CPU s   VM-steps per CPU-s   peak RSS
    1,000 x 3 x 300                   4.92            3.81     183 k -> 236 k    143 -> 112 MiB

The issue's workload through ``sova simulate`` itself beside CloudSim Plus 8.5.7
(``--sizes 1000x3 --duration 3600 --cloudsim``, S = 1 s, one run each, load 3-5 with a CI
run beside it):

    hosts  VMs    Sova wall / CPU / RSS        CS+ wall / CPU / RSS       CS+/Sova: wall  memory
    1,000 3,000   52.7 s / 51.6 s / 212 MiB    33.9 s / 33.5 s / 658 MiB          0.64    3.10

(the fourth session: 99.6 CPU-s and 895 MiB beside CloudSim Plus's 47.3 CPU-s and 463 MiB).
Sova uses 32 % of CloudSim Plus's memory (a quarter asked) and takes 1.6x its time: ~15x
remain to the issue's 10x faster.

Issue 23, fifth session, second wave, branch speedrec: less per-host Python in the control
period. The timeline rows of the hosts the world decided for are built from the arrays
(``record.column_values``: the sensing's factors and the inventory columns the agents read,
``fleet_control.Rows``) instead of from each step report; a host's per-VM factors and load
shares are built only when read (``fleet_sensing.HostFactors``, ``HostLoads``: the decided
hosts' factors never are, the loads only for hosts a manager's round looks at); the
manager takes the period's reports as one batch (``ManagerCore.ingest_many``, which
``ingest`` also goes through). Golden outputs unchanged. ``--sim-only``, CPU seconds, before
(main cb774cc, ``--sova-src``) and after alternating, load average 3.2-3.6 on the 2 cores:

    size (hosts x VMs x s)   before: CPU s             after: CPU s              VM-steps per CPU-s
    1,000 x 3 x 300          3.66 (3.25-4.11; 6 runs)  3.19 (3.00-3.72; 6 runs)  246 k -> 283 k
    1,000 x 20 x 300         14.24 (14.03, 14.45)      11.86 (11.58, 12.13)      421 k -> 506 k

(1.15x and 1.20x). By phase at 1,000 x 3 (``process_time`` around each, one run, before
this branch): the manager's round with the reports ~0.8 CPU-s (its plan ~0.4: the hot-spot
windows rebuilt from each host's deque of ``Utilisation``, a "not hot" reason string per
host), the world's VF scheduling pass ~0.8 (inventories read again for ~75 % of the VMs:
the bandwidth loop changes a guest limit on most VMs every period; each host's
``VFDecision`` with its reasons), the agents' steps ~0.6 (``StepReport``, operation table),
the sensing ~0.5 (now ~0.35). Next: the manager's history as a host x window array (the
round's windows without a per-host rebuild), the inventory re-read per VM rather than per
host, and the decided hosts' step without a ``StepReport``.

Issue 23, fifth session, second wave, branch speedmem (peak memory of the whole command).
RSS at the phase boundaries of the real command (``/proc/self/status``, the high-water mark
reset per phase) and ``tracemalloc`` snapshots, 1,000 x 3, one hour: the peak is the report;
what Python holds live is small (~22 MiB after the run: the scenario's models ~10, the
timeline's in-memory chunks, the stats), the rest is the interpreter and its modules and
memory freed but not returned (the parse's and the run's transients). Changes: the scenario
YAML parsed by libyaml's safe loader (``scenario.SAFE_LOADER``; same data for every shipped
file, a test), the fleet report grids one metric at a time and counts VF holders a period at
a time (no index arrays over every VF-period), the summary counts periods a chunk at a time,
and ``sova.demo`` (registered on every ``sova`` run) imports httpx only when the demo talks to
its daemons. Golden outputs unchanged; the hour's report, PNGs and CSVs byte-identical.
Whole command, one run each, load 2-4 (wall/CPU swing with load; memory does not):

    size (hosts x VMs x s)   step                               wall / CPU s    peak RSS
    1,000 x 3 x 3,600        main cb774cc                        55.0 / 49.4     221 MiB
                             + libyaml loader                    60.7 / 54.5     210 MiB
                             + report grids, VF counts           96.1 / 62.7     196 MiB
                             + no httpx, periods by chunk        63.6 / 47.2     192 MiB
                             rebased on main 3a2534b             88.7 / 61.4     191 MiB

So 192 MiB: 0.41 of CloudSim Plus's 463 MiB of the fourth session, 0.29 of the 658 MiB it
took in the side-by-side run above (a quarter asked). Where it is now
(RSS, one run): imports 56 MiB (numpy ~22, pydantic, typer/rich, the sova modules); the
scenario parse +38 (its live result ~10 MiB; a 40 MiB transient of libyaml's node tree and
the dict leaves pymalloc arenas partly used); the run +40 (~13 MiB live); matplotlib's import
+11 on top of that (~30 MiB alone: its modules' code objects, ~14 MiB traced) and the report
+36 at its peak (the first figure's fonts, and ``savefig`` of the two heat maps: matplotlib's
image resampling ~14 MiB each). What remains for the quarter is mostly not data: a leaner
parse than PyYAML's node tree (or a scenario format for fleets that is not one YAML
document), the report drawn without matplotlib's image resampling (heat maps written as
images at their own resolution), and fewer modules imported.

Issue 23, fifth session, third wave, branch speedagent (the control period outside the
manager). The world re-reads an inventory per changed VM: a ``VMState`` is built again only
for the VMs whose columns moved (the rest keep theirs), each changed host's ``Inventory``
from those; the decided hosts' ``VFDecision`` come from lists over all hosts
(``vfkernel.Decisions.of_hosts``: each host's PQ, GQ and ranking are slices) with their
reasons written when read (``vfkernel.Reasons``); an agent's step builds its operation table
when read (``loop.OperationTable``) and no fence set without fences; the dsr-iov policy
sets its holders' VF times without building the holders' set; the world polls only the
agents an operation was submitted from. Golden outputs unchanged. 1,000 x 3 x 300 s,
``process_time`` of the world's control phase without the manager's round and the
timeline rows (sensing, the VF scheduling pass, the agents' steps), main f715164 and this
branch alternating, one run each, load average 3-21 (2026-11-27):

    control phase CPU s   before: 2.19, 1.90, 1.59   after: 2.10, 1.77, 1.39   (-4 to -13 %)
    whole run_policy      before: 4.06, 4.26, 3.31, 3.81, 4.04, 3.55, 4.41, 4.93
    (--sim-only)          after:  4.23, 4.15, 3.02, 4.06, 3.43, 4.16, 4.44, 4.93

so the whole simulation moved less than this machine's noise (medians 4.05 -> 4.16 CPU-s
over 8 alternating runs each; the load swung 3 -> 21). With a per-call timer (one run,
load 7): the VF scheduling pass 1.05 -> 0.84 CPU-s (inventories 0.43 -> 0.35; the per-host
decisions, 0.27 before, now one pass inside it), the agents' steps 0.90 -> 0.87. What remains is per host and not
small: 92 % of the host-periods are settled (holders and rates in place), yet each still
runs ``HostAgent.step`` (~15 us: the VF policy's context and ``desired``, a ``PeriodDecision``,
a ``StepReport``), gets an ``Inventory`` (most are rebuilt: the bandwidth loop moves a guest
limit on ~75 % of the VMs each period, and each changed VM's frozen ``VMState`` costs
~2 us) and a ``Sensed`` twice (sensing, then scheduling). Cutting that needs the settled
hosts' period done from arrays with the agents' records kept as arrays (``vf_since``, the
desired holders, the snapshot), so per-host Python runs only where something changes.

Issue 23, fifth session, third wave, branch speedmem2 (2026-11-27, load average 6-16 on the
2 cores). The scenario YAML is built from libyaml's events (``scenario._events_to_data``, no
node tree; PyYAML's loader for anything beyond plain mappings, lists, scalars and anchors;
the same data for every shipped file and random documents, tests); the fleet heat maps are
drawn as the axes' pixels (``fleet._PixelGrid``; the PNGs are byte-identical to imshow's
here); the report's percentiles and per-VM volumes reduce the period x VM grid a block at a
time (same numbers). Golden outputs of every shipped scenario unchanged; the hour's
report.md, plots.json and PNGs byte-identical. RSS at the phase boundaries of the hour in
one process (high-water mark), before -> after: imports 58 -> 58 MiB, the scenario parse
99 -> 76, the run 134 -> 125 (the run now allocates fresh what it reused of the parse's
freed memory), the report's peak 190 -> 168 (the first metric plot; a heat map figure
20 -> 7 MiB alone). The whole command beside CloudSim Plus 8.5.7 (``--cloudsim``, one
run each; the first before the block-wise reductions, load 6-8; the second rebased on main
4342d8f, load 7-9):

    hosts  VMs    Sova wall / CPU / RSS        CS+ wall / CPU / RSS       CS+/Sova: memory
    1,000 3,000   70.6 s / 51.9 s / 171 MiB    59.6 s / 49.3 s / 401 MiB             2.34
    1,000 3,000   139.0 s / 52.6 s / 167 MiB   47.7 s / 50.9 s / 524 MiB             3.14
    (before, main f715164, same session: 209.2 s / 61.7 s / 190 MiB, Sova alone)

So 167-171 MiB: 0.32-0.43 of CloudSim Plus's peak beside it (401 and 524 MiB; it swings
with the JVM's heap sizing), not yet the quarter asked (~100-131 MiB). What stays:
the interpreter and numpy (~28 MiB), pydantic and the scenario models' schemas (~16),
typer/rich (~5), matplotlib when the report draws (~20-40: its modules, PIL, the font
cache), the run's records and stats (~50 with freed-but-held memory), the report's grids.

Issue 23, fifth session, third wave, branch speedmgr: the manager's round. The core keeps its
detector windows also as a host x window ring of floats (``fastplan.WindowArrays``, written
once per round from the reports' values), so the round's hot-spot test is one array pass
with no per-host rebuild; ``HostReport`` objects are built only for the hosts the exact
search looks at (the hot ones and the coldest few), a host that is not hot gets its "not hot"
reason only when its signal is read (``fastplan.Signals``; the world reads the flagged ones),
and the leases a report can close are indexed once per batch. ``coordinate`` stays the
specification (a hypothesis test holds the round equal to it on random heterogeneous
clusters: short, full and wrapped windows, silent hosts, restarted windows). Golden outputs
unchanged. ``--sim-only``, CPU seconds, before (main f715164, ``--sova-src``) and after
alternating, 6 runs each, load average 3.7-7.7 on the 2 cores (2026-11-27, measured before
rebasing onto speedagent's branch):

    size (hosts x VMs x s)   before: CPU s        after: CPU s         VM-steps per CPU-s
    1,000 x 3 x 300          4.09 (3.44-4.45)     3.63 (3.35-4.29)     220 k -> 248 k

(1.13x). By phase (``process_time`` around each, 2 runs each, alternating): the manager's
round with the reports 0.65-0.75 -> 0.33-0.38 CPU-s, of which the plan 0.41-0.45 ->
0.07-0.08; what remains of it is taking the reports (0.24-0.30: each agent's
``host_report``, a validated ``Utilisation`` and ``HostReport`` per host, about half, then
the core's per-report bookkeeping), which arrays from the world's sensing pass would replace.

Issue 23, fifth session, third wave, branch speedio: the command outside the simulation
loop. CPU seconds by phase of the real command's calls (``process_time`` around each,
one run on main f715164, 1,000 x 3, one hour, load 5-8, so CPU is inflated ~1.5x):

    phase                                              CPU s
    interpreter start and imports                       0.92
    scenario load and validation (load_sweep)           1.00
    run_points (the simulation)                        64.29
      of which recording the timeline (World._record)   5.26
        the decided hosts' rows as tuples               2.20
        tuples back to columns (Timeline._seal)         1.99
        the spill to the temporary file                 0.07
    write_outputs                                       8.29
      summary                                           0.12
      timeline.csv                                      5.66 (float_cells 4.65)
      events.csv                                        0.01
      report                                            2.47
    whole process                                      74.51 (peak 201 MiB)

timeline.csv was the largest piece outside the loop, and within it the column formatter's
slow path: 12.6 % of the float cells (empty vf_rate_mbps and response_ms cells) went
through ``fmt`` one at a time. Empty, NaN and infinite cells now get fmt's fixed texts by
mask, and numbers are looked up four digits at a time in tables of fmt's own texts for
0-9999 (``writer._digit_tables``, each entry checked against ``str`` and ``format``);
the rounding to an integer is unchanged. Writing the timeline of 1,000 x 3 x 300 s (the
run pickled, 108 k rows, one process, one run each): 0.35 -> 0.11 CPU-s (the row writer:
0.99), the file byte-identical to the row writer's; the formatter alone over those
blocks 0.22-0.25 -> 0.04-0.06 CPU-s. The recording (~5 CPU-s of the hour: the decided
hosts' rows built as Python tuples from arrays, then turned back into arrays) now goes
from the world's arrays into the timeline's columns (``record.column_block``,
``Timeline.extend_columns``); its saving on the hour was not measured in the session's
time. Golden outputs unchanged.

Issue 23, fifth session, combined (every branch above merged, main 5494c5c, against the
fourth session's main 3a2534b through ``--sova-src``; the whole command on 1,000 x 3, one
simulated hour; one run each, 2026-11-27, with the fresh-clone CI's main tier running beside
them, so wall time is inflated and CPU seconds are the figure):

    tree              Sova wall / CPU / RSS       CloudSim Plus wall / CPU / RSS  (same minutes)
    3a2534b (before)  67.1 s / 59.4 s / 213 MiB
    5494c5c (after)   52.5 s / 39.7 s / 145 MiB   53.5 s / 44.1 s / 650 MiB

So 1.50x less CPU and 0.68x the memory of the session's start; beside CloudSim Plus, 0.90 of
its CPU time and 0.22 of its peak memory in this run (its peak swings with the JVM's heap
sizing: 401-658 MiB across this session's and the last's runs, so the quarter holds against
its figure in the same minutes, not against its lowest). The world without agents for the
same hour (``--physics-only``): 3.89 CPU-s, 81 MiB. That figure is the floor the 10x asks
to beat: 10x CloudSim Plus's 44.1 CPU-s is 4.4 s for the whole command, and the physics
alone takes 3.9 of it, before the interpreter and imports (~0.9), the scenario's load
(~1.0), the timeline.csv of ~111 MB (~1.3 after speedio's formatter) and any control. The
10x needs the physics itself cut several-fold (ticks skipped where nothing changes, or
fused) and a fleet-scale timeline that is not a 111 MB CSV, not only the controller's
per-host Python removed.

Issue 23, sixth session, branch speedsettle: the settled hosts' period without per-host
policy objects. Of the host-periods of 1,000 x 3 x 300 s, 92.4 % (27,732 of 30,000) are
settled: the kernel's holders are the ones the host has, at no rate, nothing in flight or
leaving. Their agents no longer run ``HostAgent.step`` (the VF policy's context, a
``VFDecision`` with its gq and reasons, a ``PeriodDecision``, an operation table, a
``StepReport``): the world hands them the PQ and ranking (``vfkernel.Decisions.queues``,
slices of lists over all hosts) and ``HostAgent.settle`` leaves the records the step would
(dwell starts, desired holders, ranking, snapshot, loads; tests/test_fleet_control.py
compares every agent's records after every period against agents stepping alone, and
test_vfkernel.py the queues against ``vfsched.schedule`` on 400 random heterogeneous
clusters). The manager takes each agent's report as its parts
(``HostAgent.report_parts``), no ``HostReport`` object. Golden outputs unchanged. Under
cProfile (one run each, shares of the world's ``advance``): the agents' steps 18 % ->
11 % (27,732 settles ~5 %, the 2,268 remaining steps with their reconciles ~6 %).
``--sim-only``, CPU seconds, before (main 5d2e5dd, ``--sova-src``) and after alternating,
5 pairs at 1,000 x 3 and 2 at 1,000 x 20, load average 8.7-10.6 on the 2 cores
(2026-11-27):

    size (hosts x VMs x s)   before: CPU s           after: CPU s            VM-steps per CPU-s
    1,000 x 3 x 300          2.64 (2.31-3.35)        2.53 (1.97-3.10)        341 k -> 356 k
    1,000 x 20 x 300         9.73 (9.48, 9.97)       9.49 (8.94, 10.03)      617 k -> 632 k
    (paired at 1,000 x 3: after - before = -0.55, -0.34, +0.03, -0.25, -0.60 s; median -0.34)

So ~10 % less CPU at 3 VMs a host and none measurable at 20, within this load's noise: the
profile's per-host share overstated the real cost (cProfile charges every Python call).
What remains per host in the control period: the settled hosts' inventories (built for the
agents' snapshots; ~75 % of the VMs change a guest limit every period), each host's
sensing ``Sensed`` and ``Loads``, the manager's per-host ingest (a validated
``Utilisation`` and a ``VMLoadReports`` a host, its deque and ring); and, larger at 20 VMs,
the bandwidth loop and the engine's tick, outside this branch.
The issue's workload through ``sova simulate`` itself (1,000 x 3, one simulated hour,
outputs and report included), one run each, after then before (``--sova-src``), load
7.5-8.3: before 230.3 s wall / 41.8 CPU-s / 149 MiB, after 163.8 s / 35.9 CPU-s / 149 MiB
(0.86x the CPU; single runs at this load swing ~15 %).

Issue 23, sixth session (branch speedphys): the tick's arrays that follow from the
workload parameters alone (duty masks and live indices, packet bits and packets per bit,
stream weights, kind masks, request VMs and their response bits) are derived once per
workload change (``sova.sim.state.LoadStatic``) instead of every second; the tick's
other expressions run in their old order, in place where a temporary was thrown away, and
masks that are all false (paused VMs, file transfers) skip their writes. Every value is
the same float: golden outputs unchanged (17 runs, 0 differences) and
``tests/test_tick_forms.py`` compares the tick byte for byte with its readable form on
random clusters. CPU seconds, 2026-11-28 00:12-00:27, load average 6.6-9, before = main
5d2e5dd through ``--sova-src``, runs alternating, median (range):

    run                                       before                after          change
    1,000 x 3 x 3600 s, --physics-only   4.16 s (4.04-4.30)    3.40 s (3.22-3.65)     -18 %
    1,000 x 20 x 600 s, --physics-only   3.74 s (3.32-3.77)    3.05 s (3.04-3.46)     -18 %
      (VM-steps per CPU-s)               3.21 M                3.93 M
    1,000 x 3 x 3600 s, --sim-only      37.4 s (one run)       35.8 s (one run)        -4 %

Not the several-fold the issue asks of the physics. Where the rest goes (1,000 x 20,
process time per part over 400 ticks, after): offer 37 % (of it the random draws the
seed's contract fixes -- the jitter's lognormal and normal for every VM, the Poisson
arrivals, the cycles' uniforms -- ~19 % of the whole, and the duty cycles' on-time 12 %),
the CPU, path and PF shares 28 % (the two water-fills 12 %), counters 9 %, request latency
7 %, the world's per-tick statistics 8 %. The random draws alone bound the byte-identical
physics at ~5x faster than now; more needs the draws' order or count changed (a new
seed contract: golden outputs re-recorded) or the tick fused below numpy (a compiled
kernel), neither done here.

Issue 23, sixth session, combined (speedsettle, speedphys and the guarantee reservations
merged: main 916a77d, against the session's start 5d2e5dd through ``--sova-src``; the whole
``sova simulate`` of 1,000 x 3, 1 h, runs alternating at nice 19 beside the fresh-clone CI's
main tier, 2026-11-28 00:53-00:58):

    code                  CPU s (2 runs)    wall s        peak RSS
    before (5d2e5dd)      29.8, 29.3        35.7, 30.1    144-146 MiB
    after (916a77d)       24.5, 25.0        30.7, 29.2    145-146 MiB

so 0.84x the CPU of the session's start. Beside CloudSim Plus 8.5.7 (``--cloudsim``,
S = 1 s, one run each, 00:44, load 1.5-3.7): Sova 25.0 s wall / 23.4 CPU-s / 145 MiB,
CloudSim Plus 26.9 s / 27.0 CPU-s / 692 MiB: 1.07x its speed by wall, 1.15x by CPU, 0.21
of its peak memory. The issue's 10x is not reached (see speedphys above for the physics'
floor under today's seed contract).

Issue 23, seventh session, branch speedsense2 (against main 74c9c5c through ``--sova-src``;
1,000 x 3, 300 simulated s, ``run_policy`` alone, alternating, 3 runs each, load 0.1-0.9,
2026-11-28 03:56-04:00): process time of the world's sensing pass (``FleetSensing.sense``,
30 periods) 0.192 s (0.179-0.231) before, 0.113 s (0.111-0.116) after; of the timeline
recording (``World._record``) 0.087 s (0.072-0.098) before, 0.043 s (0.041-0.044) after.
The pass hands on its arrays and builds a host's ``Sensed`` only when read
(``FleetSensed``); today's readers (the VF scheduling's ``measured`` and ``settle``) still
read every host, so that part moved to them until they take the arrays: the whole
``run_policy`` was 1.92 CPU-s (1.85-2.35) before, 2.02 (1.98-2.22) after, within the spread.
The timeline keeps each text column's codes of the world's name lists (no ``np.unique`` per
block); ``row_fsum`` now accepts its compensated sum within half an ulp (a quarter only
under a power of two): with a quarter, ~60 % of rows of arbitrary floats fell back to
``math.fsum``, and a (1,000 x 3) sum took 232 µs, now 76 µs. ``SensorKernel.observe``
shifts every window by slices when all shift: 25 ms over the 30 periods, now 15 ms (1 run).

Issue 23, seventh session, branch speedbw2 (the per-second bandwidth loop and polling):
FleetBandwidth asks idle/failing only of executors that announced they track something
(Executor.on_track) instead of ~600 a second, reuses the period's flow order, groups and
SLA arrays while the same VMs are measured in place, decides the allocator form once, and
sova_allocate sums exactly only hosts whose plain sum cannot prove its side of the
capacity. Golden outputs unchanged. 1,000 x 3, 300 s, before (main 74c9c5c through
``--sova-src``) and after alternating, 3 runs each, 2026-11-28 04:11-04:14, load 6.6-12:

    process_time in                        before: median (runs)    after: median (runs)
    FleetBandwidth.step                    0.48 (0.44-0.51)         0.15 (0.14-0.15)
    FleetBandwidth.settle                  0.17 (0.14-0.18)         0.02 (0.02-0.02)
    POLL branch of World._phase (+settle)  0.22 (0.20-0.23)         0.07 (0.06-0.07)
    run_policy, --sim-only (CPU s)         2.70 (2.19-2.99)         2.10 (1.99-2.17)

so step + settle ~4x cheaper (0.65 -> 0.17 CPU-s), the run ~0.78x its CPU. What is left
of step is numpy over 3,000 flows (measure, limits' exact sum of the rates, the kernel).

Issue 23, seventh session, branch speedtick2 (the tick, same floats; golden unchanged): the
duty cycles' passes reuse their draws instead of gathering them back, the PF's water-fill
takes its weights' whole-number test from ``LoadStatic`` and tests the fit by one bincount,
the world's per-host tx is the tick's own sum. ``--physics-only``, CPU s, before = main
74c9c5c (``--sova-src``) and after alternating, median (range) of 3, 2026-11-28 03:34-03:37,
load average 10 falling to 2: 1,000 x 3 x 3600 s 3.54 (3.26-3.62) -> 2.86 (2.54-3.01),
-19 % (pairs -0.25, -0.76, -1.00 s); 1,000 x 20 x 600 s 3.17 (2.86-3.33) -> 3.30
(2.80-3.39), no change beyond noise. What bounds it (measured, outside the repository):
each distribution gives the same values drawn in bulk as tick by tick on its own stream
(standard_normal, normal, lognormal, uniform, exponential, poisson), but the tick interleaves
them on one stream and the cycles' uniform count depends on the cycles, so bulk draws need a
new seed contract; their cost is per value (~12 ns a normal, ~50-90 ns a Poisson here), not
per call. ``lognormal`` cannot become ``np.exp(s * standard_normal)``: numpy's AVX-512 exp
differs from the libm exp the generator uses (1.39 M of 30 M values). A compiled kernel
(numba 0.68.1 / llvmlite 0.50, from the package index, 208 MB installed): ``_count``'s
arithmetic as one loop gave numpy's bytes over 50 ticks and ran 5-8x faster (N = 20,000:
425-1074 -> 54-89 us), and numba's ``Generator.lognormal``/``normal`` gave numpy's values
and state; the price for a fresh ``sova simulate`` is ``import numba`` 0.3-0.4 s and 0.9-1.6 s
of JIT per small kernel (0.01-0.2 s from its on-disk cache), i.e. a whole-tick kernel would
cost seconds on a first run against ~3 s of physics in the hour: worth it only with a cache
written at install time, and each kernel needs an equality test against the readable form.

Issue 23, seventh session, branch speedmgr2 (against main 74c9c5c; 2026-11-28, 03:56-04:15,
2 cores shared with other sessions, load 0.3 then 13-15): the manager's round in the world.
The world hands its manager the period's loads as one array (the sensing pass's, ManagerCore.ingest_arrays:
validated at once, written in one assignment) and the core keeps each window once, as views
of its window arrays (no Utilisation per host and report). process_time of World._plan per
run, 1000x3, before/after alternating: 300 s: 0.263/0.276/0.272 -> 0.128/0.113/0.121 CPU-s
(median 0.272 -> 0.121, 2.2x); one hour (load 13-15, 2 reps): 4.28/4.00 -> 2.28/2.13 (1.9x);
--sim-only 300 s (run_policy): medians 1.86 -> 1.74 CPU-s (spread 1.83-2.11 / 1.68-1.91).
What is left of _plan: a third is the manager dropping the previous period's VM-load views,
which frees the world's previous inventories (their last reference), then the round itself.

Issue 23, seventh session, branch speedout2: the command outside the simulation loop.
The real command with timers around its calls and the hour's ``run_points`` result loaded
from a pickle (2026-11-28 04:07, load average 12-18 on the 2 cores, so walls are not
comparable; CPU s, median of 3 alternating, main 74c9c5c -> this branch):

    part                                   before   after
    interpreter start, imports             0.69     0.63
    scenario load (load_sweep)             0.44     0.39
    write_outputs in the command process   3.38     1.30  (summary 0.08, timeline.csv 1.17)
      report in a forked process            -       ~2.1  (matplotlib import ~0.4 + drawing)
    teardown at exit                       0.37     ~0.3
    whole command minus the loop           5.02     4.41  (CPU of both processes)

(earlier, load 2-4: imports 0.6-0.7, load 0.4, import + summary 0.6, timeline.csv 1.0,
report 1.3, exit 0.3: 4.5 CPU-s, 4.6 s wall, of the whole command's ~27). The report is
drawn by a forked child (``writer.Forked``) while the command writes the tables, so on two
free cores the outputs take the longer of the two (~2.1 s) instead of their sum (~3.4 s);
matplotlib is imported only in that child. Same files (golden 0 differences; the hour's
outputs byte-identical). Left: the teardown (~0.3 s, ``os._exit`` after the outputs),
typer/rich/pydantic imports, timeline.csv (its blocks could be formatted by a second
process), the report's matplotlib drawing (~0.2 s a plot: text layout, tight_layout).
The whole command (1,000 x 3, 1 h), two alternating pairs at load 6-18: before 112.6 s /
36.7 CPU-s, 63.5 s / 30.3; after 98.5 s / 33.2, 94.4 s / 32.7 -- within this load's noise
(the loop is ~30 of it). Peak RSS 147 -> 137-138 MiB: the largest process (the command
no longer loads matplotlib); the child adds its own pages beside it (not measured here;
matplotlib and its figures were ~30-45 MiB in the fifth session).

Issue 23, seventh session, branch speedctl2 (the world's control period, against main
74c9c5c through ``--sova-src``, 1,000 x 3, runs alternating at nice 19, 2026-11-28 03:30-04:06,
load 3.6 rising to 19 as other work started): a settled host's inventory builds its VMs only
when read (sova.sim.fleet_control.HostVMs), settled hosts keep last period's holders and
ranking while their kernel ranks and PQ stay, and their agents record only holders without
a dwell start. Process time inside ``FleetControl.decide`` and ``HostAgent.settle``
(3 runs each, medians, spread in brackets):

    300 s simulated       decide CPU s          settle CPU s
    before (74c9c5c)      0.45 (0.44-0.51)      0.14 (0.14-0.16)
    after                 0.23 (0.21-0.27)      0.06 (0.05-0.06)
    600 s: before 0.98 (0.94-1.02) / 0.31, after 0.48 (0.47-0.49) / 0.12

so about 2x less in decide, 2.5x in settle. ``--sim-only --duration 300`` (run_policy CPU s,
3 runs each): at load 3.6 before 1.91 (1.77-2.07), after 1.68 (1.55-1.68); at load 19
before 2.41 (2.40-2.54), after 2.27 (2.11-2.58), the load's spread as large as the gain.
Again at 04:11-04:17 (load 6-18, alternating): 300 s decide before 0.47 (0.47-0.53), after
0.24 (0.24-0.24), run_policy 2.54 (2.13-2.86) / 2.19 (2.01-2.29); the issue's hour, one run
each: decide 6.06 -> 2.70 CPU s, run_policy 28.4 -> 23.3 CPU s.

Lead's check after the merge (2026-11-28 04:35, the CI installing beside it): this script's
peak RSS is the child's high-water mark from ``wait4``, the largest single process, so it
does not see a forked report beside the command. The proportional set size of the whole
process tree, sampled every 20 ms, for the hour: 201 MiB with the forked report (2
processes; RSS sum 250), 141 MiB with it drawn in the command (1 process), 137 MiB on main
74c9c5c. The forked report is therefore off unless ``SOVA_REPORT_FORK=1``: ~1.3 s of wall
is not worth ~60 MiB when peak memory is a target of its own.

Issue 23, seventh session, combined (every branch above merged, the report in one process:
main 1f103bb against the session's start 74c9c5c through ``--sova-src``; the whole
``sova simulate`` of 1,000 x 3, 1 h; 2026-11-28 04:37-04:39, the fresh-clone CI's main tier
holding one core):

    code                   wall s   CPU s   peak RSS
    before (74c9c5c)         28.0    27.6    145 MiB
    after (1f103bb)          17.3    17.0    145 MiB
    (04:31-04:33, the forked report still on: before 29.6, 34.1 s wall; after 16.3, 18.8)

Beside CloudSim Plus 8.5.7 (``--cloudsim``, S = 1 s, one run each, 04:37): Sova 17.9 s wall /
17.6 CPU-s / 145 MiB, CloudSim Plus 34.3 s / 35.3 CPU-s / 505 MiB: 1.92x its speed, 0.29 of
its memory (the issue: 10x and a quarter). ``--sim-only`` at 1,000 x 20 x 300 s, two
alternating pairs (04:40): 9.10, 8.64 -> 5.00, 4.71 CPU-s, i.e. 0.66-0.69 M -> 1.20-1.27 M
VM-steps per CPU-s (5 M asked). Floors under today's contract: the physics alone 2.86 CPU-s
for the hour (speedtick2) and the command outside the loop ~4.4 (speedout2), ~7.3 s before
any control against the ~2.7-3.4 s that 10x CloudSim Plus's 27-34 s would need.

Issue 23, eighth session, on an idle 2-core machine (AMD EPYC, load average < 1 before
each series; a different machine from the sessions above, so compare within a table only).
The dormant forked report is removed and a timeline spills past 4 MiB instead of 16; the
speed is unchanged. The hour through ``sova simulate`` beside CloudSim Plus 8.5.7
(``--cloudsim``, S = 1 s, one run each; "before" is aef1e0c through ``--sova-src``):

    run (08:03-08:05)       Sova wall / CPU / peak       CS+ wall / CPU / peak     CS+/Sova: wall  memory
    after                   9.1 s / 9.2 s / 140 MiB      12.8 s / 15.7 s / 612 MiB        1.40    4.38
    before                  10.6 s / 10.7 s / 145 MiB
    after                   10.8 s / 10.9 s / 140 MiB    12.7 s / 15.2 s / 701 MiB        1.18    5.03
    before                  9.3 s / 9.3 s / 145 MiB
    (06:58 and 07:02, main aef1e0c: 9.4 / 9.5 / 154 against 12.9 / 15.8 / 623, and
    10.9 / 11.0 / 145 against 14.0 / 16.7 / 715)

So 1.2-1.4x CloudSim Plus's speed on an idle machine (it uses both cores; under load it
slows more than Sova does, hence the 1.9x above) and 0.20-0.25 of its memory. The peak is
the report: sampled in the command, the run holds 96-99 MiB, importing matplotlib brings
it to 110 and drawing to 131-134 (of which the run's freed pages are not returned; the
live objects after the run are ~12 MB). The hour's parts, CPU-s in one process: run 9.1,
timeline.csv 0.9, report 1.2 (matplotlib's import 0.25); ``--physics-only`` 1.67,
``--sim-only`` 7.90. Why 10x (about 1.3 s here) is out of reach of numpy calls per tick:
docs/design.md#sim-ten-times.

Cost against size, the whole command over 300 simulated s (3 runs each unless one, walls
within 0.1 s of each other):

    hosts x VMs       VM-steps      wall s   CPU s   VM-steps/s (wall)   peak RSS
    100 x 3               90,000       1.5     1.6              60,700    107 MiB
    1,000 x 3            900,000       2.4     2.5             371,000    120 MiB
    10,000 x 3         9,000,000      15.4    15.5             585,000    352 MiB
    100 x 20             600,000       1.7     1.8             363,000    115 MiB   (1 run)
    1,000 x 20         6,000,000       5.8     5.9           1,042,000    199 MiB   (1 run)

Past the fixed ~1.3 s (imports, scenario load, the report's import and layout) the cost
grows linearly in VM-steps: 1,000 -> 10,000 hosts adds 13.0 s for 8.1 M VM-steps, ~1.6 us
each. ``--sim-only`` at 1,000 x 20 x 300: 2.90, 2.89, 2.87 CPU-s, 2.08 M VM-steps per CPU-s
(5 M asked).

Issue 23, ninth session, same kind of idle 2-core machine. A settled host gets no ``Sensed``
built (``FleetControl.decide`` reads the sensing's ``measured`` array and replaces only the
deciding hosts' readings; ``HostAgent.settle`` takes ``measured`` and ``loads``), and the
agents' dwell starts are read through chained iterators into arrays. Golden outputs
unchanged. Whole processes, 5 alternating pairs after a warm-up, medians (min-max):

    the hour through sova simulate     wall s               peak RSS    after/before
    before (be6753c)                   8.38 (8.30-8.63)     140 MiB
    after                              7.98 (7.84-8.20)     140 MiB     0.944 (0.926-0.983)
    --child 1000x3 (scenario + run)    7.94 -> 7.46 s                   0.959 (0.876-0.988)

Beside CloudSim Plus 8.5.7 (``--cloudsim``, S = 1 s, median of 3 each):

    hosts x VMs x s        Sova wall / CPU / peak      CS+ wall / CPU / peak      speed  memory
    1,000 x 3 x 3600       7.7 s / 7.8 s / 140 MiB     11.6 s / 14.0 s / 776 MiB   1.51    0.18
    (again)                8.6 s / 8.6 s / 140 MiB     11.7 s / 14.2 s / 711 MiB   1.36    0.20
    (before, be6753c)      8.4 s / 8.4 s / 140 MiB     12.1 s / 14.8 s / 718 MiB   1.45    0.19
    10,000 x 3 x 300       12.9 s / 13.0 s / 352 MiB   23.0 s / 29.7 s / 1,967 MiB 1.79    0.18
    (one run)

At 1,000 x 20 x 300 s CloudSim Plus (``perf.ScaleBench 1000 20000 300 1 1``) had not
finished after 31 min of CPU (stopped), where the whole ``sova simulate`` takes 6.3-6.4 s (3
runs; ``--sim-only`` 2.87 CPU-s, 2.09 M VM-steps per CPU-s, unchanged by this session). That
is no fair comparison: the bench's hosts have 32 PEs and 20 of its VMs need 40, so the
CloudSim Plus model is over its hosts' capacity there; it is not quoted as a ratio.

Issue 36, branch tick36 (2026-12-07, the 2-core machine shared with four other sessions
and a fuzz run: load average 10-17 throughout, so CPU seconds are the figure; walls are
not comparable). Where the simulation's time went before (cProfile of ``run_policy``,
main 55ddf42; shares of the profiled total, which cProfile inflates for Python calls):

    piece (1,000 x 20 x 300 s; 3.96 s profiled)                       share
    the world's construction (arrays, every VM's workload)              21 %
      every VM's first duty cycles, four generator calls a VM            7 %
      the VM models (scenario -> model.VM, pydantic)                     7 %
    the engine's tick                                                   23 %
      the random draws (jitter, Poisson arrivals; the seed's order)      6 %
      the duty cycles' on-time (the first pass, then renewals)           3 %
      CPU, paths and the PF's egress (two water-fills in the core)       7 %
      counters and the tick's figures (~40 numpy calls)                  3 %
      request latency                                                    2 %
    the bandwidth loop (fleet_bandwidth.step)                           12 %
      exact per-host sums (Groups.fsum: padded matrix + TwoSum)          4 %
    the VF scheduling pass (FleetControl.decide)                         8 %
    the agents' steps (HostAgent.step, candidates)                       9 %
    timeline rows, manager's round, sensing                         6, 4, 4 %
    the collector's final pass                                           4 %

    piece (1,000 x 3 x 3600 s; 26.9 s profiled)                       share
    the engine's tick (draws 4 %, on-time 4 %, counters 2 %,            21 %
      latency 2 %, CPU/paths/PF 7 %)
    the VF scheduling pass (inventories 5 %)                            17 %
    the manager's round (taking the loads 10 %: loads_at per host)      17 %
    the bandwidth loop (exact per-host sums 4 %)                        13 %
    timeline rows 5 %, sensing 3 %, per-tick statistics 3 %

Moved into the compiled core (rust/sova-core, through the facades ``sova.policy.kernels``
and ``sova.policy.tick``), each the numpy form's expressions in its order, so golden
outputs are unchanged (17 runs, 0 differences): the exact per-host sums
(``Groups.fsum``: ``math.fsum``'s algorithm, one crossing a round), the counters and the
tick's figures (``count``: one pass over every VM and host), the duty cycles' first
on-time pass (``on_time``; the renewals and their draws stay in Python). And in Python,
the cycles of a batch of VMs (the world's construction, a workload change) are drawn with
one ``random()`` call (``workload.reset_each``: ``uniform(lo, hi)`` is ``lo + (hi - lo) *
random()``, so the same values and stream state; tested). ``--sim-only --reps 3`` (one
run at 10,000 hosts), before = 55ddf42 through ``--sova-src``:

    size (hosts x VMs x 300 s)   before: CPU s (runs)        after: CPU s (runs)      VM-steps per CPU-s
    100 x 20                     0.71 (0.66-0.92)            0.51 (0.48-0.56)         0.84 M -> 1.17 M
    1,000 x 20                   3.58 (3.42-3.63)            3.07 (3.04-3.29)         1.68 M -> 1.96 M
    10,000 x 20                  32.92 (1 run, 1,222 MiB)    29.28 (1 run, 1,223 MiB)  1.82 M -> 2.05 M

The whole ``sova simulate`` of 1,000 x 3 for one hour (outputs and report included), before
and after alternating, 3 pairs, load average 10.7-16.5:

    code                  wall s (runs)               CPU s (runs)          peak RSS
    before (55ddf42)      132.3 (105.5-143.9)         16.0 (14.9-16.4)      248 MiB
    after                 112.7 (71.9-113.0)          15.1 (14.8-18.1)      248 MiB

(the walls are the load's, 5-9x the CPU; the moved pieces are a smaller share at 3 VMs a
host, and the CPU spread, 14.8-18.1 s, is wider than the change). The 248 MiB peak is the
same for both trees here; the ninth session measured 140 MiB for this command on an idle
machine (not investigated in this session).

So 1.12-1.4x less CPU at 20 VMs a host (the world's construction weighs most at 100
hosts), and the issue's 10 M VM-steps per CPU-second is still
~5x away. What stands in the way is no longer one large piece: the largest left are the
world's construction at 300 s (the VM models ~7 %), the random draws (~6 %, whose order
the seed's contract fixes: a generator in the core needs golden hashes re-recorded once),
the control period's per-host Python (the agents' steps, inventories and the manager's
intake of loads, together ~30 % of the hour) and the tick's remaining ~100 numpy calls
(CPU, paths, the PF, latency: each a few per cent). Moving the whole tick into one core
call with its own seeded generator (issue 36, build point 4) is the step that removes
the per-tick numpy calls together; it changes the draws, hence the golden outputs.
CloudSim Plus was not run: the machine was never quiet (load >= 10).

Issue 36, branch rtick36 (2026-12-07; the 2-core machine shared with four other sessions,
load average 0.4-2.5 during these runs, bursts of other sessions' tests between them, so
repeated medians of the same code moved by up to 0.3 CPU-s at 1,000 x 20). The world's
random draws moved from numpy's Generator into the core (rust/sova-core/src/rng.rs:
counter-based, each draw a function of (seed, stream, VM, tick or the VM's reset count,
draw), so no value depends on which VMs drew before it or on threads; normals by the
ziggurat, Poisson by inversion below a mean of 10 and PTRS above), and the tick's offered
load is one core call (both duty-cycle processes with their renewals, the draws, each VM's
offer: ``tick::offer``; three core calls and ~15 numpy operations before). The streams
changed, so the golden hashes were re-pinned once, after every experiment test passed on
them. Simulation only, CPU seconds, before = main 32eaa26 through ``--sova-src`` (two
sessions of runs each; medians of 3 at 1,000 hosts, one run elsewhere):

    size (hosts x VMs x 300 s)   --sim-only before / after          --physics-only before / after
    100 x 20                     0.49 / 0.36, 0.42                  0.28 / 0.23, 0.16
    1,000 x 20                   3.32 (3.01-3.51) / 3.05 (2.95-3.28),  1.47 (1.22-1.49), 1.59 (1.53-2.10)
                                   3.44 (2.99-3.98)                    / 1.23 (1.21-1.29), 1.44 (1.33-1.52)
    10,000 x 20                  31.53 / 31.23, 32.86                16.25, 14.99 / 17.92, 16.05, 15.08
    (the last two 10,000 x 20 physics runs after folding each key's (seed, stream) once)

So at 1,000 x 20 the world alone is 3.7-4.1 M VM-steps per CPU-s before and 4.2-4.9 M after,
and the whole simulation 1.8-2.0 M both ways: the move is about even in CPU (the draws cost
what numpy's did once each key's common part is folded once: 6.5 ms a tick at 200,000 VMs
against numpy's 6.7 ms for the two jitters; the core's Poisson is ~1.7x numpy's), and what
it bought is the contract (draws independent of order and thread count) and one call for
the offer. The issue's 10 M VM-steps per CPU-second is still ~5x away for the whole
simulation. In the tick (cProfile of the world alone, 1,000 x 20, 120 s) the core's offer
call is 36 % (1.9 ms a tick: mostly the draws, ~90 ns a VM with the Poisson arrivals), the
rest of the offer 8 %, CPU, paths and the PF around the two water-fills 31 %, the counters
10 %, request latency 8 % and files 7 %: those numpy parts, and the control period's
per-host Python, are what stand in the way. Hosts stepped by rayon were not added: the
acceptance figure is CPU seconds, which threads do not lower, and on this shared 2-core
machine a second thread competes with the sessions already running.

The whole command beside CloudSim Plus 8.5.7 after that change (``--cloudsim``, 1,000 x 3, one
hour, S = 1 s, interleaved, median of 3, load average 1-2; main 4085db9):

    Sova wall / CPU / peak     CS+ wall / CPU / peak      CS+/Sova: speed  memory
    12.2 s / 12.2 s / 248 MiB   29.7 s / 33.5 s / 544 MiB          2.43x   2.20x

(Sova's walls 12.1-13.0 s. CloudSim Plus's 29.7 s is twice the 11.6-14.0 s earlier sessions
measured for the same run on this machine kind, so the 2.43x owes part of itself to its run,
not to Sova; against those figures the ratio is 0.95-1.15x. Either way, 10x is far off.)

Issue 36, branch out36 (2026-12-07 17:34-18:16, the 2-core machine shared with four other
sessions' tests and benchmarks, load average 5.5-14, so walls swing 2x and CPU seconds are
the figure): the command outside the simulation. What changed: each run's demand grid
(``decisions.demand_grid``: the decisions table and both VF plots) is built once per report
(``decisions.run_moves``), a chunk at a time and without the delivered load the report never
reads -- built three times from whole columns (five of 8.6 MB, their int64 indices) it was
the command's peak, +108 MiB over the run's; the busiest VMs' traffic is summed once for the
three metric plots; past 200,000 rows the timeline is a ``timeline/`` folder of ``.npy``
columns instead of timeline.csv (``--timeline-format auto|csv|columns``;
docs/design.md#timeline-resolution). Every shipped scenario's files are unchanged (golden:
17 runs, 0 differences on the final tree; an earlier check at load 13 saw demo/sova-tour's
three files move, and main eb56be1's demo wrote the same bytes as this branch's in that
minute: the demo under that load, not this change); the hour's report.md differs only in
the sentence naming the timeline's file, its PNGs and plots.json are byte-identical.

The whole command (``--sizes 1000x3 --duration 3600``), main eb56be1 (its own checkout and
venv) and this branch alternating, one run each, 18:10-18:14, load average 5.8-8.3:

    code                  CPU s (runs)            wall s (runs)          peak RSS
    before (eb56be1)      17.9 (17.9, 19.6, 14.3)  31.0 (31.0, 53.4, 30.7)  248 MiB
    after                 14.5 (16.4, 14.5, 13.2)  32.2 (32.5, 32.2, 30.3)  137 MiB
    (the same, --reps 3 each, 17:34 and 18:07 at load 5-14: before 15.3 CPU-s / 41.9 s
    wall / 248 MiB, after 14.9 / 49.5 / 137)

The split, timers around the command's calls in one process (imports of ``sova.cli`` and
the simulate path, ``load_sweep``, ``run_points``, ``write_outputs`` and its parts), CPU s,
median of 3 alternating (17:57-18:05, load 10-14):

    part                             before   after
    imports                            0.55    0.62
    scenario load                      0.36    0.36
    simulation (run_points)           11.35   12.61   (not changed here: the load's spread)
    outputs                            4.06    2.24
      summary (+ summary.json)         0.10    0.10
      timeline                         1.20    0.09   (timeline.csv -> the timeline/ folder)
      report                           2.37    1.68   (matplotlib's import ~0.3-0.4 of it)

Beside CloudSim Plus 8.5.7 (``--cloudsim /work/cloudsim``, S = 1 s, one run each, 18:14,
load average 5.2-5.5):

    Sova wall / CPU / peak       CS+ wall / CPU / peak       CS+/Sova: speed (wall)  memory
    28.2 s / 12.6 s / 137 MiB    84.7 s / 42.2 s / 395 MiB             3.01x          2.89x

(CloudSim Plus's CPU-s is 3.3x Sova's here; its 84.7 s wall is the load's.) So the outputs
take ~1.8 CPU-s less and the command's peak is 137 MiB, not 248: 0.35 of CloudSim Plus's
395 MiB in this run, 0.18-0.25 of the 544-776 MiB of earlier ones (the issue asks <= 1/4;
its peak swings with the JVM's heap sizing). The
timeline folder is 106 MB against timeline.csv's 100 MB; two of its columns read back
memory-mapped in 0.006 s against 1.44 s through the csv module. At 1,000 x 20 x 300 s
(600,000 rows, one run): scenario load 1.43 CPU-s, summary.json 0.13-0.38 (the standard
library's indenting encoder; a C-encoder variant with the same bytes saved nothing, a call
per VM), timeline folder 0.06, report 1.13. What is left outside the simulation is about
2.9 CPU-s at 1,000 x 3 x 3600: imports ~0.6 (numpy, pydantic and the scenario models'
schemas, typer/rich; lazily registering the other subcommands would save ~0.1), the
scenario's parse ~0.35 (PyYAML's events in Python), the report ~1.7 (matplotlib: its import,
text layout and ``tight_layout`` of four figures; fixed margins measured ~0.1-0.2 less).

Issue 36, branch ctl36 (2026-12-07; the 2-core machine shared with four other sessions,
load average 6-13 during these runs, so CPU seconds are the figure). The control period's
per-host work where nothing changes. Counted at 1,000 x 20 (sova policy): at 300 s every
one of the 30,000 host-periods is now settled (before, the first period's 1,000 hosts
stepped: a host not measured yet stepped whatever its holders, 1,000 step reports and
20,000 timeline rows built row by row); at 1,800 s 179,681 of 180,000 are settled, and the
319 others step because the manager signalled a migration (275) or a call is in flight
(44); none steps because its VF holders change. What changed: a host not measured yet
settles when its policy's warm-up keeps the holders it has (all eligible, none rated);
the world's construction builds one SLA model per distinct SLA (20,000 pydantic-to-model
conversions 0.20 -> 0.06 CPU-s); the run's final collection skips the objects made
before the run (``gc.freeze``: 0.09 of its 0.12 CPU-s); the VF pass reads its decision
lists only when a host needs a decision or a new ranking, sorts the VMs by host and name
only when a VM moved. Golden outputs unchanged (17 runs, 0 differences);
``benchmarks/decisions.py --quick`` prints the same table. ``--sim-only``, CPU seconds,
before = main eb56be1 (its own tree and venv), median of 3:

    run                        before: CPU s (runs)              after: CPU s (runs)            VM-steps per CPU-s
    1,000 x 20 x 300 s, 1st    3.06 (3.15, 2.94, 3.06), load 7    2.69 (2.96, 2.69, 2.60), load 13  1.96 M -> 2.23 M
    1,000 x 20 x 300 s, 2nd    3.32 (3.20, 3.87, 3.32), load 7    2.65 (2.90, 2.47, 2.65), load 6   1.81 M -> 2.27 M
    1,000 x 20 x 1,800 s       19.84 (one run), load 6           18.92 (one run), load 8-12       1.81 M -> 1.90 M

Per piece (process CPU of each phase, one run each): at 300 s the control periods 1.07-1.46
-> 0.70 CPU-s and the construction 0.37-0.53 -> 0.18-0.21; at 1,800 s the control periods
6.29 -> 6.12 CPU-s (34-35 ms a period). So the one-off costs went, and the steady state's
per-period cost is about what it was: ~34 ms a period at 1,000 hosts, of which the VF
pass ~12 ms (the scheduling core 1.8, each host's inventory view 2.6, the settled hosts'
records 2.2), the manager's intake and round ~8 (its windows and plan ~3.4), sensing ~6
(the core ~4), the timeline's columns ~6 and the settled agents' loads ~3. What is left per
period is a few microseconds of Python per host (an inventory view, a load-share record and
an agent's ``settle``, each a handful of objects), ~10 ms at 1,000 hosts: removing it
means the agents' records held as the world's arrays and read from there (issue 36's
"a fleet of one"), not a faster loop. The issue's 10 M VM-steps per CPU-second is still
~4.4x away: the physics and the bandwidth loop (~1.55 of the 300 s run's ~2.3 CPU-s in
``run_until``) are two thirds of what is left.

Issue 36, branch bw36 (2026-12-07; the 2-core machine shared with four other sessions, load
average 4-13 during these runs, so CPU seconds moved by up to 0.5 between runs of the same
code). The bandwidth loop's period is one core call for every flow of every host
(rust/sova-core/src/bandwidth.rs through ``sova.agent.bandwidth.decide``: the probe, the
open link, the guarantees' reservations, the Sova allocation, the spare spread, the probing
floor and the 1 % change test), reading the simulator's per-VM columns by VM index (no
gathers), with ``math.fsum``'s sums by a compensated sum where its error bound proves the
rounding (the exact partials otherwise); an agent's host is the same call for a fleet of
one. Golden outputs unchanged. ``FleetBandwidth.step`` per simulated second at 1,000 x 20 x
300 s (process CPU around each call, run_policy in one process, before = main eb56be1,
interleaved, load 5-9):

    FleetBandwidth.step           before               after
    per call (20,000 VMs)         1.57, 1.53 ms        0.83, 0.90 ms
    per VM-step                   77-79 ns             41-45 ns
    the core's period alone                            0.56-0.80 ms (0.15 ms of it the
                                                       fsums, 3 passes; the rest the Sova
                                                       fill's per-host vectors and checks)

``--sim-only --reps 3`` (whole run_policy): before 3.06 CPU-s (3.00-3.08; /work/main, load
3.7-6), 3.84 (3.63-4.16; ``--sova-src`` main, load 7-11); after 3.24 (3.07-3.30; load
7-13); the step's 0.2 CPU-s saved is inside the load's noise here. So 1.9-2.1 M VM-steps per
CPU-s either way: the issue's 10 M needs the whole tick at ~100 ns per VM-step, and this
step alone is still ~45 ns (of that, ~13 ns is Python around the core: the counters'
truncation and copies, the measure, the flows' reuse check, the submission). What is left
in it: the Sova fill builds three vectors per host and sums them (uncongested hosts could
skip to the demand when Σhi fits), and the counters could be measured inside the same call.
The agent's bandwidth step (``HostAgent.bandwidth_step`` on a MockDriver host, best of 5
rounds of 200 periods, same load) costs less than before: 197 -> 141 µs at 3 VMs, 640 ->
501 µs at 20, 4,110 -> 3,741 µs at 100 (most of it the driver's sample and inventory).

Issue 36, branch offer36 (2026-12-07, the 2-core machine shared with four other sessions
and the lead's runs, load average 5-13 during these runs): the core's offer
(``tick::offer``) validates once without collecting indices, folds each renewal's
(VM, tick) key part once, draws and offers each VM in one loop over runs of 2,048 VMs,
takes ln λ only on PTRS's slow path and hashes the jitters' and the renewals' keys
sixteen at a time (AVX-512 DQ's 64-bit lanes where present); the same bits (golden 0
differences). A
``threads`` knob shares the runs among a rayon pool, the same bits on any count.
The offer call alone on a captured tick (tick 150 of 1,000 x 20, 20,000 VMs; the fastest
of 150 calls, main's module and this one alternating in one process):

    tick_offer, ns a VM (wall)     main eb56be1   after, 1 thread   after, 2 threads
    through Python, load 6-13        57.5-58.9        51.0-52.7 (***)   48.8-53.0 (***)
    through Python, load 3.5         53.8-55.4        45.0-45.3         32.4
    in Rust, allocator quiet (*)     43-46 (**)        40                25 (***)

(*) ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_`` raised: in a bare Rust loop the
six fresh 160 KB outputs a call cost ~17 ns a VM of page faults, which glibc's trimming
brings back every call; the simulator's Python heap keeps them mapped. (**) this
branch's first commit, the same Python timing as main. (***) before the renewals' keys
were batched (~3 ns a VM in the Rust timing). What is left at 40 ns is the
arithmetic the seed's contract fixes: per VM two keyed normals (~2.5 ns each past their
hashing), one ``exp`` (libm, ~4.7 ns), ~0.2 Poisson draws (~6 ns a VM on average), ~0.6
renewals (~10 ns each), about three key hashes of four multiplications each (4.7 ns a key
in series). 15-20 ns needs fewer keyed draws per VM or a cheaper ``exp`` than libm's, both
output-changing. Simulation only (CPU s, median of 3):

    1,000 x 20 x 300 s, load    --sim-only                  --physics-only
    before (main eb56be1), 3-8  3.18 (3.04-3.19)            1.58 (1.57-1.70)
                         5-10  3.01 (2.90-3.05)            1.68 (1.68-1.77)
                            2  3.61 (2.95-3.71)            1.40 (1.32-1.44)
    after, 5-10                 3.26 (3.02-3.67)            1.37 (1.32-1.45)
           2-3.5                3.25 (3.00-3.27)            1.34 (1.31-1.40)

Run by run the load moves these more than the change does: at the same load (2-3.5, the
last rows) the world alone is 1.34 against 1.40 CPU-s (4.5 M VM-steps per CPU-s against
4.3 M), about the ~0.06 s the offer's ~10 ns a VM saves over 6 M VM-steps, and the whole
simulation is 1.8-2.0 M either way. The offer is now ~0.3 s of its ~3 s: the rest of the
tick and the control period are what stand between it and 10 M. Two threads (the same runs with
OfferParams(threads=2), one run each, alternating): run_policy CPU 3.07, 3.65 s / wall
6.1, 8.8 s against one thread's 4.00, 3.21 s / 10.1, 7.8 s; the world alone CPU 1.49,
1.44 / wall 4.5, 4.4 s against 1.39, 1.36 / 3.9, 4.1 s. Under this load a second thread
buys no wall and costs CPU (the pool's threads spin before they sleep), and the offer is
a tenth of the tick, so the default is one thread; the knob is for a quiet many-core
machine, where the Rust timing above halves.

2026-12-07, issue 36 build point 4 (branch share36): the tick's sharing (guest vCPUs, host
cores, paths, the PF with migration streams) and the requests' latency in one core call
(``tick_share``, rust/sova-core/src/share.rs; the numpy form's float operations in its order,
golden check 0 differences). 1,000 x 20 x 300 s, CPU s, median of 3, main eb56be1 and this
branch run back to back from their own trees (load average in brackets, 3.5 to 17 as other
sessions came and went on the 2 cores):

    --physics-only   main 1.43 (3.5-6.7), 1.42 (4.9)  /  share36 1.38 (14-17), 1.39 (4.6-7.9)
    --sim-only       main 3.15 (3.5-6.7), 3.25 (7.9-11) /  share36 3.45 (14-17), 3.40 (11-14)

That is 4.2-4.3 M VM-steps per CPU-s for the world and 1.7-1.9 M for the simulation both
ways: no gain beyond the noise, and the 10 M acceptance is not met. cProfile of the world
alone (300 ticks): main's sharing 0.84 s + latency 0.15 s, of which the two water-fills are
0.23 s (0.39 ms a fill: the hosts' links are busy enough that the no-sort shortcut rarely
holds, so every link's 20 flows are sorted); the one core call 0.90-1.08 s for both. Its
scalar loop is ~40 ns a VM of CPU, fills included, on this loaded machine: about what numpy's
vectorised passes cost, and the fills are the same code as before. What stands in the way now:
the offer (``tick_offer``, 1.2-1.6 s of the world's ~3.5 s under cProfile, the draws), the
fills' sorts (exact only in the numpy order: a per-link shortcut would change the running
sums' rounding of later links, i.e. the golden outputs), and the counters (0.23-0.34 s).
With the file transfers' countdown in the same call too (beeec8e), on a quieter machine
(load 1.9-2.8), main then the branch: --physics-only 1.51 / 1.45 CPU s (3.98 / 4.13 M
VM-steps per CPU-s), --sim-only 3.02 / 2.96 (1.99 / 2.03 M): the same picture.

Issue 36, sixteenth session, all five branches merged (offer36, share36, bw36, ctl36, out36;
lead's branch at 5cacca3), on a quiet machine (load average 1.0-1.3), main eb56be1 and the
merge alternating:

    measure (1,000 x 20 x 300 s unless said)     main eb56be1        merged             ratio
    --sim-only, CPU s (4 runs each)              2.97-3.24 (~3.1)    1.99-2.40 (~2.2)   1.45x
      VM-steps per CPU-s                         1.9 M               2.8 M
    --physics-only, CPU s (median of 3)          1.38                1.04               1.33x
    100 x 20 / 10,000 x 20 --sim-only, CPU s     -                   0.27 / 20.9 (31.2-32.9 before)
    whole command, 1,000 x 3, one hour           13.7 s, 248 MiB     11.1 s, 136 MiB
      CloudSim Plus 8.5.7 beside it (median 3)                       32.5 s, 573 MiB    2.93x, 4.20x less memory

10,000 x 20 costs 9.6x 1,000 x 20 (ten times the VMs). The hot fleet (``--hot 0.17``: 170 of
1,000 hosts at 0.9 of their link all hour, every other host at 0.50-0.63, so no VM of a hot
host fits anywhere under alpha 0.75), 1,000 x 3, one hour, whole command, one run each:
Sova 19.4 s wall / 19.5 CPU-s / 280 MiB, CloudSim Plus 24.7 s / 28.8 / 455 MiB (1.27x, 1.62x
less memory); its events.csv is 170 ``hotspot`` and 170 ``hotspot_end`` rows (124 kB), one
state per hot host. The issue measured 178 s against CloudSim Plus's 51 s (3.5x slower) and a
195 MB events file on its hot fleet. Still short of every 10x and the 10 M VM-steps.

Issue 36, branch setup37 (2026-12-07 21:33-21:52, the 2-core machine shared with other
sessions, load average 4-9; before = main 91948f1 through ``--sova-src``, runs alternating,
CPU s; medians of 3 unless said): the simulator's fixed and per-tick Python around the core.
``World.__init__`` runs without the collector's automatic passes and writes the first
workloads a parameter column at a time; the share call's host columns and parameters and
the counters' view are built once (again only after a move, a workload change or another
tick length); the statistics reuse a scratch array and keep the live view's tick arrays in
bit/s; summary.json, plots.json and columns.json are written by ``writer.json_text`` (the
standard encoder's text, tested equal); the report reads the throughput grid once. Golden
outputs: 17 runs, 0 differences; the hour's outputs (report.md, plots.json, PNGs,
summary.json, timeline columns) byte-identical.

    measure                                   before                    after
    first World of 1,000 x 20 (3 pairs)       0.197, 0.201, 0.198       0.125, 0.125, 0.125
    --physics-only 100 x 3 x 3600             0.48, 0.45                0.42, 0.43
    --physics-only 1,000 x 20 x 300           0.77, 0.76                0.75, 0.74
    --sim-only 1,000 x 20 x 300 (4 pairs)     1.62, 1.78, 1.85, 1.77    1.66, 1.72, 1.74, 1.63
    whole command 1,000 x 3 x 3600, CPU s     8.2, 8.5, 7.6             8.0, 7.9, 8.0
      peak RSS                                137-139 MiB               137 MiB
    write_outputs of that hour (one run)      1.31                      1.15
    summary.json of 1,000 x 20 x 300 (2.9 MB) 0.11                      0.07

So ~0.07 CPU-s off the construction and ~8 % off a small fleet's tick (what a week at 100
hosts pays per tick); at 1,000 x 20 the gain is inside this load's spread. What was looked
at and left: ``matplotlib.pyplot`` costs no more to import than ``matplotlib.figure`` with
the Agg canvas (0.38 CPU-s either way here), and ``sova.sim.fleet`` is imported only when
the report draws, so a lazy pyplot saves nothing; a figure made at the saving dpi (90)
draws no faster and changes the PNGs' bytes; ``tight_layout`` is ~0.04 s a figure and PNG
encoding ~0.03 (fixed margins or a lower zlib level would change the files); the row-wise
``nanpercentile`` of the bands beside a split into NaN-free rows 0.044 -> 0.035 s a grid.
Left outside this branch's files: ``sova.cli`` imports ``cli_operator`` (its client, ~0.1-0.3
s under load) and ``sova.demo`` for every command; ``sova.policy.sharing.share_tick`` and
``tick.count`` call ``np.ascontiguousarray`` per field (37 calls a tick, ~7 % of a 100-host
tick under cProfile); ``sim.decisions.run_moves`` and the fleet report's other timeline passes
(each ~0.04 CPU-s at the hour) read every chunk of the spilled timeline again.
Issue 36, branch control37 (2026-12-07): the simulator's control period (every 10 simulated
s, every host) in Python. A settled host whose VMs and inventory columns are as at the last
reading gets that reading's ``Inventory`` again (at 1,000 x 20 no host's columns change
between periods: 1,000 ``Inventory`` + ``HostVMs`` a period went); the decided hosts'
timeline rows read the period's frame (no float64 stack of seven columns), go in as one
block when the world decided for every host, and the engine's per-VM columns are listed
only when a host's rows come from its report (3 x 20,000 ``tolist`` a period went); a
host's VM loads are sliced when read (1,000 lists a period went) and every host's
``Loads`` built in one pass; the agents' records (in flight, signal, fences, migrating,
dwell starts) and the manager's batch intake (own windows, rows, capacities) are read
through C-level maps, who the world decides for is array masks; the timeline's spill
writes each column's buffer without a copy. Golden outputs unchanged. 1,000 x 20 x 300 s,
``process_time`` around each part (world.py/fleet_*.py), alternating before (91948f1) and
after, two runs each, load 6.6-8.6:

    part (CPU s)                 before          after
    the 30 control periods       0.66, 0.69      0.54, 0.50
      FleetControl.decide        0.20, 0.21      0.16, 0.15
      World._record              0.115, 0.122    0.077, 0.072
      World._plan                0.087, 0.090    0.072, 0.064
      FleetSensing.sense         0.15, 0.15      0.16, 0.15   (the core's observe/factors)

``--sim-only --reps 3`` (medians; before with ``--sova-src`` of 91948f1), alternating, load
5-8.6:

    1,000 x 20 x 300 s           1.73, 1.77, 1.77, 1.74    1.58, 1.69, 1.71, 1.68   (-4 %)
    --hot 0.17, 1,000 x 3        1.01, 1.08                0.97, 1.00               (-6 %)

``benchmarks/per_host_core.py`` (no agent code changed): ``HostAgent.bandwidth_step`` at 20
VMs 320 / 321 µs before, 330 / 316 after; every other row within 0.6 µs. What is left per
settled host and period is making the agent's records (``Loads``, ``LoadShares``,
``HostLoads``, ``VMLoadReports``, the ``settle`` call, ~5 µs): it goes only if a settled
agent reads its period from the fleet's arrays instead of being handed objects. The
registry look-ups (2,020 ``Registry.__contains__`` in cProfile, 0.09 s) cost 0.7 ms timed
around ``vf_policy``/``allocator_plugin`` in 1,000 ``HostAgent`` constructions (the entry
points are read once, at the scenario's validation): the profiler's figure is its own. The
hot fleet's 30 rounds are 0.45 of its 1.0 CPU-s, in ``policy/hotspot.plan_hot`` (170 hot
hosts each round, ``rank_movers``) and ``policy/cold_spots``.
2026-12-07, issue 36, branch coretick37: the compiled tick's four calls made cheaper, the same
bits (golden: 17 runs, 0 differences). Each kernel's per-VM arrays are cut to the VMs' count
before its loops (no bounds check per value), the sharing's passes fused (one pass for each
VM's packet cost, busy vCPUs, need at the offered rate and each host's sum of it; one for
the hosts' needs and active virtio VMs; one for the paths' caps and packet rates; one for
the files, what each VM receives and both per-host sums: each sum still in VM index order),
the normals' ziggurat tables looked up once a tick instead of once a draw, and
``allocate::fsum`` returns a sum whose every addition was exact without the exact partials
(each host's all-zero floors took ``sum::fsum``'s slow path every bandwidth period).
Instructions per call (callgrind, ``run_policy`` at 200 x 20 x 300 s, 4,000 VMs, the four
calls only; valgrind hides AVX-512, so the draws' hashing runs its plain path there; memset
is counted apart because valgrind counts ``rep stosb`` once per byte, ~30x its cost on the
processor, and the fused passes zero their buffers instead of a capacity check per push):

    call (Ir per call; per VM)   before (91948f1)           after                 without memset
    tick_offer                   2,684,722  (671)           2,521,972  (630)      2,490,904 -> 2,328,084  -6.5 %
    tick_share                   1,954,951  (489)           1,682,784  (421)      1,694,702 -> 1,257,051  -25.8 %
    bandwidth_period             1,782,588  (446)           1,712,477  (428)      1,676,210 -> 1,606,038  -4.2 %
    tick_count                     572,139  (143)             448,225  (112)        538,025 ->   414,187  -23.0 %
    the four                     6,994,400                  6,365,457  (-9.0 %)   6,399,840 -> 5,605,360  -12.4 %

``--physics-only --sizes 1000x20 --duration 300 --reps 3`` (CPU s, median of 3; before =
main's module, after = this branch's, through ``--sova-src``, alternating, load average 4.9-8.8
on the 2 cores): before 0.87, 0.80, 0.74, 0.72; after 0.86, 0.73, 0.68, 0.70 (pairs in that
order; 6.9-8.3 M VM-steps per CPU-s before, 7.0-8.8 M after). About 0.05 CPU-s of the world's
~0.75 in three pairs of four, within this machine's noise in the other; the bandwidth period
is outside ``--physics-only``. What is left is mostly fixed by the outputs' bits: the draws
(two keyed normals and an ``exp`` per VM, ~0.2 Poisson), the bandwidth period's per-flow
checks and gathers through ``flows`` (``check_flows`` alone ~75 Ir a flow), and the fills'
sorts. Tried and dropped (the same results, no fewer instructions or CPU seconds):
``np_min``/``np_max`` with one comparison on the common path; ``check_flows``'s tests as
plain comparisons (the same machine code) or with ``vm`` matched once outside its loop
(0.5 % more instructions a bandwidth period).

setup37, second part (2026-12-07 22:00-22:20, same machine, load 4.6-10; before = 5669954
through ``--sova-src``): what ``sova simulate`` pays besides the simulation. ``sova
simulate``, ``validate`` and ``scenarios`` run without registering the other modules'
commands (the operator client, the daemons, the demo); ``from sova.cli import app`` still
gets the whole command line (help, man page, tests unchanged). The distinct sample times of
a timeline are read once for the summary, the decisions and the fleet grid (12 walks of the
hour's spilled timeline -> 10, ~0.025 CPU-s a walk). Golden 17 runs, 0 differences; the
hour's outputs byte-identical to 5669954's (diff -r of report.md, plots.json, PNGs,
summary.json, events.csv, timeline/).

    measure                                   before                    after
    sova simulate --help, CPU s (5 pairs)     0.36-0.40                 0.15-0.18
    whole command 1,000 x 3 x 3600, CPU s     8.7, 8.1, 8.2             8.3, 8.4, 8.3
      peak RSS                                137 MiB                   135 MiB

So ~0.2 CPU-s of imports and ~0.05 of timeline reads off a run: inside this load's spread
of the whole command (8.1-8.7 s), which is ~6 s of simulation. The rest that is not
simulation, from a cProfile of the CLI's main in-process: matplotlib's import (0.37 CPU-s
however imported) and drawing (~0.9 s of the report's ~1.1 s, looked at above), the
scenario's loading (``load_sweep`` 0.26-0.28 CPU-s for the hour's 0.8 MB scenario, 0.82 under
cProfile; ``scenario/load.py`` builds it from PyYAML's events already; not this branch's file), the cyclic collector 0.17-0.19 s
(4 full passes, each freeing 8,000-32,000 objects, so not pointless). Left: the remaining
10 walks of the spilled timeline cost ~0.02 s each in ``Timeline._load`` reading every
column back (``record.py``, not this branch's: an mmap'd or per-column read would make a
pass that needs 3 columns read 3); drawing the three metric plots from one walk would hold
three period x VM grids at once (4.3 MB each at the hour, but 0.7 GB each for a week of
3,000 VMs at 10 s), so they stay one at a time.

Control37, second part (2026-12-07): the hot fleet's rounds. No hot host's inputs repeat
between rounds here (probed: 4,590 ``rank_movers`` calls, 4,590 distinct inputs; 36,720
refusal reasons, all distinct: the loads move every period), so nothing is kept across
rounds; the per-hot-host Python is cut instead. The core's refusal arrays are read into
Python once a round as flat lists (a list per row would be counted by the collector: a
first try made ``hot_round.py``'s unfrozen 10,000-host round 0.09 -> 0.13 s), a refusal's
resource names come from a table of its 6 bits, ``rank_movers`` finds a host's overloaded
columns once instead of per VM, and the agent's ``VMLoadReports`` (with ``HostLoads`` and
``HostVMs`` under it) iterate as their dict (``Mapping``'s mixin looked every key up
through ``__getitem__``). Same strings, golden 0 differences. ``--sim-only --reps 3``
medians, alternating before (e4b3750, ``--sova-src``) and after, load 1.0-3.7:

    --hot 0.17, 1,000 x 3        0.84, 0.82, 0.78          0.78, 0.77, 0.76         (-5 %)
    1,000 x 20 x 300 s           1.49, 1.56, 1.57          1.57, 1.56, 1.48         (same)

``hot_round.py`` (15 rounds, load 1.2): the daemon's round at 10,000 hosts 0.090 / 0.092 s
before, 0.092 / 0.088 after; 2,000 hosts 0.014 both. ``per_host_core.py``: every row within
its noise (``bandwidth_step`` 20 VMs 314.7 -> 320.4 µs, 100 VMs 2468 -> 2409). What is
left in the round, cProfile at 1,000 x 3 hot: ``rank_movers`` ~45 % of ``plan_hot`` (half
of it building each hot host's ``VMLoad`` objects from the agent's loads), the screening's
Python around the core ~25 % (the 8 listed refusals of each of 170 hosts formatted each
round), each hot host's report (its window read as ``Utilisation`` objects for the
decision record) ~15 %: going further means the round taking VM loads as arrays rather
than a ``Mapping`` of ``VMLoad`` per host.

Branch threads38 (issue 36 item 6): ``--threads N`` (``sova simulate --threads``; with
``--sim-only``/``--physics-only`` run_policy's, and wall s beside CPU s). The offer, the
counters, the sharing's water-fills and the bandwidth period's allocation share runs of
2,048 VMs / whole hosts among N threads; the outputs are the same bytes (golden 0
differences; tests/test_simulate_threads.py). Alternating 1 and 2 threads, one run each
time, CPU s / wall s (the 2 cores shared with other sessions, load average 2.6-5.4):

    size, what                          1 thread: CPU / wall           2 threads: CPU / wall
    1000 x 20 x 300, --sim-only         1.58/2.65 1.59/2.45 1.69/2.02  1.93/2.91 1.62/1.63 1.58/1.62
      medians                           1.59 / 2.45                    1.62 / 1.63
    1000 x 20 x 300, --physics-only     0.86/1.73 0.79/1.65 0.82/0.82  0.94/1.54 0.85/1.50 0.82/0.83
    1000 x 3 x 3600, whole command      8.1/10.7  9.3/13.8  9.8/20.0   9.0/11.1  9.3/16.0  9.8/18.5

Where threads pay: only with a core free, at 20 VMs a host (10+ runs a call); the kernels
are ~half of a 1000 x 20 run's CPU, so two threads could take at most ~a quarter off its
wall, and the CPU grows by the hand-overs (~0-5 %). At 1000 x 3 (3,000 VMs: one or two runs
a call) and in the whole command, whose time is the control period's Python and the
report on one thread, the difference is inside this machine's noise; at load 5 on 2 cores
(no core free) nothing pays. Calls under one run (2,048 VMs or flows) stay on the calling
thread. The default stays 1. One thread against main 447c76f (``--physics-only`` 1000 x 20
x 300, ``--sova-src``, alternating, load 3.1-3.6): CPU 0.85, 0.87, 0.86 s before, 0.80,
0.83, 0.79 after: the one-thread path is not slower for its runs (count's per-host sums
are now a second pass over the VMs).

Issue 36, branch tick38 (2026-12-08 01:20-01:30, the 2-core machine shared with other
helpers, load average 3.1-6.5; before = main 447c76f through ``--sova-src``, runs
alternating, CPU s, median of 3 per run, two rounds): the per-tick Python around the core.
``World._accumulate``'s ~15 numpy calls per tick (bits per VM and host, the request VMs'
requests, time and response-time bins by ``searchsorted``/``np.add.at``, the guarantees)
are one core call, ``sova_core::stats::accumulate`` through ``sova.policy.tick.tally``, in
the numpy form's operations and order (kept as tests/test_tick_forms.py ``ref_accumulate``
and held to it byte for byte: random figures, and a 120 s sova-tour world with requests, a
guarantee and its controllers); ``FleetBandwidth.step`` copies and compares the VMs' hosts
only after a move (the engine's links are rebuilt exactly then). Golden: 17 runs, 0
differences.

    measure                                  before           after            change
    --sim-only 1,000 x 3 x 3600              6.64, 5.58       5.98, 5.15       -8 to -10 %
    --sim-only 1,000 x 20 x 300              1.77, 1.60       1.66, 1.58       -1 to -6 %
    --physics-only 1,000 x 3 x 3600          1.78, 1.83       1.56, 1.63       -11 %
    --physics-only 1,000 x 20 x 300          0.81, 0.81       0.73, 0.78*      -4 to -10 %
    (* ran beside a test run)

Where the physics-only hour's time goes (the core calls timed by a wrapper, one run each):
core 1.03 -> 1.01 CPU-s, Python around it 0.79 -> 0.55 (the statistics' core call 0.07 of
the after). Left: ~50 us a tick of Python in ``workload.offer`` (guest caps and ``want``,
the file mask, the cycles' copies, four frozen dataclasses and the facade's conversions),
~30 in ``network.share``, ~20 in ``Engine._count``, ~40 in ``FleetBandwidth.step`` beside
its core calls; each is a few numpy passes or object builds of 1-5 us, so more needs the
offer, share and count facades to take the engine's arrays once (a handle the core keeps)
rather than ~60 arrays per tick, which touches the ``threads`` signatures of another
branch.

settle38 (2026-12-08): a settled host costs no Python call per control period. The world
publishes the period once (``sim/fleet_settle.py``: its sensing, the settled hosts'
inventories and queues, each host's last load; one array assignment marks the settled
hosts); an agent's period records are descriptors that apply it when next read or written
(it steps, polls or reports), so no ``settle`` call, ``Loads``/``LoadShares``/``HostLoads``
or ``report_vms`` per settled host; ``FleetControl.settled`` builds a host's desired
holders and ranking only when read; the manager takes the settled hosts' VM loads as
``SettledVMReports`` over the period's arrays; ``fastplan`` reads window ownership through
C-level maps. Golden 0 differences. ``--sim-only --reps 3`` medians, before (main 447c76f,
``--sova-src``) and after alternating, two pairs each, load 2.6-5.2:

    1,000 x 3 x 3600 s            5.96, 5.59                4.78, 4.70       (-16 to -20 %)
    1,000 x 20 x 300 s            1.59, 1.79                1.54, 1.72       (-3 %)
    --hot 0.17, 1,000 x 3 x 600   2.12, 2.10                2.06, 1.88       (-3 to -10 %)

Peak RSS 103 -> 107 MiB at the hour (the manager holds the last period's arrays through
its reports). ``hot_round.py``: the daemon's round at 10,000 hosts 0.122 / 0.127 s before,
0.132 / 0.122 after (its ``observed`` 1.95 -> 1.71 ms, ``windows`` 5.98 -> 4.57 ms);
2,000 hosts 0.020 both. ``per_host_core.py`` within its noise (``HostSensor`` 20 VMs core
70.3 / 61.5 -> 67.1 / 60.7 µs, ``bandwidth_step`` 20 VMs 423 / 376 -> 397 / 367). An agent
stepping alone (sova-tour, the world's fleet passes off, as a daemon's; best of 5) 188.5 /
173.9 -> 185.3 / 181.9 µs a step: the records' descriptors cost nothing measurable. Left per
host per period on the control side: ``FleetControl._free``'s reads of each agent (in flight,
signal, fences; ~0.4 ms a period at 1,000 hosts), ``_inventories``' loop, a
``SettledVMReports`` per host and the intake's dict updates.

threads38, second task (the hot fleet, ``--hot 0.17``): the movers of all the round's hot
hosts ranked at once over arrays (hotspot._Ranking: relief, cost, benefit and MF for every
VM in a few array operations, one lexsort; ``rank_movers`` is it for one host, its readable
form now the oracle in tests/coordinate_oracle.py), refusals formatted only for a host
without a mover, the cold ranking one lexsort, each listed host's text once a round.
``--sim-only --hot 0.17 --sizes 1000x3 --duration 600 --reps 3``, alternating with
``--sova-src`` HEAD before (0500e8f), CPU s medians, load 1.4-1.8: 1.75, 1.82, 1.84 before,
1.74, 1.62, 1.72 after. Inside it (process time of the calls, one run each): plan_hot
0.70-0.76 -> 0.53-0.58 s, the manager's round (coordinate_windows) 0.83-0.90 -> 0.64-0.71.
What is left of plan_hot: the screening 0.17 (its refusal text 0.14), the agents' VM loads
built as VMLoad objects when first read 0.14 (agent/loop.py VMLoadReports, outside this
task), signals 0.06, the ranking 0.04. benchmarks/hot_round.py, daemon round at 10,000
hosts / 1,700 hot, median of 5-7 rounds, alternating: 0.140, 0.118, 0.122, 0.122 s before,
0.092, 0.113, 0.100, 0.097 after. Golden 0 differences.

report38 (2026-12-08 01:00-01:50, load 2-8 on the 2 cores; before = main 447c76f through
``--sova-src``, runs alternating): what ``sova simulate`` pays outside the simulation.
Scenario loading: the event builder builds a scalar once per (tag, text, quoting) and
reuses it (most repeat), dispatches events on their class, and skips the depth walk of the
built document unless an alias could reach past the builder's own bound; parse_size's
table is built once. The fleet plots' percentile bands come from one sort per block
(``fleet.row_percentiles``, nanpercentile's numbers bit for bit) instead of nanpercentile's
row-at-a-time walk, figures are made at the 90 dpi they are saved at (text measured
once, not at 100 then 90), and a walk of the spilled timeline that needs a few columns
reads only those (``Timeline.chunks(columns)``: the metric grids, vm_means, vf_hosts and
the holding plot; ~120 MB a walk of the hour before). Golden 17 runs, 0 differences; the
hour's PNGs byte-identical but for the dpi change, which moves margins by a pixel (looked
at side by side). Median (range) of 3:

    in one process (CPU s)            before                 after
    load 1,000 x 3 (0.8 MB)           0.33 (0.32-0.35)       0.24 (0.22-0.24)
    load 1,000 x 20 (2.9 MB)          1.25 (1.18-1.27)       0.90 (0.86-0.92)
    write_outputs 1,000 x 3 x 3600    1.74 (1.71-1.81)       1.40 (1.28-1.47)
    write_outputs 1,000 x 20 x 300    1.43 (1.36-1.44)       1.38 (1.33-1.47) (no chunks(columns))
    whole command (load 2.1-2.3), wall / CPU / peak RSS
    1,000 x 20 x 300                  5.3 / 5.3 / 196 MiB    4.7 / 4.6 / 194 MiB
    1,000 x 3 x 3600                  8.4 / 8.3 / 138 MiB    8.0 / 7.9 / 136 MiB

(ranges: 1,000 x 20 CPU 5.1-5.3 -> 4.6-4.7, wall 5.1-5.4 -> 4.7-5.0; the hour CPU 8.1-8.5
-> 7.8-8.1, wall 8.3-8.4 -> 7.9-8.2). Tried and dropped:
matplotlib imported in a background thread while the simulation runs (the core's kernels
release the GIL): the whole hour went 7.3-8.2 -> 7.9-10.4 s wall, CPU 6.9-7.3 -> 7.4-7.8 s,
peak RSS 141 -> 152 MiB (each return from a kernel waits for the importing thread to
give the GIL back; and the import's memory now sits under the simulation's peak). Left:
matplotlib's import (~0.3 CPU-s) and savefig/tight_layout (~0.6 CPU-s for the hour's four
PNGs) are most of the report; hiding them needs a separate process drawing from arrays it
is sent (a fork after the simulation cost ~60 MiB of PSS in issue 23), and the timeline
walks for the grids (~0.15 s) could share one walk at the cost of holding three grids.

tick38, second part (2026-12-08 01:42-01:51, on ``lead`` = main + threads38 + tick38;
before = that tree's 5c78cc2 through ``--sova-src``, same core; alternating, CPU s, median
of 3, load average 1.7-3.5): the ten facade dataclasses built every tick (offer's Cycles x2,
Load, OfferParams, Offered; count's VmTick, HostTick, Counted; share's ShareVms, Requests,
Shared: ~100 fields) are plain, not frozen. A frozen dataclass sets each field through
``object.__setattr__``: 4.0 us for 20 fields against 0.73 plain (timeit, this machine), so
~17 us of every tick went to building them. Golden: 17 runs, 0 differences.

    measure                                  before           after            change
    --physics-only 1,000 x 3 x 3600          1.61, 1.56       1.47, 1.48       -5 to -9 %
    --sim-only 1,000 x 3 x 3600              5.43, 5.40       5.47, 5.26       in the noise
    --sim-only 1,000 x 20 x 300              1.61, 1.58       1.68*, 1.54      in the noise
    (* two of its three runs waited on the CPU: wall 2.41, 2.75 s)

Not done, and why: a handle the core keeps (or arguments prepared once per run) would save
at most the facades' conversions (~60 ``np.ascontiguousarray`` no-ops, ~75 ns each: ~5 us a
tick) beyond the dataclasses, and most of the arguments cannot be held: the offer's cycle
fractions are fresh copies the core writes, and share's and count's inputs are the tick's
own results (tx, rx, need, ...). The guest caps (``guest_pps``, ``guest_limit``) are written
by the engine's actions, FleetBandwidth and tests, with no version to invalidate a cached
cap on; the rest of offer's Python is ~4 numpy passes of 1-2 us. What remains of the
per-tick Python (~130 us) is numpy passes, not call overhead: it moves only by taking those
passes (guest caps, ``want``, the paused mask, the file mask) into the core calls.

settle38, second part: the agents keep which of them act alone (in flight, signal, fences)
in ``SettledHosts.alone`` as it changes (``HostAgent._mark``: the executor's ``on_flight``,
``signal``/``decide``/``settle``, ``set_vf_freeze``), so ``FleetControl`` reads one array:
``_free`` over 1,000 agents 210 us a period (best of 5) against 0.25 us, ~0.08 s of the
hour's 360 periods. ``--sim-only --reps 3`` medians at 1,000 x 3 x 3600 s, alternating
(before = 1560b10), load 0.9-1.6: before 4.26, 3.99, 3.81; after 3.88, 3.48, 3.98 (median
3.99 -> 3.88; the gain is below the machine's noise). Golden 0 differences.

threads38, third task (2026-12-08 02:12-02:15, on ``lead`` 9046591; before = it through
``--sova-src``; alternating, load 0.8-1.0): a round ranks an agent's VM-load report from its
loads as columns (``VMLoadReports.mover_columns``: names, flat shares, memory; a settled
host's straight from the period's arrays, ``HostLoads.columns``), not from VMLoad objects;
only the movers screened get one (``vm_load``); any other mapping (the daemon's reports)
ranks from its VMLoads as before. ``--sim-only --hot 0.17 --duration 600``, CPU s, 5 and
3 runs: 1,000 x 3: 1.14, 1.15, 1.11, 1.17, 1.18 before, 1.16, 1.12, 1.13, 1.13, 1.25 after
(median 1.15 -> 1.13, in the noise: 3 VMs a host); 1,000 x 20: 4.15, 4.16, 4.30 before,
3.99, 3.97, 4.05 after (median 4.16 -> 3.99, -4 %). benchmarks/hot_round.py at 10,000 hosts,
two runs each: daemon round median 0.087, 0.088 -> 0.085, 0.085 s (not slower);
fast_coordinate 0.11, 0.12 -> 0.07, 0.07 s (its plain reports ranked without the pair lists).
Golden 0 differences.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sova.agent.config import PAPERS_MANAGER
from sova.scenario import Scenario, Workload, parse_scenario

ROOT = Path(__file__).resolve().parents[1]


def build(hosts: int, per_host: int, duration: float, seed: int) -> Scenario:
    profile = yaml.safe_load((ROOT / "scenarios/profiles/sova.yaml").read_text())
    rng = np.random.default_rng([seed, 10])
    n = hosts * per_host
    names = [f"vm{k}" for k in range(n)]
    data: dict[str, Any] = {
        "name": "sim-scale",
        "seed": seed,
        "duration": duration,
        "tick": 1.0,
        "profile": {"name": "sova", **profile},
        "hosts": [
            {
                "name": f"host{h}",
                "cores": 32,
                "memory": "256GiB",
                "nic": {"capacity": "10Gbit", "vf_pool": 4},
                "vms": names[h * per_host : (h + 1) * per_host],
            }
            for h in range(hosts)
        ],
        "vms": [
            {
                "name": name,
                "vcpus": int(rng.choice([1, 2, 4])),
                "memory": f"{int(rng.choice([1, 2, 4, 8]))}GiB",
            }
            for name in names
        ],
        "controller": {
            "period": 10,
            "vf_policy": "sova",
            "sensing": {"window": 6, "epsilon": 0.7},
            "scheduler": {"io_threshold": 62, "tolerance": 0.25, "min_dwell": 30},
            # the papers' manager (no anti-thrash rule), as in the figures below
            "manager": {"alpha": 0.75, "k": 3, "n": 5, **PAPERS_MANAGER},
        },
        "workload": [{"at": 0, "vms": {}}],
    }
    return parse_scenario(data, "simulate_scale")


def initial_mix(n: int, rng: np.random.Generator) -> list[Workload]:
    """netperf / lookbusy / hybrid duty cycles, httperf, bulk streams, scp."""
    kinds = rng.choice(6, size=n, p=[0.30, 0.15, 0.15, 0.20, 0.12, 0.08])
    out = []
    for k in kinds:
        if k == 0:
            w = Workload(net=float(rng.uniform(0.1, 1.0)), rate=float(rng.uniform(0.1e9, 0.6e9)))
        elif k == 1:
            w = Workload(cpu=float(rng.uniform(0.2, 1.0)))
        elif k == 2:
            w = Workload(
                net=float(rng.uniform(0.1, 0.6)),
                cpu=float(rng.uniform(0.1, 0.6)),
                rate=float(rng.uniform(0.1e9, 0.5e9)),
            )
        elif k == 3:
            w = Workload(
                kind="requests",
                requests_per_s=float(rng.uniform(50, 500)),
                response=int(rng.choice([4, 10, 16, 32])) * 1000,
            )
        elif k == 4:
            w = Workload(
                kind="bulk", rate=float(rng.uniform(0.1e9, 0.4e9)), streams=int(rng.integers(1, 4))
            )
        else:
            w = Workload(
                kind="file", size=int(rng.uniform(1, 4) * 2**30), rate=0.3e9, ns_per_byte=2.0
            )
        out.append(w)
    return out


def changes(
    scn: Scenario, mix: list[Workload], rng: np.random.Generator
) -> dict[float, list[tuple[int, Workload]]]:
    """Workload changes by time: trace-like duty drift and host surges (hotspots)."""
    n, hosts = len(mix), len(scn.hosts)
    per_host = n // hosts
    due: dict[float, list[tuple[int, Workload]]] = defaultdict(list)
    duty = [i for i, w in enumerate(mix) if w.kind == "duty"]
    for t in np.arange(60.0, scn.duration, 60.0):
        for i in rng.choice(duty, size=max(1, len(duty) // 30), replace=False):
            w = mix[int(i)]
            net = float(np.clip((w.net or 0.0) + rng.normal(0, 0.15), 0.0, 1.0))
            cpu = float(np.clip(w.cpu + rng.normal(0, 0.15), 0.0, 1.0))
            mix[int(i)] = w.model_copy(update={"net": net, "cpu": cpu})
            due[float(t)].append((int(i), mix[int(i)]))
    hot = rng.choice(hosts, size=max(1, hosts // 20), replace=False)
    for h in hot:
        start = float(rng.integers(30, max(31, int(scn.duration * 0.8) // 10)) * 10)
        end = start + float(rng.integers(60, 121)) * 10
        for j in rng.choice(per_host, size=3, replace=False):
            i = int(h) * per_host + int(j)
            surge = Workload(kind="bulk", rate=float(rng.uniform(2.2e9, 2.8e9)))
            due[start].append((i, surge))
            if end < scn.duration:
                due[end].append((i, mix[i]))
    return dict(sorted(due.items()))


def hot_fleet(hosts: int, per_host: int, hot: float, rng: np.random.Generator) -> list[Workload]:
    """A fleet where a ``hot`` fraction of the hosts stays hot and has no feasible target:
    on a hot host three bulk VMs send 3 Gbit/s each (0.9 of the 10 Gbit/s link), on every
    other host three send 5.0-6.3 Gbit/s between them (0.50-0.63, under the manager's alpha
    of 0.75, with room for the rates' jitter), so any hot VM (0.3) would lift any other host
    to 0.8 or more: every hot host
    is screened against the whole ranking and refused, every period, for the whole run. The
    other VMs of a host (``per_host`` above 3) idle on a light duty cycle."""
    hot_hosts = set(rng.choice(hosts, size=max(1, int(hosts * hot)), replace=False).tolist())
    out = []
    for h in range(hosts):
        host_rate = 9e9 if h in hot_hosts else float(rng.uniform(5.0e9, 6.3e9))
        for j in range(per_host):
            if j < 3:
                out.append(Workload(kind="bulk", rate=host_rate / 3))
            else:
                out.append(Workload(net=0.05, rate=1e6))
    return out


def scenario_data(
    hosts: int, per_host: int, duration: float, seed: int, hot: float = 0.0
) -> dict[str, Any]:
    """The sim_scale workload as a scenario mapping (what a user's YAML file would hold);
    ``hot`` above 0 gives :func:`hot_fleet` instead, with no changes over time."""
    scn = build(hosts, per_host, duration, seed)
    rng = np.random.default_rng([seed, 11])
    if hot > 0:
        mix = hot_fleet(hosts, per_host, hot, rng)
        due: dict[float, list[tuple[int, Workload]]] = {}
    else:
        mix = initial_mix(hosts * per_host, rng)
        due = changes(scn, list(mix), rng)
    names = [v.name for v in scn.vms]
    data: dict[str, Any] = scn.model_dump(mode="json", exclude_defaults=True)
    # the product's defaults for what the harness leaves out: bandwidth control every second
    data["controller"]["bandwidth_policy"] = "sova"
    data["workload"] = [
        {"at": 0, "vms": {names[i]: _w(w) for i, w in enumerate(mix)}},
        *({"at": float(t), "vms": {names[i]: _w(w) for i, w in items}} for t, items in due.items()),
    ]
    return data


def _w(w: Any) -> dict[str, Any]:
    out: dict[str, Any] = w.model_dump(mode="json", exclude_defaults=True)
    return out


def run_sova(
    scenario: Path, out: Path, src: Path | None = None, threads: int = 1
) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MiB) of one ``sova simulate`` in a child process; ``src``
    runs another tree's code (a checkout of the old version, for before/after);
    ``threads``: its ``--threads`` (left out at 1, which an older tree may not know)."""
    cmd = [str(ROOT / ".venv/bin/python"), "-m", "sova", "simulate", str(scenario)]
    cmd += ["--out", str(out), "--no-progress"]
    cmd += ["--threads", str(threads)] if threads != 1 else []
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"sova simulate exited {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def run_cloudsim(
    cs: Path, hosts: int, vms: int, duration: float, seed: int
) -> tuple[float, float, float]:
    cmd = ["java", "-cp", "target/classes:target/lib/*", "perf.ScaleBench"]
    cmd += [str(hosts), str(vms), f"{duration:g}", "1", str(seed)]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cs, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"CloudSim Plus exited {os.waitstatus_to_exitcode(status)}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def profile(
    hosts: int, per_host: int, duration: float, seed: int, work: Path, hot: float = 0.0
) -> None:
    """cProfile of the product path in this process: run_policy, then the outputs."""
    import cProfile
    import pstats

    from sova.scenario import load_sweep
    from sova.sim.output import write_outputs
    from sova.sim.runner import run_policy

    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario_data(hosts, per_host, duration, seed, hot)))
    scn = load_sweep(path)[0]
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    runs = [run_policy(scn, p) for p in scn.policies]
    prof.disable()
    sim_s = time.perf_counter() - t
    t = time.perf_counter()
    prof.enable()
    write_outputs(work / "out", [(scn, runs)])
    prof.disable()
    out_s = time.perf_counter() - t
    print(f"run_policy {sim_s:.1f} s, write_outputs {out_s:.1f} s (under cProfile)")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(45)


def simulate_only(
    hosts: int,
    per_host: int,
    duration: float,
    seed: int,
    work: Path,
    physics: bool,
    hot: float,
    threads: int = 1,
) -> tuple[float, float]:
    """(CPU s of every thread, wall s) of the simulation alone in this process:
    ``run_policy`` (``physics`` False) or the world without agents, i.e. the engine's ticks
    and the world's per-tick statistics (``physics`` True); ``threads``: the core's
    (passed only when not 1, which an older tree's code may not take)."""
    from sova.scenario import load_sweep
    from sova.sim.runner import run_policy
    from sova.sim.world import World

    path = work / f"scenario-{hosts}x{per_host}.yaml"
    path.write_text(yaml.safe_dump(scenario_data(hosts, per_host, duration, seed, hot)))
    scn = load_sweep(path)[0]
    spec = scn.policy_specs[0]
    kw: dict[str, Any] = {} if threads == 1 else {"threads": threads}
    t, w = time.process_time(), time.perf_counter()
    if physics:
        World(scn, spec, with_agents=False, **kw).run_until(scn.duration)
    else:
        run_policy(scn, spec.name, **kw)
    return time.process_time() - t, time.perf_counter() - w


def run_simulate_only(
    size: tuple[int, int], args: argparse.Namespace, physics: bool
) -> tuple[float, float, float]:
    """(CPU s, peak RSS MiB, wall s) of :func:`simulate_only` in a child process
    (``--sova-src`` runs another tree's code there)."""
    cmd = [str(ROOT / ".venv/bin/python"), __file__, "--child", f"{size[0]}x{size[1]}"]
    cmd += ["--duration", str(args.duration), "--seed", str(args.seed)]
    cmd += ["--physics-only"] if physics else []
    cmd += ["--hot", str(args.hot), "--threads", str(args.threads)]
    env = dict(os.environ)
    if args.sova_src is not None:
        env["PYTHONPATH"] = str(args.sova_src)
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    cpu, rss, wall = out.split()
    return float(cpu), float(rss), float(wall)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sizes", default="100x3", help="HOSTSxVMS_PER_HOST, comma-separated")
    ap.add_argument("--duration", type=float, default=300.0, help="simulated seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=1, help="runs per size (median reported)")
    ap.add_argument("--cloudsim", type=Path, help="a built copy of cloudsim-compare")
    ap.add_argument("--profile", action="store_true", help="cProfile the first size instead")
    ap.add_argument("--keep", type=Path, help="keep the scenarios and outputs here")
    ap.add_argument("--sova-src", type=Path, help="run this src/ tree instead (before/after)")
    ap.add_argument(
        "--sim-only", action="store_true", help="CPU s of run_policy alone (no outputs)"
    )
    ap.add_argument(
        "--physics-only",
        action="store_true",
        help="CPU s of the world without agents (engine ticks and per-tick statistics)",
    )
    ap.add_argument(
        "--hot",
        type=float,
        default=0.0,
        help="the hot fleet instead: this fraction of hosts hot all run, none with a target",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="the core's threads (sova simulate --threads; run_policy's with --sim-only)",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        import resource

        h, v = (int(x) for x in args.child.split("x"))
        with tempfile.TemporaryDirectory() as tmp:
            cpu, wall = simulate_only(
                h,
                v,
                args.duration,
                args.seed,
                Path(tmp),
                args.physics_only,
                args.hot,
                args.threads,
            )
        print(cpu, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, wall)
        return 0
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="sova-simscale-")) if args.keep is None else args.keep
    work.mkdir(parents=True, exist_ok=True)
    try:
        if args.profile:
            h, v = sizes[0]
            profile(h, v, args.duration, args.seed, work, args.hot)
            return 0
        if args.sim_only or args.physics_only:
            what = "world without agents" if args.physics_only else "run_policy"
            print(
                f"{'hosts':>6} {'VMs':>6} {'CPU s':>7} {'wall s':>7} {'VM-steps/CPU-s':>15} "
                f"{'peak MiB':>9}"
            )
            for size in sizes:
                runs = [run_simulate_only(size, args, args.physics_only) for _ in range(args.reps)]
                cpu, peak, wall = (statistics.median(x) for x in zip(*runs, strict=True))
                steps = size[0] * size[1] * int(round(args.duration))
                line = f"{size[0]:>6} {size[0] * size[1]:>6} {cpu:>7.2f} {wall:>7.2f}"
                print(
                    f"{line} {steps / cpu:>15,.0f} {peak:>9,.0f}   ({what}, {args.threads} "
                    "thread(s); CPU/wall s of each run: "
                    + ", ".join(f"{c:.2f}/{w:.2f}" for c, _, w in runs)
                    + ")",
                    flush=True,
                )
            return 0
        head = (
            f"{'hosts':>6} {'VMs':>6} {'wall s':>8} {'CPU s':>7} {'VM-steps/s':>11} {'peak MiB':>9}"
        )
        if args.cloudsim:
            head += f" {'CS+ wall':>8} {'CS+ CPU':>7} {'CS+ MiB':>8} {'speed x':>7} {'mem x':>6}"
        print(head + "   (speed x, mem x: CloudSim Plus / Sova, wall and peak RSS)", flush=True)
        for h, v in sizes:
            scn_path = work / f"sim-scale-{h}x{v}.yaml"
            data = scenario_data(h, v, args.duration, args.seed, args.hot)
            scn_path.write_text(yaml.safe_dump(data))
            ours: list[tuple[float, float, float]] = []
            theirs: list[tuple[float, float, float]] = []
            for _ in range(args.reps):  # interleaved: both see the same load
                ours.append(run_sova(scn_path, work / f"out-{h}x{v}", args.sova_src, args.threads))
                if args.cloudsim:
                    theirs.append(run_cloudsim(args.cloudsim, h, h * v, args.duration, args.seed))
            wall, cpu, peak = (statistics.median(x) for x in zip(*ours, strict=True))
            steps = h * v * int(round(args.duration))
            line = (
                f"{h:>6} {h * v:>6} {wall:>8.1f} {cpu:>7.1f} {steps / wall:>11,.0f} {peak:>9,.0f}"
            )
            if theirs:
                cw, cc, cp = (statistics.median(x) for x in zip(*theirs, strict=True))
                line += f" {cw:>8.1f} {cc:>7.1f} {cp:>8,.0f} {cw / wall:>7.2f} {cp / peak:>6.2f}"
            print(line, flush=True)
            if args.reps > 1:
                print("        walls: " + ", ".join(f"{w:.1f}" for w, _, _ in ours), flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
