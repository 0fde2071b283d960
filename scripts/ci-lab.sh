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
# What the tier's lab (tests/lab/conftest.py: TEST_ROOT, TEST_PREFIX) left behind, looked
# for independently of `sova lab down`'s own bookkeeping (issue 18: a libvirtd in its mount
# namespace survived a `down` that said "nothing to remove").
LAB_ROOT=/var/lib/sova-lab-test
LAB_PREFIX=svq
leftovers() {
    local found="" links ns procs
    [[ -e "$LAB_ROOT" ]] && found+=" directory $LAB_ROOT;"
    links=$(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$LAB_PREFIX" | tr '\n' ' ' || true)
    [[ -n "$links" ]] && found+=" links $links;"
    ns=$(ip netns list | awk '{print $1}' | grep "^$LAB_PREFIX" | tr '\n' ' ' || true)
    [[ -n "$ns" ]] && found+=" namespaces $ns;"
    # a process whose command line or mount table names the lab's directory
    procs=$( { pgrep -f "$LAB_ROOT/" || true; grep -l "$LAB_ROOT/" /proc/[0-9]*/mountinfo 2>/dev/null | cut -d/ -f3 || true; } | sort -u | tr '\n' ' ')
    [[ -n "$procs" ]] && found+=" processes $procs;"
    echo "$found"
}
start=$SECONDS
status=0
"$PY" -m pytest tests/lab -m lab -ra --durations=0 || status=$?
echo "ci-lab: lab tier on QEMU $QEMU took $((SECONDS - start)) s (exit $status)"
# The tier's session fixture ends with `down`: nothing may be left for the next tier (CI
# runs it again on the other QEMU). A leftover fails the tier, then is removed.
left=$(leftovers)
if [[ -n "$left" ]]; then
    echo "ci-lab: the tier left behind:$left" >&2
    SOVA_LAB_DIR="$LAB_ROOT" SOVA_LAB_PREFIX="$LAB_PREFIX" "$PY" -m sova.cli lab down >&2 || true
    status=1
else
    echo "ci-lab: nothing of the lab left (no process, link, namespace or directory)"
fi
exit $status
