#!/usr/bin/env bash
# Installs what the libvirt driver's tests need on a fresh Debian 12 machine.
#
# Why a script and not pyproject alone: libvirt-python has no wheels on PyPI, it builds
# against the system's libvirt headers (libvirt-dev + pkg-config + gcc), and the XML
# validation tests need virt-xml-validate from libvirt-clients (which calls xmllint from
# libxml2-utils, a dependency Debian does not declare). libvirt's test driver
# (test:///...) lives in libvirt0 itself, so no daemon is required.
#
# Idempotent: every step checks first, apt-get update runs at most once per call and only
# when something is missing.
#
# Usage: scripts/ci-setup-libvirt.sh [VENV]   (default: .venv)
set -euo pipefail

VENV="${1:-.venv}"
PY="$VENV/bin/python"
if [[ ! -x "$PY" ]]; then
    echo "ci-setup-libvirt: no python at $PY (pass the venv as \$1)" >&2
    exit 2
fi

APT_PKGS=(libvirt-dev libvirt-clients libxml2-utils pkg-config gcc python3-dev iproute2)
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
apt_ensure ci-setup-libvirt "${APT_PKGS[@]}"

# python3-dev provides headers for the *system* python; the venv may be another build,
# so let pip find out: it fails loudly here rather than in the tests.
if "$PY" -c "import libvirt, pyroute2" 2>/dev/null; then
    echo "ci-setup-libvirt: libvirt-python and pyroute2 present in $VENV"
else
    "$PY" -m pip install --quiet "libvirt-python>=9.0" "pyroute2>=0.7"
fi
"$PY" -c "import libvirt, pyroute2; print('ci-setup-libvirt: libvirt', libvirt.getVersion(), 'pyroute2', pyroute2.__version__)"
