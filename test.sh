#!/usr/bin/env bash
# Install what the tests need into .venv and run the whole suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
# libvirt-python builds against the system's libvirt; where it is absent the libvirt
# tests skip and say so.
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libvirt; then
  SOVA_EXTRAS=test,libvirt
else
  SOVA_EXTRAS=test
fi
source scripts/_venv.sh
.venv/bin/ruff check src tests
.venv/bin/mypy
.venv/bin/lint-imports  # the layers: [tool.importlinter] in pyproject.toml
.venv/bin/vulture  # dead code: [tool.vulture] in pyproject.toml, ci/vulture_whitelist.py
exec .venv/bin/python -m pytest "$@"
