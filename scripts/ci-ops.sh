#!/usr/bin/env bash
# Operations checks (issue 14), called by .ci/run after the test suite; prints each check's
# wall time. Tools: scripts/ci-setup-ops.sh (systemd-analyze, promtool, ansible venv).
#   units      systemd-analyze security <= 2.5 for both units, docs show the shipped unit,
#              sova(1) current (tests/test_deploy.py)
#   daemons    Type=notify readiness, watchdog, journald/JSON logs (tests/test_systemd.py)
#   prometheus promtool check metrics on live scrapes of both daemons, check/test rules,
#              scrape config (tests/test_observability.py); runbooks and the Alertmanager
#              inhibition (amtool) in tests/test_deploy.py
#   ansible    ansible-lint; the role applied to an agent-only and a manager-only throwaway
#              root, twice each (scripts/ci-ansible.sh)
#   upgrade    the role's upgrade.yml and rollback.yml on split throwaway hosts whose daemons
#              run: the previous release (built from its commit) installed, upgraded to this
#              checkout and rolled back (scripts/ci-ansible-upgrade.sh; 810 s measured on a
#              2-core machine at load 20: wheels 199 s (34 s with pip's cache), install 333 s,
#              upgrade 151 s, rollback 119 s, most of it pip installing on three hosts)
#   wheelhouse every extra's pinned dependencies as wheels (from the package index, kept
#              between runs), so the packaging tier installs offline
#   packaging  wheel -> fresh venv per extra, offline from the wheelhouse; each extra's size
#              against docs/extras-sizes.json (written to out/extras-sizes.json; the doc's
#              table comes from scripts/extras-table.py); the sdist's contents
#              (tests/packaging, -m packaging)
set -euo pipefail
cd "$(dirname "$0")/.."
SOVA_EXTRAS="${SOVA_EXTRAS:-test}"
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists libvirt; then
  SOVA_EXTRAS=test,libvirt
fi
source scripts/_venv.sh
scripts/ci-setup-ops.sh

declare -a summary=()
step() {
  local name="$1"; shift
  local t0=$SECONDS
  echo "== $name" >&2
  "$@"
  summary+=("$(printf '%-10s %4ds' "$name" $((SECONDS - t0)))")
}
step units .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_deploy.py tests/test_shipped.py
step daemons .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_systemd.py
step prometheus .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_observability.py
step ansible scripts/ci-ansible.sh
step upgrade scripts/ci-ansible-upgrade.sh
# The packaging tier's wheelhouse: what pip would fetch for each extra, fetched here (pip's
# own client, pinned by constraints.txt) so the tier's tests run with --no-index.
SOVA_WHEELHOUSE="${SOVA_WHEELHOUSE:-${XDG_CACHE_HOME:-$HOME/.cache}/sova-wheelhouse}"
SOVA_SIZES_OUT="${SOVA_SIZES_OUT:-$PWD/out/extras-sizes.json}"
export SOVA_WHEELHOUSE SOVA_SIZES_OUT
wheelhouse() {
  local extras=cli,manager,sim,testbed
  if [[ "$SOVA_EXTRAS" == *libvirt* ]]; then extras=agent,$extras; fi
  mkdir -p "$SOVA_WHEELHOUSE"
  .venv/bin/python -m pip wheel -q --disable-pip-version-check -c constraints.txt \
    --find-links "$SOVA_WHEELHOUSE" -w "$SOVA_WHEELHOUSE" \
    ".[$extras]" httpx prometheus-client pyroute2 \
    build "setuptools>=77" "setuptools-scm>=8,<11" "setuptools-rust>=1.11,<2" wheel
  rm -f "$SOVA_WHEELHOUSE"/sova_sriov-*.whl  # the tier builds its own from this checkout
}
step wheelhouse wheelhouse
step packaging .venv/bin/python -m pytest -q -p no:cacheprovider -m packaging tests/packaging
printf 'ops checks passed:\n' >&2
printf '  %s\n' "${summary[@]}" >&2
