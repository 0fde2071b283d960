#!/usr/bin/env bash
# Debian's OVN for the OpenStack tier's ML2/OVN tests (tests/openstack/tier_neutron/
# test_os_neutron_ovn.py): ovsdb-server and ovsdb-tool (openvswitch-common), the OVN_Northbound
# and OVN_Southbound schemas and ovn-northd (ovn-central), ovn-sbctl (ovn-common). The tests
# start their own servers on unix sockets in a temporary directory, and skip, saying why,
# where these are missing.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_apt.sh"
fresh=0
dpkg-query -W -f='${Status}' ovn-central 2>/dev/null | grep -q "install ok installed" || fresh=1
apt_ensure ci-setup-openstack ovn-central ovn-common openvswitch-common
# Installing ovn-central enables the machine's own OVN databases and northd; the tests need
# none of them, so a fresh install leaves them off.
if ((fresh)) && [[ -d /run/systemd/system ]]; then
  systemctl disable --now ovn-central >/dev/null 2>&1 || true
fi
