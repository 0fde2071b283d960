#!/usr/bin/env bash
# The role's upgrade and rollback, exercised for real on the split-host inventory
# (tests/ansible/split-hosts.yml: a manager-only host and two agent-only hosts, each a
# throwaway root; systemd stood in for by tests/ansible/fake-systemd/systemctl, which runs
# the units' ExecStart and waits for READY=1):
#   1. the previous release (SOVA_OLD_RELEASE_REF, default 4b98a3b: store schema 0004, no
#      compiled core; built here from the commit) installed with site.yml; both agents report;
#      a fence set with that release's CLI;
#   2. upgrade.yml to this checkout's wheel: the pre-upgrade backup exists and holds the old
#      schema, the manager was restarted (and ready) before the first agent, each agent batch
#      was ready before the next, every daemon runs the new version, the store is migrated to
#      this release's head, and a second fence is set with the new CLI;
#   3. rollback.yml to the previous release on that backup: every daemon runs the old version
#      again, the store is back at the old schema with the first fence and without the second,
#      and both agents report to the restored manager.
# Called by scripts/ci-ops.sh (step "upgrade"); needs .venv-ansible (scripts/ci-setup-ops.sh),
# openssl, systemd-sysusers and the package index (pip installs each release's dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
A=.venv-ansible/bin
export ANSIBLE_CONFIG="$repo/deploy/ansible/ansible.cfg" ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0
old_ref="${SOVA_OLD_RELEASE_REF:-4b98a3b}"
if ! git rev-parse --verify --quiet "$old_ref^{commit}" >/dev/null; then
  echo "upgrade: skipped: the previous release $old_ref is not in this clone (fetch the full history)" >&2
  exit 0
fi
hosts=(mgr-ci hv-ci-1 hv-ci-2)
work="$(mktemp -d)"
cleanup() {
  for h in "${hosts[@]}"; do
    for u in sova-agent.service sova-manager.service; do
      SOVA_FAKE_SYSTEMD_ROOT="$work/$h/root" tests/ansible/fake-systemd/systemctl stop "$u" || true
    done
  done
  if [ -n "${SOVA_KEEP_UPGRADE_WORK:-}" ]; then echo "upgrade: work kept in $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT
t0=$SECONDS

# The two releases' wheels: this checkout's (scripts/build-wheel.sh) and the old commit's,
# exported with git archive and built as the version setuptools-scm gives that commit.
mkdir -p "$work/new" "$work/old" "$work/old-src" "$work/tls"
new_wheel="$(scripts/build-wheel.sh "$work/new")"
git archive "$old_ref" | tar -C "$work/old-src" -xf -
old_version="0.1.dev$(git rev-list --count "$old_ref")+g$(git rev-parse --short=9 "$old_ref")"
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_SOVA_SRIOV="$old_version" \
  .venv/bin/python -m pip wheel -q --disable-pip-version-check --no-deps -w "$work/old" "$work/old-src" >/dev/null
old_wheel="$(ls "$work"/old/sova_sriov-*.whl)"
new_version="$(basename "$new_wheel" | cut -d- -f2)"
echo "upgrade: releases built in $((SECONDS - t0)) s: old $old_version ($old_ref), new $new_version" >&2

openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=localhost \
  -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
  -keyout "$work/tls/manager.key" -out "$work/tls/manager.crt" 2>/dev/null
# each host's interpreter: this host's root for the stand-in systemctl, which comes first
for h in "${hosts[@]}"; do
  mkdir -p "$work/$h/root/etc"
  printf '#!/bin/sh\nexport SOVA_FAKE_SYSTEMD_ROOT=%s PATH=%s:"$PATH"\nexec %s "$@"\n' \
    "$work/$h/root" "$repo/tests/ansible/fake-systemd" "$repo/$A/python" > "$work/$h/python"
  chmod +x "$work/$h/python"
done
port_base="$(.venv/bin/python -c '
import socket
for base in range(20000, 60000, 7):
    try:
        socks = [socket.create_server(("127.0.0.1", base + i)) for i in range(3)]
    except OSError:
        continue
    for s in socks:
        s.close()
    print(base)
    break')"

play() {  # LOG PLAYBOOK ARGS...
  local log="$work/$1.log"; shift
  local t=$SECONDS
  since="$(date +%s.%N)"
  if ! "$A/ansible-playbook" -i tests/ansible/split-hosts.yml "deploy/ansible/$1" \
      -e "sova_ci_work=$work" -e "sova_ci_port_base=$port_base" "${@:2}" > "$log" 2>&1; then
    cat "$log"
    for h in "${hosts[@]}"; do tail -n 30 "$work/$h"/root/var/log/*.log 2>/dev/null || true; done
    exit 1
  fi
  echo "upgrade: $1 in $((SECONDS - t)) s: $(grep -E '^(mgr|hv)-ci' "$log" | tr -s ' ' | paste -sd';')" >&2
}
check() {  # PHASE: what the cluster looks like (tests/ansible/upgrade_check.py)
  SSL_CERT_FILE="$work/tls/manager.crt" .venv/bin/python tests/ansible/upgrade_check.py "$@" \
    --work "$work" --port "$port_base" --since "$since"
}
mgr="$work/mgr-ci/root"
sova_cli() {  # the manager host's installed CLI, as an operator there would run it
  SSL_CERT_FILE="$work/tls/manager.crt" "$mgr/opt/sova/venv/bin/sova" "$@" \
    --manager-url "https://127.0.0.1:$port_base" --token-file "$mgr/etc/sova/manager.env"
}

# 1. the previous release
play install-old site.yml -e "sova_package=$old_wheel"
check installed --version "$old_version"
sova_cli fence set maintenance hv-ci-2 -m before-upgrade >/dev/null

# 2. the upgrade
play upgrade upgrade.yml -e "sova_package=$new_wheel" -e sova_agent_batch=1
backup="$(sed -n 's/.*pre-upgrade backup of Sova [^:]*: \(.*\.db\)".*/\1/p' "$work/upgrade.log" | head -1)"
[ -f "$backup" ] || { echo "error: upgrade.yml named no backup file ($backup)" >&2; exit 1; }
check upgraded --version "$new_version" --old-version "$old_version" --backup "$backup" \
  --log "$work/upgrade.log"
sova_cli fence set maintenance hv-ci-1 -m after-upgrade >/dev/null

# 3. the rollback
play rollback rollback.yml -e "sova_package=$old_wheel" -e "sova_rollback_backup=$backup" \
  -e sova_agent_batch=1
check rolled-back --version "$old_version" --log "$work/rollback.log"
echo "upgrade: install, upgrade and rollback on the split hosts passed in $((SECONDS - t0)) s" >&2
