#!/usr/bin/env bash
# Tools the operations checks (scripts/ci-ops.sh) need, installed where absent (CI is root):
# systemd-analyze (Debian: systemd), promtool and prometheus (Debian: prometheus; the main
# tier's tests/test_capture_prometheus.py backfills a TSDB and serves it), and ansible-core +
# ansible-lint from PyPI in their own venv (.venv-ansible; versions in
# deploy/ansible/requirements.txt) so they do not mix with Sova's dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
{ command -v promtool && command -v prometheus; } >/dev/null 2>&1 || need+=(prometheus)
command -v amtool >/dev/null 2>&1 || need+=(prometheus-alertmanager)   # amtool check-config
command -v openssl >/dev/null 2>&1 || need+=(openssl)   # a throwaway TLS pair for the Ansible check
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${need[*]} ..." >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
    # The packages start servers on :9090 and :9093; CI needs only the binaries (the
    # capture test starts its own prometheus on a free loopback port).
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      systemctl disable --now prometheus prometheus-alertmanager >/dev/null 2>&1 || true
    fi
  else
    echo "warning: ${need[*]} missing and not root/apt: those checks will skip" >&2
  fi
fi
venv=.venv-ansible
req=deploy/ansible/requirements.txt
stamp="$venv/.installed"
if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
  echo "installing ansible-core and ansible-lint into $venv ..." >&2
  "${PYTHON:-python3}" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
fi
