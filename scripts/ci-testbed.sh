#!/usr/bin/env bash
# Installs what the namespace testbed needs and runs its tests (tests/testbed/), as root.
#
# The testbed builds real network namespaces, HTB qdiscs and TCP flows, so it needs root,
# iproute2 (ip, tc, ss), iperf3 and ping from Debian, and pyroute2 in the venv. Without
# root the tests skip and say why; this script then only installs nothing and reports.
#
# Idempotent: each package is checked first, apt-get update runs at most once and only
# when something is missing; a testbed left behind by a crashed run is removed first.
#
# Usage: scripts/ci-testbed.sh [--setup-only] [VENV]   (default VENV: .venv)
#   --setup-only   install the dependencies and stop (./test.sh then runs the tests
#                  with the rest of the suite)
set -euo pipefail
cd "$(dirname "$0")/.."

SETUP_ONLY=0
if [[ "${1:-}" == "--setup-only" ]]; then
    SETUP_ONLY=1
    shift
fi
VENV="${1:-.venv}"
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
    echo "ci-testbed: no python at $PY (create the venv first, e.g. by running ./test.sh)" >&2
    exit 2
fi
if [[ "$(id -u)" != 0 ]]; then
    echo "ci-testbed: not root: the testbed tests will skip (they need network namespaces)" >&2
    ((SETUP_ONLY)) && exit 0
    exec "$PY" -m pytest tests/testbed -ra
fi

APT_PKGS=(iproute2 iperf3 iputils-ping)
# iperf3's Debian package asks whether to start a daemon; the answer is no.
echo "iperf3 iperf3/start_daemon boolean false" | debconf-set-selections 2>/dev/null || true
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
apt_ensure ci-testbed "${APT_PKGS[@]}"

if ! "$PY" -c "import pyroute2" 2>/dev/null; then
    echo "ci-testbed: installing pyroute2 into $VENV"
    "$PY" -m pip install -q --disable-pip-version-check "pyroute2>=0.9.1"
fi

# A testbed left by a killed earlier job would make the tests' own setup fail.
"$PY" -m sova.cli_testbed down --prefix svt- >/dev/null
((SETUP_ONLY)) && exit 0
exec "$PY" -m pytest tests/testbed -ra
