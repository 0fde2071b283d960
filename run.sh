#!/usr/bin/env bash
# The main job on the embedded default world: `sova demo` starts the simulated cluster of
# scenarios/sova-tour.yaml (VFs following the load, a guarantee held at full link use, a
# hotspot removed by a migration), the manager and one agent per host as separate
# processes on 127.0.0.1, shows a live view, compares with doing nothing, and prints where
# its report is. Extra arguments go to `sova demo` (e.g. another scenario, --out DIR,
# --no-live, --no-baseline).
set -euo pipefail
cd "$(dirname "$0")"
SOVA_EXTRAS="${SOVA_EXTRAS:-sim,manager}"  # the demo runs the simulator, the manager and agents
source scripts/_venv.sh
exec .venv/bin/sova demo "$@"
