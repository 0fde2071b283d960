#!/usr/bin/env bash
# The OpenStack test tier: one virtual environment per stack (nova, neutron, watcher, keystone), built
# from PyPI with the pins in ci/openstack/ and cached under a hash of those pins, so that a
# second run costs seconds. The stacks want different oslo/SQLAlchemy versions, hence one
# environment each.
#
#   scripts/openstack-envs.sh build [stack...]   build (or reuse) the environments
#   scripts/openstack-envs.sh test  [stack...]   build, then run tests/openstack/tier_<stack> in each
#   scripts/openstack-envs.sh path  stack        print the environment's directory
#   scripts/openstack-envs.sh freeze stack       write ci/openstack/<stack>-constraints.txt
#
# Environments live in $SOVA_OPENSTACK_ENVS (default ~/.cache/sova-openstack). A stack whose
# environment cannot be built (no PyPI, no compiler) is reported and its tests are skipped with
# the reason; the tier fails only when a test fails.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${SOVA_OPENSTACK_ENVS:-$HOME/.cache/sova-openstack}"
py="${PYTHON:-python3}"
all_stacks=(nova neutron watcher keystone)

pins_hash() {
  local stack=$1
  {
    "$py" -c 'import sys; print(sys.version_info[:2])'
    cat "$root/ci/openstack/$stack.txt"
    [ ! -f "$root/ci/openstack/$stack-constraints.txt" ] || cat "$root/ci/openstack/$stack-constraints.txt"
  } | sha256sum | cut -c1-12
}

env_dir() { echo "$cache/$1-$(pins_hash "$1")"; }

build() {
  local stack=$1 dir
  dir="$(env_dir "$stack")"
  if [ -f "$dir/.sova-ok" ]; then
    install_sova "$stack" "$dir"
    return 0
  fi
  rm -rf "$dir"
  mkdir -p "$cache"
  echo "building the $stack environment in $dir (minutes, once per pin change) ..." >&2
  local t0=$SECONDS cons=()
  [ ! -f "$root/ci/openstack/$stack-constraints.txt" ] || cons=(-c "$root/ci/openstack/$stack-constraints.txt")
  if ! { "$py" -m venv "$dir" &&
         "$dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip &&
         "$dir/bin/python" -m pip install -q --disable-pip-version-check \
           -r "$root/ci/openstack/$stack.txt" "${cons[@]}"; } >"$cache/$stack.log" 2>&1; then
    echo "error: building the $stack environment failed; see $cache/$stack.log" >&2
    rm -rf "$dir"
    return 1
  fi
  if [ "$stack" = nova ]; then
    # Nova's harness looks for api-paste.ini at <site-packages>/etc/nova, while pip puts the
    # package's data files under <venv>/etc/nova.
    local site
    site="$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    ln -sfn "$dir/etc" "$site/etc"
  fi
  touch "$dir/.sova-ok"
  echo "built the $stack environment in $((SECONDS - t0)) s" >&2
  # Environments of older pins are dead weight (hundreds of MB each).
  local old
  for old in "$cache/$stack"-*; do
    [ "$old" = "$dir" ] || [ ! -d "$old" ] || rm -rf "$old"
  done
  install_sova "$stack" "$dir"
}

# Sova's distribution metadata (the entry points Watcher's loader reads) goes in without its
# dependencies, re-done when pyproject.toml changes. The *code* never comes from this install:
# an environment is shared by every checkout on the machine, so an install would be the code
# of whichever checkout built it. Each run puts its own checkout's src/ first on PYTHONPATH
# instead (see `test`), and every tier checks that sova is imported from it.
install_sova() {
  local stack=$1 dir=$2 want
  want="$(sha256sum "$root/pyproject.toml" | cut -c1-64)"
  if [ "$(cat "$dir/.sova-installed" 2>/dev/null)" != "$want" ]; then
    "$dir/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$root" \
      >>"$cache/$stack.log" 2>&1 || { echo "error: installing sova into $dir failed; see $cache/$stack.log" >&2; return 1; }
    echo "$want" >"$dir/.sova-installed"
  fi
}

cmd="${1:-test}"
shift || true
stacks=("$@")
[ ${#stacks[@]} -gt 0 ] || stacks=("${all_stacks[@]}")
for s in "${stacks[@]}"; do
  [ -f "$root/ci/openstack/$s.txt" ] || { echo "error: unknown stack '$s' (known: ${all_stacks[*]})" >&2; exit 2; }
done

case "$cmd" in
  path) env_dir "${stacks[0]}" ;;
  build)
    rc=0
    for s in "${stacks[@]}"; do build "$s" || rc=1; done
    exit $rc ;;
  freeze)
    for s in "${stacks[@]}"; do
      dir="$(env_dir "$s")"
      [ -f "$dir/.sova-ok" ] || { echo "error: no $s environment; run build first" >&2; exit 1; }
      { echo "# pip freeze of the $s environment built from $s.txt (scripts/openstack-envs.sh freeze $s)"
        "$dir/bin/python" -m pip freeze --exclude-editable --disable-pip-version-check; } \
        >"$root/ci/openstack/$s-constraints.txt"
    done ;;
  test)
    rc=0
    for s in "${stacks[@]}"; do
      t0=$SECONDS
      if ! build "$s"; then
        echo "SKIPPED tests/openstack/tier_$s: its environment could not be built (see $cache/$s.log)" >&2
        continue
      fi
      dir="$(env_dir "$s")"
      # Nova's joined test runs Neutron's API server in the neutron environment (the two pin
      # different oslo/SQLAlchemy versions), as a second process talking HTTP.
      neutron_py=""
      if [ "$s" = nova ] && build neutron; then neutron_py="$(env_dir neutron)/bin/python"; fi
      # ... and Keystone's, in the keystone environment, for Nova's and Neutron's APIs behind
      # keystonemiddleware.
      keystone_py=""
      if { [ "$s" = nova ] || [ "$s" = neutron ]; } && build keystone; then
        keystone_py="$(env_dir keystone)/bin/python"
      fi
      # ... and Watcher's applier and decision engine, in the watcher environment, against
      # Nova's API served on a loopback socket.
      watcher_py=""
      if [ "$s" = nova ] && build watcher; then watcher_py="$(env_dir watcher)/bin/python"; fi
      # --confcutdir keeps the main suite's conftest (and its dependencies) out of these venvs.
      (cd "$root" && SOVA_OPENSTACK_STACK="$s" SOVA_CHECKOUT="$root" SOVA_NEUTRON_PYTHON="$neutron_py" \
        SOVA_KEYSTONE_PYTHON="$keystone_py" SOVA_WATCHER_PYTHON="$watcher_py" \
        PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" "$dir/bin/python" -m pytest -q -p no:cacheprovider \
        --confcutdir=tests/openstack -m openstack "tests/openstack/tier_$s") || rc=1
      echo "openstack tier, $s: $((SECONDS - t0)) s" >&2
    done
    exit $rc ;;
  *) echo "error: unknown command '$cmd' (build, test, path, freeze)" >&2; exit 2 ;;
esac
