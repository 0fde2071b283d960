"""Scenario files: the YAML an operator writes to try a policy before touching hosts.

Validation is strict (unknown keys are errors) and every error names the field path and
the offending value, e.g. ``workload[0].vms.VM1.net: must be <= 1 (got 1.4)``, because a
typo in a scenario should never silently turn into a default.

``schema`` holds the models, ``files`` reads the files a scenario names (with bounds) and
checks trace CSVs, ``load`` builds the YAML and expands sweeps. Everything is importable
from ``sova.scenario`` itself, as it was when the package was one module.
"""

from __future__ import annotations

from sova.scenario.files import _SUMMARIES as _SUMMARIES

# Explicit re-exports (``X as X``): the names callers and tests import from here; the
# private ones are what tests/test_scenario_safety.py and test_trace_import.py reach into.
from sova.scenario.files import MAX_FILE_BYTES as MAX_FILE_BYTES
from sova.scenario.load import MAX_NESTING as MAX_NESTING
from sova.scenario.load import SAFE_LOADER as SAFE_LOADER
from sova.scenario.load import _events_to_data as _events_to_data
from sova.scenario.load import _yaml as _yaml
from sova.scenario.load import load_scenario as load_scenario
from sova.scenario.load import load_sweep as load_sweep
from sova.scenario.schema import MAX_DURATION as MAX_DURATION
from sova.scenario.schema import MAX_REQUESTS_PER_S as MAX_REQUESTS_PER_S
from sova.scenario.schema import MAX_SEED as MAX_SEED
from sova.scenario.schema import MAX_STEPS as MAX_STEPS
from sova.scenario.schema import MIN_TICK as MIN_TICK
from sova.scenario.schema import NUMERIC_METRICS as NUMERIC_METRICS
from sova.scenario.schema import ClassificationSpec as ClassificationSpec
from sova.scenario.schema import ControllerSpec as ControllerSpec
from sova.scenario.schema import Duration as Duration
from sova.scenario.schema import DutyWorkload as DutyWorkload
from sova.scenario.schema import ExpectedHolders as ExpectedHolders
from sova.scenario.schema import Fraction as Fraction
from sova.scenario.schema import HostSpec as HostSpec
from sova.scenario.schema import ManagerSpec as ManagerSpec
from sova.scenario.schema import NICSpec as NICSpec
from sova.scenario.schema import OutputSpec as OutputSpec
from sova.scenario.schema import PaperSpec as PaperSpec
from sova.scenario.schema import PaperValue as PaperValue
from sova.scenario.schema import Phase as Phase
from sova.scenario.schema import PolicySpec as PolicySpec
from sova.scenario.schema import ProfileSpec as ProfileSpec
from sova.scenario.schema import Rate as Rate
from sova.scenario.schema import Scenario as Scenario
from sova.scenario.schema import ScenarioError as ScenarioError
from sova.scenario.schema import SchedulerSpec as SchedulerSpec
from sova.scenario.schema import SensingSpec as SensingSpec
from sova.scenario.schema import Size as Size
from sova.scenario.schema import SLASpec as SLASpec
from sova.scenario.schema import SweepSpec as SweepSpec
from sova.scenario.schema import VMGroup as VMGroup
from sova.scenario.schema import VMSpec as VMSpec
from sova.scenario.schema import Workload as Workload
from sova.scenario.schema import parse_scenario as parse_scenario
