#!/usr/bin/env bash
# Build the sova-sriov wheel into DIR from a clean copy of this checkout, so nothing left
# in an earlier in-tree build/ (e.g. a module since deleted) can end up in the wheel.
#   scripts/build-wheel.sh DIR [PYTHON]
# PYTHON (default .venv/bin/python, the venv ./run.sh and ./test.sh make) needs only pip:
# the build runs in pip's isolated build environment (setuptools, setuptools-scm,
# setuptools-rust and wheel from PyPI, or $PIP_FIND_LINKS offline; the compiled core with
# the machine's cargo, rust/Cargo.toml's release profile, stripped), and the version is read by
# setuptools-scm from a build-only venv (.venv-build, made on first use) when PYTHON lacks it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:?usage: scripts/build-wheel.sh DIR [PYTHON]}")"
py="${2:-$root/.venv/bin/python}"
if [ ! -x "$py" ]; then
  echo "build-wheel: no $py; make the venv first (./run.sh --help, or SOVA_EXTRAS=test bash -c 'source scripts/_venv.sh')" >&2
  exit 2
fi
scm="$py"
if ! "$py" -c 'import setuptools_scm' 2>/dev/null; then
  # ./run.sh's venv has the runtime extras only: setuptools-scm goes into a venv of its own
  # (pinned by constraints.txt), never into the runtime's.
  benv="$root/.venv-build"
  if ! "$benv/bin/python" -c 'import setuptools_scm' 2>/dev/null; then
    "$py" -m venv --clear "$benv" >&2 2>/dev/null || python3 -m venv --clear "$benv" >&2
    "$benv/bin/python" -m pip install -q --disable-pip-version-check \
      -c "$root/constraints.txt" setuptools-scm >&2
  fi
  scm="$benv/bin/python"
fi
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
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV="$(cd "$root" && "$scm" -m setuptools_scm)"
export SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV
"$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$out" "$src" >/dev/null
ls "$out"/sova_sriov-*.whl
