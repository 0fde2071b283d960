#!/usr/bin/env bash
# Everything `sova lab` needs on a Debian 12 machine, from a fresh clone, as root: the system
# packages (libvirt's daemon, QEMU, the image tools: scripts/ci-setup-lab.sh), this checkout
# installed into its own venv (.venv) with the extras the lab runs (agent: libvirt-python and
# pyroute2; manager and sim: the daemons and the report's simulator comparison; test: pytest
# for the lab tier), libvirt-python built against the system's libvirt
# (scripts/ci-setup-libvirt.sh), and the guest image (cached by its inputs' hash).
# Idempotent. Afterwards: .venv/bin/sova lab up (docs/lab.md).
#
# Usage: sudo scripts/lab-setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "$(id -u)" != 0 ]]; then
    echo "lab-setup: run as root (it installs system packages; the lab runs libvirt daemons)" >&2
    exit 2
fi
bash scripts/ci-setup-lab.sh
# libvirt-python builds against libvirt-dev, which ci-setup-libvirt.sh installs into the
# system first: the venv gets the agent extra only after that
SOVA_EXTRAS="manager,sim,test" source scripts/_venv.sh
bash scripts/ci-setup-libvirt.sh .venv
SOVA_EXTRAS="agent,manager,sim,test" source scripts/_venv.sh
bash scripts/lab-image.sh >/dev/null
echo "lab-setup: ready: .venv/bin/sova lab up"
