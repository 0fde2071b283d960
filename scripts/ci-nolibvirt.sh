#!/usr/bin/env bash
# The README's test command as a laptop without libvirt's development files runs it (issue
# 24): a fresh clone of HEAD where pkg-config cannot find libvirt, so ./test.sh installs no
# libvirt-python; ruff, mypy and the layers must pass and every libvirt test must skip,
# saying why. Arguments go to ./test.sh (pytest). .ci/run runs the main tier here and then
# only tests/libvirt_driver in the repository's own venv, which has libvirt-python.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d "${TMPDIR:-/tmp}/sova-nolibvirt.XXXXXX")"
trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$PWD" "$work/sova"
git -C "$work/sova" checkout -q --detach "$(git rev-parse HEAD)"
# The clone compiles the policy core with the crates this checkout's cargo tree already
# built (only the repository's own two crates compile again).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/rust/target}"
empty="$work/no-pkgconfig"
mkdir -p "$empty"
cd "$work/sova"
# Hide libvirt.pc (and every other .pc): test.sh decides on `pkg-config --exists libvirt`.
export PKG_CONFIG_LIBDIR="$empty" PKG_CONFIG_PATH=""
if pkg-config --exists libvirt 2>/dev/null; then
  echo "error: libvirt.pc is still visible; the check would prove nothing" >&2
  exit 1
fi
SOVA_EXTRAS=test source scripts/_venv.sh
if .venv/bin/python -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("libvirt") is None)'; then
  echo "error: libvirt-python is importable in the fresh venv; the check would prove nothing" >&2
  exit 1
fi
./test.sh -p no:cacheprovider "$@" | tee "$work/pytest.log"
# The libvirt tests skipped and said why (the README's promise), not silently passed.
grep -q "SKIPPED .*tests/libvirt_driver/.*libvirt-python not installed" "$work/pytest.log" || {
  echo "error: no libvirt test reported its skip reason" >&2
  exit 1
}
echo "ci-nolibvirt: ./test.sh passed without libvirt's development files"
