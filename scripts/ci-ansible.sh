#!/usr/bin/env bash
# The Ansible role in CI: ansible-lint, then the role applied for real to a throwaway root
# prefix (tests/ansible/throwaway.yml): an agent-only and a manager-only host, twice each;
# the second run must change nothing. Then the result is checked: units identical to
# deploy/, nothing of the other daemon on each host, secrets 0600 (the admin token in
# manager.env, not manager.toml), the CA on the agent, the agent's user in libvirt's group,
# the shipped constraints without the libvirt-python pin, configs that Sova itself accepts. Needs .venv-ansible (scripts/ci-setup-ops.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
A=.venv-ansible/bin
export PATH="$PWD/$A:$PATH" ANSIBLE_CONFIG="$PWD/deploy/ansible/ansible.cfg" ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

(cd deploy/ansible && "../../$A/ansible-lint" --offline -q site.yml upgrade.yml rollback.yml roles/sova \
  ../../tests/ansible/throwaway.yml ../../tests/ansible/split-hosts.yml)
echo "ansible-lint: clean"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/tls" "$work/wheel"
wheel="$(scripts/build-wheel.sh "$work/wheel")"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sova-manager.example \
  -keyout "$work/tls/manager.key" -out "$work/tls/manager.crt" 2>/dev/null

# An agent-only and a manager-only host (issue 24: the pip task restarted both daemons, so
# a split host failed), each applied twice: the second run must change nothing.
apply() {  # ROLE ROOT
  "$A/ansible-playbook" -i localhost, tests/ansible/throwaway.yml \
    -e "sova_ci_role=$1" -e "sova_root=$2" -e "sova_package=$wheel" \
    -e "sova_ci_tls_dir=$work/tls" -e "ansible_python_interpreter=$PWD/$A/python"
}
for role in agent manager; do
  root="$work/root-$role"
  mkdir -p "$root/etc"
  apply "$role" "$root" > "$work/$role-run1.log" || { cat "$work/$role-run1.log"; exit 1; }
  echo "$role run 1: $(grep -E "^localhost" "$work/$role-run1.log")"
  apply "$role" "$root" > "$work/$role-run2.log" || { cat "$work/$role-run2.log"; exit 1; }
  recap="$(grep -E "^localhost" "$work/$role-run2.log")"
  echo "$role run 2: $recap"
  if ! grep -q "changed=0 " <<<"$recap"; then
    echo "error: the second run on the $role host changed something:" >&2
    grep -B2 -E "^changed" "$work/$role-run2.log" >&2 || true
    exit 1
  fi
  test -e "$root/opt/sova/venv/share/man/man1/sova.1"
  # The constraints the role shipped: CI's pins without libvirt-python's.
  grep -q '^fastapi==' "$root/etc/sova/constraints.txt"
  if grep -q '^libvirt-python==' "$root/etc/sova/constraints.txt"; then
    echo "error: the shipped constraints pin libvirt-python (a compiler on every host)" >&2; exit 1
  fi
done

# What the role left behind on each host, and nothing of the other daemon.
a="$work/root-agent" m="$work/root-manager"
cmp deploy/sova-agent.service "$a/etc/systemd/system/sova-agent.service"
cmp deploy/sova-manager.service "$m/etc/systemd/system/sova-manager.service"
test ! -e "$a/etc/systemd/system/sova-manager.service" && test ! -e "$a/etc/sova/manager.toml"
test ! -e "$m/etc/systemd/system/sova-agent.service" && test ! -e "$m/etc/sova/agent.toml"
secret_mode() {
  local mode
  mode="$(stat -c %a "$1")"
  [ "$mode" = 600 ] || { echo "error: $1 has mode $mode" >&2; exit 1; }
}
secret_mode "$a/etc/sova/agent.token"
for s in tls/manager.key manager.env; do secret_mode "$m/etc/sova/$s"; done
# The host tokens, re-read on SIGHUP, are not a credential: root:sova-secrets 0640, the group
# the manager's unit joins (SupplementaryGroups=), created in the host's own /etc/group.
gid="$(awk -F: '$1 == "sova-secrets" {print $3}' "$m/etc/group")"
[ -n "$gid" ] || { echo "error: no group sova-secrets on the manager host" >&2; exit 1; }
[ "$(stat -c '%a %u %g' "$m/etc/sova/hosts.tokens")" = "640 0 $gid" ] \
  || { echo "error: hosts.tokens is $(stat -c '%a %u:%g' "$m/etc/sova/hosts.tokens"), not 640 0:$gid" >&2; exit 1; }
grep -q '^SOVA_MANAGER_ADMIN_TOKEN=ci-admin-token' "$m/etc/sova/manager.env"
if grep -q 'admin' "$m/etc/sova/manager.toml"; then
  echo "error: the admin token went into the world-readable manager.toml" >&2; exit 1
fi
cmp "$work/tls/manager.crt" "$a/etc/sova/tls/ca.pem"
grep -q '^sova-agent:' "$a/etc/passwd"
grep -Eq '^libvirt:[^:]*:[0-9]+:(.*,)?sova-agent(,|$)' "$a/etc/group"
"$a/opt/sova/venv/bin/python" - "$a" <<'PY'
import sys
from pathlib import Path
from sova.manager.daemons.config import load_agent_settings
root = Path(sys.argv[1])
a = load_agent_settings(root / "etc/sova/agent.toml", environ={})
assert a.host == "hv-ci" and a.controller.vf_policy == "sova", a
assert str(a.ca_file) == "/etc/sova/tls/ca.pem", a.ca_file
print("agent config accepted by Sova:", a.host, "ca_file", a.ca_file)
PY
"$m/opt/sova/venv/bin/python" - "$m" <<'PY'
import sys
from pathlib import Path
from sova.manager.daemons.config import load_manager_settings
root = Path(sys.argv[1])
env = dict(line.split("=", 1) for line in (root / "etc/sova/manager.env").read_text().split())
m = load_manager_settings(root / "etc/sova/manager.toml", environ=env)
assert m.port == 8700 and m.listen == "0.0.0.0", m
assert m.admin_token is not None, "the admin token from manager.env did not reach the settings"
# tests/ansible/throwaway.yml's placement and nested planner keys arrived (issue 38)
assert m.placement.host_groups == {"rack-a": ["hv-ci"]}, m.placement
assert [r.name for r in m.placement.rules] == ["trading-on-rack-a"], m.placement
assert m.planner.alpha == 0.7, m.planner
print("manager config accepted by Sova: port", m.port, "admin token set, placement rules kept")
PY
echo "ansible: agent-only and manager-only hosts applied twice each, second runs changed nothing"
