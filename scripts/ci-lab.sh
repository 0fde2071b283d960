#!/usr/bin/env bash
# The hypervisor lab tier of CI (tests/lab/, marker `lab`), as root: installs libvirt's
# daemon, QEMU and the image tools (scripts/ci-setup-lab.sh), builds the guest image once
# (cached by the hash of its inputs under /var/cache/sova-lab), and runs the tier, which
# brings a lab up, runs real QEMU guests under two libvirt daemons and takes it down.
# Without root the tests skip and say why. Measured on 2 cores under TCG: see docs/lab.md.
#
# Usage: scripts/ci-lab.sh [--qemu system|backports] [VENV]   (default: system, .venv)
#   --qemu backports: the hypervisors run QEMU 10 from bookworm-backports (fetched once and
#   cached by scripts/lab-nested-qemu.sh, laid over the machine's QEMU only inside the lab's
#   mount namespaces; docs/lab.md "QEMU 7.2 and QEMU 10").
set -euo pipefail
cd "$(dirname "$0")/.."
QEMU="${SOVA_LAB_QEMU:-system}"
if [[ "${1:-}" == "--qemu" ]]; then
    QEMU="${2:?ci-lab: --qemu needs system or backports}"
    shift 2
fi
export SOVA_LAB_QEMU="$QEMU"
VENV="${1:-.venv}"
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
    echo "ci-lab: no python at $PY (create the venv first, e.g. by running ./test.sh)" >&2
    exit 2
fi
if ! "$PY" -c "import pytest" 2>/dev/null; then
    echo "ci-lab: pytest is not installed in $VENV (sudo scripts/lab-setup.sh installs it)" >&2
    exit 2
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "ci-lab: not root: the lab tests will skip (they need libvirt daemons)" >&2
    exec "$PY" -m pytest tests/lab -m lab -ra
fi
bash scripts/ci-setup-lab.sh
bash scripts/ci-setup-libvirt.sh "$VENV"
bash scripts/lab-image.sh >/dev/null
if [[ "$QEMU" == backports ]]; then
    bash scripts/lab-nested-qemu.sh >/dev/null  # fetched once, before the clock starts
fi
start=$SECONDS
status=0
"$PY" -m pytest tests/lab -m lab -ra --durations=0 || status=$?
echo "ci-lab: lab tier on QEMU $QEMU took $((SECONDS - start)) s (exit $status)"
exit $status
