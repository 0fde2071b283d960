#!/usr/bin/env bash
# The Ansible role in CI: ansible-lint, then the role applied for real to a throwaway root
# prefix (tests/ansible/throwaway.yml) twice; the second run must change nothing. Then the
# result is checked: units identical to deploy/, secrets 0600, the agent's user in libvirt's
# group, configs that Sova itself accepts. Needs .venv-ansible (scripts/ci-setup-ops.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
A=.venv-ansible/bin
export PATH="$PWD/$A:$PATH" ANSIBLE_CONFIG="$PWD/deploy/ansible/ansible.cfg" ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0

(cd deploy/ansible && "../../$A/ansible-lint" --offline -q site.yml roles/sova ../../tests/ansible/throwaway.yml)
echo "ansible-lint: clean"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/etc" "$work/tls" "$work/wheel"
wheel="$(scripts/build-wheel.sh "$work/wheel")"
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=sova-manager.example \
  -keyout "$work/tls/manager.key" -out "$work/tls/manager.crt" 2>/dev/null

apply() {
  "$A/ansible-playbook" -i localhost, tests/ansible/throwaway.yml \
    -e "sova_root=$root" -e "sova_package=$wheel" -e "sova_ci_tls_dir=$work/tls" \
    -e "sova_pip_extra_args='-c $PWD/constraints.txt'" \
    -e "ansible_python_interpreter=$PWD/$A/python"
}
apply > "$work/run1.log" || { cat "$work/run1.log"; exit 1; }
grep -E "^localhost" "$work/run1.log"
apply > "$work/run2.log" || { cat "$work/run2.log"; exit 1; }
recap="$(grep -E "^localhost" "$work/run2.log")"
echo "$recap"
if ! grep -q "changed=0 " <<<"$recap"; then
  echo "error: the second run changed something:" >&2
  grep -B2 -E "^changed" "$work/run2.log" >&2 || true
  exit 1
fi

# What the role left behind.
for unit in sova-agent.service sova-manager.service; do
  cmp "deploy/$unit" "$root/etc/systemd/system/$unit"
done
for secret in agent.token hosts.tokens tls/manager.key; do
  mode="$(stat -c %a "$root/etc/sova/$secret")"
  [ "$mode" = 600 ] || { echo "error: /etc/sova/$secret has mode $mode" >&2; exit 1; }
done
grep -q '^sova-agent:' "$root/etc/passwd"
grep -Eq '^libvirt:[^:]*:[0-9]+:(.*,)?sova-agent(,|$)' "$root/etc/group"
"$root/opt/sova/venv/bin/python" - "$root" <<'PY'
import sys
from pathlib import Path
from sova.daemon.config import load_agent_settings, load_manager_settings
root = Path(sys.argv[1])
a = load_agent_settings(root / "etc/sova/agent.toml", environ={})
m = load_manager_settings(root / "etc/sova/manager.toml", environ={})
assert a.host == "hv-ci" and a.controller.vf_policy == "sova", a
assert m.port == 8700, m
print("configs accepted by Sova: agent", a.host, "manager port", m.port)
PY
test -e "$root/opt/sova/venv/share/man/man1/sova.1"
echo "ansible: applied twice, second run changed nothing"
