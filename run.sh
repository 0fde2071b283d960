#!/usr/bin/env bash
# The main job on the embedded default world: simulate the flagship scenario
# (DSR-IOV Table 3) and print where its report is. Extra arguments go to `sova simulate`.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/_venv.sh
exec .venv/bin/sova simulate scenarios/dsr-iov-table3.yaml --out out/dsr-iov-table3 "$@"
