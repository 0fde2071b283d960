"""Failover strategies: what keeps a VM's network up while its fast NIC comes and goes.

* ``teaming`` (production): QEMU/libvirt net_failover — the VF is a transient partner of
  the virtio interface (same MAC) and the guest's failover driver switches by itself.
* ``guest-bond``: the guest's own active-backup bond with the virtio NIC as the backup
  slave (the DSR-IOV paper's mechanism, and what older guests use). The host drives it
  through the guest agent: before a fast NIC is unplugged the bond's active slave is moved
  to the backup and that is *confirmed*; after a plug the new NIC is enslaved and made
  active, also confirmed. A guest that cannot confirm keeps its fast NIC.
"""

from __future__ import annotations

from typing import Any, Protocol

from sova.driver.guest_agent import GuestAgent, GuestAgentError
from sova.driver.libvirt_xml import (
    SOVA_VF_ALIAS,
    DomainInfo,
    DomainNic,
    Readiness,
    failover_readiness,
)


class FailoverError(Exception):
    """The failover step could not be done or confirmed; the message says why."""


class Failover(Protocol):
    name: str

    def readiness(self, info: DomainInfo) -> Readiness: ...

    def backup(self, info: DomainInfo) -> DomainNic | None: ...

    def paired(self, fast: DomainNic, backup: DomainNic) -> bool: ...

    def before_unplug(self, dom: Any, fast: DomainNic, backup: DomainNic) -> str: ...

    def after_plug(self, dom: Any, fast: DomainNic, backup: DomainNic) -> str: ...


class Teaming:
    name = "teaming"

    def readiness(self, info: DomainInfo) -> Readiness:
        return failover_readiness(info)

    def backup(self, info: DomainInfo) -> DomainNic | None:
        return info.failover_backup()

    def paired(self, fast: DomainNic, backup: DomainNic) -> bool:
        return not fast.teaming_persistent or fast.teaming_persistent == backup.alias

    def before_unplug(self, dom: Any, fast: DomainNic, backup: DomainNic) -> str:
        return ""  # net_failover in the guest switches to the standby on unplug

    def after_plug(self, dom: Any, fast: DomainNic, backup: DomainNic) -> str:
        return ""


# Shell run in the guest through guest-exec. Netdevs are found by their *permanent* MAC:
# a bond slave's current address is the bond's. $S is /sys (a test points it elsewhere).
_FIND_DEV = (
    'S="${SOVA_SYSFS:-/sys}"; '
    'find_dev() { for d in "$S"/class/net/*; do [ -e "$d/device" ] || continue; '
    'm=$(cat "$d/bonding_slave/perm_hwaddr" 2>/dev/null || cat "$d/address"); '
    '[ "$m" = "$1" ] && { echo "${d##*/}"; return 0; }; done; return 1; }; '
)
_FIND_BOND = (
    'bk=$(find_dev "$2") || { echo "no netdev with the backup MAC $2" >&2; exit 3; }; '
    '[ -e "$S/class/net/$bk/master" ] || { echo "backup $bk is in no bond" >&2; exit 4; }; '
    'bond=$(basename "$(readlink "$S/class/net/$bk/master")"); '
    'active() { cat "$S/class/net/$bond/bonding/active_slave"; }; '
    'confirm() { i=0; while [ "$(active)" != "$1" ]; do i=$((i+1)); '
    '[ $i -gt 50 ] && { echo "active slave is $(active), not $1" >&2; exit 6; }; '
    "sleep 0.1; done; }; "
)

# A fast NIC that is in no bond carries none of the bond's traffic: nothing to move.
_FAST_UNUSED = (
    'if f=$(find_dev "$1") && [ ! -e "$S/class/net/$f/master" ]; then '
    'echo "fast NIC $f is in no bond: it carries nothing"; exit 0; fi; '
)

TO_BACKUP = (
    _FIND_DEV
    + _FAST_UNUSED
    + _FIND_BOND
    + (
        '[ "$(cat "$S/class/net/$bk/carrier" 2>/dev/null)" = 1 ] '
        '|| { echo "backup $bk has no carrier" >&2; exit 5; }; '
        'echo "$bk" > "$S/class/net/$bond/bonding/active_slave"; confirm "$bk"; '
        'if f=$(find_dev "$1") && [ -e "$S/class/net/$f/master" ]; then '
        'echo "-$f" > "$S/class/net/$bond/bonding/slaves"; fi; '
        'echo "$bond: active slave $bk"'
    )
)

# A hot-plugged NIC appears as ethN and udev renames it (ens5) moments later, so its name
# is looked up again by MAC for every step ("step CMD [tries]": CMD sees the current name
# as $f), never carried from one step to the next.
TO_FAST = (
    _FIND_DEV
    + _FIND_BOND
    + (
        'fm="$1"; '
        'step() { n=0; until f=$(find_dev "$fm") && eval "$1" 2>/dev/null; do n=$((n+1)); '
        '[ $n -gt "${2:-30}" ] && return 1; sleep 0.1; done; }; '
        'step true 100 || { echo "no netdev with MAC $fm after 10 s" >&2; exit 7; }; '
        'step \'[ -e "$S/class/net/$f/master" ] || ip link set "$f" master "$bond"\' '
        '|| { echo "NIC with MAC $fm ($f) could not join $bond" >&2; exit 8; }; '
        'step \'ip link set "$f" up\' || { echo "NIC $f could not be set up" >&2; exit 10; }; '
        'step \'[ "$(cat "$S/class/net/$f/carrier")" = 1 ]\' 50 '
        '|| { echo "$f has no carrier" >&2; exit 9; }; '
        'step \'echo "$f" > "$S/class/net/$bond/bonding/active_slave"\' '
        '|| { echo "$bond refused $f as active slave" >&2; exit 11; }; '
        'confirm "$f"; '
        'echo "$bond: active slave $f"'
    )
)


class GuestBond:
    name = "guest-bond"

    def __init__(self, agent: GuestAgent | None) -> None:
        self.agent = agent

    def backup(self, info: DomainInfo) -> DomainNic | None:
        for n in info.nics:
            if n.is_virtio and n.alias != SOVA_VF_ALIAS and n.mac:
                return n
        return None

    def readiness(self, info: DomainInfo) -> Readiness:
        if self.agent is None:
            return Readiness(False, "guest-bond failover needs the guest agent")
        if not info.guest_agent_channel:
            # Without the channel no bond can be driven or confirmed, so the fast NIC could
            # never be made active nor safely pulled (Nova: hw_qemu_guest_agent=yes).
            return Readiness(False, "no guest agent channel (org.qemu.guest_agent.0) in the domain")
        if self.backup(info) is None:
            return Readiness(False, "no virtio interface to act as the bond's backup slave")
        return Readiness(True)

    def paired(self, fast: DomainNic, backup: DomainNic) -> bool:
        return True

    def _run(self, dom: Any, script: str, fast: DomainNic, backup: DomainNic) -> str:
        if self.agent is None:
            raise FailoverError("no guest agent: the guest's bond cannot be driven")
        try:
            r = self.agent.exec(dom, "/bin/sh", ["-c", script, "sova-bond", fast.mac, backup.mac])
        except GuestAgentError as e:
            raise FailoverError(str(e)) from e
        return r.stdout.strip()

    def before_unplug(self, dom: Any, fast: DomainNic, backup: DomainNic) -> str:
        return self._run(dom, TO_BACKUP, fast, backup)

    def after_plug(self, dom: Any, fast: DomainNic, backup: DomainNic) -> str:
        return self._run(dom, TO_FAST, fast, backup)
