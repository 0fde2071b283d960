#!/usr/bin/env bash
# The mutation run over Sova's OpenStack code (issue 39): every mutant of the four actuator
# modules src/sova/orchestrator/openstack*.py against the in-memory cloud's tests, and every
# mutant of the Watcher strategy against the watcher tier, one module after the other.
#
#   scripts/mutation-openstack.sh [OUTDIR]       (default out/mutation; one log per module)
#   JOBS=2 TIMEOUT=90 NICE=5 MESSAGES=1 scripts/mutation-openstack.sh
#   MODULES="openstack_view" scripts/mutation-openstack.sh      (a subset; "watcher" for the strategy,
#                                                               "sova_loads" for its reads of Sova's manager)
#
# The configuration lives here and in scripts/mutation.py (mutmut's operators, one forked child
# per mutant; docs/openstack.md says why not mutmut itself): which modules, which tests, the
# per-mutant timeout (a mutant whose tests outlive it counts as killed). Each log lists the
# survivors and ends with the module's figures; the figures of each module are printed as it ends.
# Not part of ./test.sh: the whole run takes 20-40 min on a shared 2-core machine.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="${1:-out/mutation}"
jobs="${JOBS:-1}"
timeout="${TIMEOUT:-90}"
nice_level="${NICE:-5}"
# The wording of raised or logged messages is left alone unless MESSAGES=1 (no test should pin
# prose; scripts/mutation.py marks those mutants).
extra=()
[ "${MESSAGES:-0}" = 1 ] || extra=(--skip-messages)
modules="${MODULES:-openstack openstack_cloud openstack_ops openstack_view watcher sova_loads}"
mkdir -p "$out"
# No setuptools-entry-point pytest plugins in the children (hypothesis, schemathesis; none of
# these tests uses them): loading and assertion-rewriting them cost each mutant three times
# the tests' own CPU time (2.6 s against 0.75 s measured).
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1

status=0
for m in $modules; do
  log="$out/$m.log"
  if [ "$m" = watcher ]; then
    w="$(scripts/openstack-envs.sh path watcher)"
    if [ ! -x "$w/bin/python" ]; then
      echo "watcher: no watcher environment at $w (scripts/openstack-envs.sh build watcher)" | tee "$log"
      status=1
      continue
    fi
    SOVA_OPENSTACK_STACK=watcher PYTHONPATH=src nice -n "$nice_level" "$w/bin/python" \
      scripts/mutation.py sova.openstack.watcher_strategy --preload watcher.tests.unit \
      --jobs "$jobs" --timeout "$timeout" "${extra[@]}" \
      -- -m openstack --confcutdir=tests/openstack tests/openstack/tier_watcher \
      >"$log" 2>&1 || status=1
  elif [ "$m" = sova_loads ]; then
    # The strategy's reads of Sova's manager: parsed from the real manager's answers (main venv).
    nice -n "$nice_level" .venv/bin/python scripts/mutation.py sova.openstack.sova_loads \
      --preload sova.manager.daemons.service.app \
      --jobs "$jobs" --timeout "$timeout" "${extra[@]}" \
      -- tests/daemon/test_watcher_reads.py \
      >"$log" 2>&1 || status=1
  else
    # What the tests import besides the module, imported once in the parent (none of these
    # imports an openstack* module, which must come from the child's mutant).
    nice -n "$nice_level" .venv/bin/python scripts/mutation.py "sova.orchestrator.$m" \
      --preload sova.agent.executor --preload sova.manager.daemons.config \
      --preload sova.orchestrator.libvirt --preload sova.orchestrator.settings \
      --jobs "$jobs" --timeout "$timeout" "${extra[@]}" \
      -- tests/openstack/test_seam.py tests/openstack/test_seam_edges.py tests/openstack/test_cloudview.py \
      >"$log" 2>&1 || status=1
  fi
  echo "== $m"
  grep -E 'killed \(|^[0-9]+ s$|^the tests|not importable' "$log" || tail -3 "$log"
done
exit "$status"
