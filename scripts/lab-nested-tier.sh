#!/usr/bin/env bash
# The nested SR-IOV tier (tests/lab/test_nested_*.py: real igb VFs in QEMU 10 TCG L1
# hypervisors, teamed L2 guests), as root, with its time. One boot of two L1s serves every
# module (tests/lab/conftest.py's nested_lab). Takes both cores for tens of minutes and
# must not run beside the ordinary lab tier. .ci/run runs it after the ordinary lab tiers;
# it exits 0 with a reason where it cannot run.
#
# Usage: scripts/lab-nested-tier.sh [VENV] [PYTEST ARGS...]   (default VENV: .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv}"
shift || true
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]] || ! "$PY" -c "import pytest" 2>/dev/null; then
    echo "lab-nested-tier: no python with pytest at $PY (run ./test.sh once)" >&2
    exit 2
fi
why=$(PYTHONPATH=src "$PY" -c "from sova.lab.nested import unavailable; print(unavailable() or '')")
if [[ -n "$why" ]]; then
    echo "lab-nested-tier: skipped: $why"
    exit 0
fi
start=$SECONDS
status=0
SOVA_LAB_SRIOV=1 nice -n 10 "$PY" -m pytest -ra --durations=0 -s \
    tests/lab/test_nested_migration.py tests/lab/test_nested_faults.py \
    tests/lab/test_nested_sriov.py "$@" || status=$?
echo "lab-nested-tier: took $((SECONDS - start)) s (exit $status, load average $(cut -d' ' -f1-3 /proc/loadavg))"
exit $status
