"""Names vulture (``[tool.vulture]`` in pyproject.toml) must not report as dead code.

Each group says why the name stays although nothing in src/sova reads it. A new entry
needs a reason; dead code is removed, not listed here. (Parsed by vulture, never run.)
"""

# ruff: noqa
_: object

# Public API used by the tests (and by plug-ins and operators' scripts)
_.unregister  # unused method (src/sova/agent/registry.py:101)
_.submitted  # unused method (src/sova/driver/base.py:83)
_.add_event_listener  # unused method (src/sova/driver/libvirt_driver/driver.py:368)
_.budget_s  # unused method (src/sova/driver/libvirt_driver/connection.py:127)
DriverActuator  # unused class (src/sova/orchestrator/libvirt.py:18)
proposals_from_signals  # unused function (src/sova/orchestrator/recommend.py:41)
_.effective_bps  # unused method (src/sova/policy/bandwidth.py:104)
_.R  # unused property (src/sova/policy/bandwidth.py:487)
_.reset  # unused method (src/sova/policy/bandwidth.py:497)
algorithm1  # unused function (src/sova/policy/operation.py:65)
tier_rates  # unused function (src/sova/policy/tiers.py:39)
fit_tiers  # unused function (src/sova/policy/tiers.py:87)
grouped_waterfill  # unused function (src/sova/policy/waterfill.py): its tests and the tick's readable form; the tick's fills run in the core's sharing
ar1_coefficient  # unused function (src/sova/policy/hotspot.py): the AR(1) of docs/design.md#ar1, tests
ar1_forecast  # unused function (src/sova/policy/hotspot.py): the detector calls the core directly
DutyWorkload  # unused variable (src/sova/scenario/schema.py)
_.refresh_capabilities  # unused method (src/sova/driver/libvirt_driver/driver.py): the libvirt tests
_.reconnects  # unused property (src/sova/driver/libvirt_driver/driver.py): the libvirt reconnect tests
_.strategies  # unused property (src/sova/driver/libvirt_driver/driver.py): the lab's driver test
ensure_daemon  # unused function (src/sova/lab/daemons.py): the lab's tests
daemon_pid  # unused function (src/sova/lab/daemons.py): the lab's tests
l2_xml  # unused function (src/sova/lab/nested.py): the nested lab's test
l2_guest_xml  # unused function (src/sova/lab/nested.py): the nested lab's tests
stop_agent  # unused function (src/sova/lab/nested.py): the nested lab's tests (and their reset)
l1_exec  # unused function (src/sova/lab/nested.py): the nested lab's fault tests
MAX_LEGEND  # unused variable (src/sova/sim/fleet.py): tests/test_fleet_report.py
draws  # unused function (src/sova/policy/tick.py): the tick's draws alone, which the readable
# tick in tests/test_tick_forms.py (the oracle) takes; the simulator draws inside offer_load

# Kept for another branch of issue 19: `sova host forget` calls it
_.forget  # unused method (src/sova/manager/decisions/core.py:178)

# Called by a framework by name: Watcher loads the strategy from an entry point; typer and
# FastAPI read parameters; the drivers' registry names the wiring factories by reference
# (sova.manager.daemons.drivers)
version  # unused variable (src/sova/cli.py:43)
x_sova_host  # unused variable (src/sova/manager/daemons/service/app.py:241)
libvirt_wiring  # unused function (src/sova/manager/daemons/agent/wiring.py:110)
mock_wiring  # unused function (src/sova/manager/daemons/agent/wiring.py:133)
remote_wiring  # unused function (src/sova/demo.py)
agent_script  # unused function (src/sova/console.py): the `sova-agent` console script
SovaHotspot  # unused class (src/sova/openstack/watcher_strategy.py:43)
DATASOURCE_METRICS  # unused variable (src/sova/openstack/watcher_strategy.py:46)
_.get_display_name  # unused method (src/sova/openstack/watcher_strategy.py:60)
_.get_translatable_display_name  # unused method (src/sova/openstack/watcher_strategy.py:64)
_.pre_execute  # unused method (src/sova/openstack/watcher_strategy.py:87)
_.post_execute  # unused method (src/sova/openstack/watcher_strategy.py:90)
_.do_execute  # unused method (src/sova/openstack/watcher_strategy.py:93)

# Fields of records, wire messages and state read by name (pydantic models serialised to
# JSON, CSV rows written from their fields, counters exported as metrics or reports)
PAPERS_MANAGER  # unused variable (src/sova/agent/config.py:99)
desired_rates  # unused variable (src/sova/agent/loop.py:66)
evicted  # unused variable (src/sova/manager/daemons/conn_guard.py:68)
too_large  # unused variable (src/sova/manager/daemons/conn_guard.py:70)
handshake_failed  # unused variable (src/sova/manager/daemons/conn_guard.py:84)
_.handshake_failed  # unused attribute (src/sova/manager/daemons/conn_guard.py:168)
guard_book  # unused variable (src/sova/manager/daemons/conn_guard.py:78)
_.evicted  # unused attribute (src/sova/manager/daemons/conn_guard.py:99)
_.too_large  # unused attribute (src/sova/manager/daemons/conn_guard.py:149)
MODES  # unused variable (src/sova/manager/daemons/service/control.py:30)
_.store_ok  # unused attribute (src/sova/manager/daemons/service/service.py:231)
_.store_ok  # unused attribute (src/sova/manager/daemons/service/service.py:405)
_.store_ok  # unused attribute (src/sova/manager/daemons/service/service.py:408)
released  # unused variable (src/sova/manager/daemons/schema.py:243)
last_seen_s  # unused variable (src/sova/manager/daemons/schema.py:256)
age_s  # unused variable (src/sova/manager/daemons/schema.py:257)
vf_frozen  # unused variable (src/sova/manager/daemons/schema.py:269)
pinned_vms  # unused variable (src/sova/manager/daemons/schema.py:270)
vf_frozen_vms  # unused variable (src/sova/manager/daemons/schema.py:271)
cluster_set_by  # unused variable (src/sova/manager/daemons/schema.py:293)
next_after  # unused variable (src/sova/manager/daemons/schema.py:354)
next_after  # unused variable (src/sova/manager/daemons/schema.py:368)
next_after  # unused variable (src/sova/manager/daemons/schema.py:385)
next_before  # a log page's field for the older page (src/sova/manager/daemons/schema.py; read by clients)
pairing  # unused variable (src/sova/driver/libvirt_driver/fastpath.py:52)
pairing  # unused variable (src/sova/driver/libvirt_driver/fastpath.py:102)
pairing  # unused variable (src/sova/driver/libvirt_driver/fastpath.py:209)
phys_function  # unused variable (src/sova/driver/libvirt_xml.py:280)
accel_reason  # unused variable (src/sova/lab/lab.py:25)
LIBVIRT_DIRS  # unused variable (src/sova/lab/settings.py:10)
discrepancies  # unused variable (src/sova/orchestrator/openstack.py:130)
_.discrepancies  # unused attribute (src/sova/orchestrator/openstack.py:206)
last_rate_bps  # unused variable (src/sova/policy/sensing.py:174)
_.resets  # unused attribute (src/sova/policy/sensing.py:202)
_.resets  # unused attribute (src/sova/policy/sensing.py:225)
vf_rate_mbps  # unused variable (src/sova/record.py:43)
response_ms  # unused variable (src/sova/record.py:52)
_.cpu_use  # unused attribute (src/sova/sim/engine.py:124)
size_bytes  # unused variable (src/sova/sim/state.py:39)
_.host_mem  # unused attribute (src/sova/sim/state.py:76)
_.cpu_use  # unused attribute (src/sova/sim/state.py:124)
rx_bits  # unused variable (src/sova/sim/world.py:52)
host_tx_bits  # unused variable (src/sova/sim/world.py:53)
_.rx_bits  # unused attribute (src/sova/sim/world.py:117)
_.host_tx_bits  # unused attribute (src/sova/sim/world.py:118)
_.rx_bits  # unused attribute (src/sova/sim/world.py:244)
_.host_tx_bits  # unused attribute (src/sova/sim/world.py:245)
vf_rate_mbps  # unused variable (src/sova/testbed/runner.py:57)
last_round_s  # unused variable (src/sova/manager/daemons/schema.py)
last_round_duration_s  # unused variable (src/sova/manager/daemons/schema.py)

# The drain view's response fields (src/sova/manager/daemons/service/fleet.py): read by the CLI and
# operators' scripts from the JSON by key
_.moves_done
_.moves_failed

# Read by uvicorn's serve loop (a standby's server stops when it wins the leadership)
_.should_exit  # unused attribute (src/sova/manager/daemons/service/standby.py)

# Python calls a module's __getattr__ for a name it lacks: `from sova.cli import app` (the
# tests, scripts/manpages.py) gets the whole command line through it (src/sova/cli.py)
__getattr__  # unused function (src/sova/cli.py)

# matplotlib calls an artist's draw when the figure renders (src/sova/sim/fleet.py: _PixelGrid)
_.draw  # unused method
# The decision benchmark (benchmarks/decisions.py, outside vulture's paths) and its tests
blip_cost_mbit  # unused function (src/sova/sim/decisions.py)
oracle_policy  # unused function (src/sova/sim/oracle.py)
_.value_mbit  # unused variable (src/sova/sim/oracle.py): the model's objective, for readers
# A plug-in registry reads the entry points again after a package is installed at run time
# (tests/test_planning_pipeline.py installs a throwaway distribution on sys.path)
_.rescan  # unused method (src/sova/plugins.py)
# What the change-based view's last look did (full, changes, cached): read by the tier's and
# the unit tests' request counts, and by an operator in a debugger
_.last_look  # unused attribute (src/sova/orchestrator/openstack_view.py)
# The reader of a timeline written as columns, for whoever analyses a fleet's run (README,
# docs/design.md#timeline-resolution); tests/test_timeline_columns.py reads with it
read_npy_columns  # unused function (src/sova/writer.py)
