#!/usr/bin/env bash
# Build the sova-sriov wheel into DIR from a clean copy of this checkout, so nothing left
# in an earlier in-tree build/ (e.g. a module since deleted) can end up in the wheel.
#   scripts/build-wheel.sh DIR [PYTHON]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "$1")"
py="${2:-$root/.venv/bin/python}"
src="$(mktemp -d)"
trap 'rm -rf "$src"' EXIT
tar -C "$root" --exclude=./.git --exclude='./.venv*' --exclude=./build --exclude=./dist \
  --exclude=./out --exclude='*.egg-info' --exclude=__pycache__ --exclude=.mypy_cache \
  --exclude=.pytest_cache --exclude=.ruff_cache --exclude=.hypothesis \
  --exclude=./rust/target --exclude='./src/sova/policy/_core*.so' -cf - . | tar -C "$src" -xf -
mkdir -p "$out"
# The compiled core's crates compiled once in the checkout's cargo tree serve the copy too.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/rust/target}"
PYO3_PYTHON="${PYO3_PYTHON:-$("$py" -c 'import sys; print(sys._base_executable)')}"
export PYO3_PYTHON  # as scripts/_venv.sh names it, so pyo3 is not compiled again
# The copy has no .git: it builds as the version of this checkout (setuptools-scm).
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV="$(cd "$root" && "$py" -m setuptools_scm)"
export SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$out" "$src" >/dev/null
ls "$out"/sova_sriov-*.whl
