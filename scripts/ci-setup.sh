#!/usr/bin/env bash
# System packages some tests need, installed by CI (root) before ./test.sh. Each step is
# idempotent and skips when its packages are present; on a developer machine without
# them the corresponding tests skip and say why.
set -euo pipefail
cd "$(dirname "$0")/.."
SOVA_EXTRAS=test source scripts/_venv.sh
bash scripts/ci-setup-libvirt.sh .venv
bash scripts/ci-testbed.sh --setup-only .venv
bash scripts/ci-setup-browser.sh   # the web console browser tests (issue 38)
