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
# The compiled core (rust/, docs/design.md#compiled-core): formatted, no clippy warnings,
# its unit tests (the bindings crate has none of its own: tests/ exercise it from Python).
for tool in fmt clippy; do
  if ! cargo "$tool" --version >/dev/null 2>&1; then
    echo "error: cargo $tool not found; install it with: rustup component add ${tool/fmt/rustfmt}" >&2
    exit 1
  fi
done
(cd rust && cargo fmt --check && cargo clippy -q --locked --all-targets -- -D warnings \
  && cargo test -q --locked -p sova-core)
.venv/bin/ruff check src tests
.venv/bin/mypy
.venv/bin/lint-imports  # the layers: [tool.importlinter] in pyproject.toml
.venv/bin/vulture  # dead code: [tool.vulture] in pyproject.toml, ci/vulture_whitelist.py
exec .venv/bin/python -m pytest "$@"
