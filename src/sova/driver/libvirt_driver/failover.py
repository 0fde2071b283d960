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
# a bond slave's current address is the bond's.
_FIND_DEV = (
    'find_dev() { for d in /sys/class/net/*; do [ -e "$d/device" ] || continue; '
    'm=$(cat "$d/bonding_slave/perm_hwaddr" 2>/dev/null || cat "$d/address"); '
    '[ "$m" = "$1" ] && { echo "${d##*/}"; return 0; }; done; return 1; }; '
)
_FIND_BOND = (
    'bk=$(find_dev "$2") || { echo "no netdev with the backup MAC $2" >&2; exit 3; }; '
    '[ -e "/sys/class/net/$bk/master" ] || { echo "backup $bk is in no bond" >&2; exit 4; }; '
    'bond=$(basename "$(readlink "/sys/class/net/$bk/master")"); '
    'active() { cat "/sys/class/net/$bond/bonding/active_slave"; }; '
    'confirm() { i=0; while [ "$(active)" != "$1" ]; do i=$((i+1)); '
    '[ $i -gt 50 ] && { echo "active slave is $(active), not $1" >&2; exit 6; }; '
    "sleep 0.1; done; }; "
)

# A fast NIC that is in no bond carries none of the bond's traffic: nothing to move.
_FAST_UNUSED = (
    'if f=$(find_dev "$1") && [ ! -e "/sys/class/net/$f/master" ]; then '
    'echo "fast NIC $f is in no bond: it carries nothing"; exit 0; fi; '
)

TO_BACKUP = (
    _FIND_DEV
    + _FAST_UNUSED
    + _FIND_BOND
    + (
        '[ "$(cat "/sys/class/net/$bk/carrier" 2>/dev/null)" = 1 ] '
        '|| { echo "backup $bk has no carrier" >&2; exit 5; }; '
        'echo "$bk" > "/sys/class/net/$bond/bonding/active_slave"; confirm "$bk"; '
        'if f=$(find_dev "$1") && [ -e "/sys/class/net/$f/master" ]; then '
        'echo "-$f" > "/sys/class/net/$bond/bonding/slaves"; fi; '
        'echo "$bond: active slave $bk"'
    )
)

TO_FAST = (
    _FIND_DEV
    + _FIND_BOND
    + (
        'i=0; until f=$(find_dev "$1"); do i=$((i+1)); '
        '[ $i -gt 100 ] && { echo "no netdev with MAC $1 after 10 s" >&2; exit 7; }; sleep 0.1; done; '
        '[ -e "/sys/class/net/$f/master" ] || ip link set "$f" master "$bond" || exit 8; '
        'ip link set "$f" up; i=0; '
        'until [ "$(cat "/sys/class/net/$f/carrier" 2>/dev/null)" = 1 ]; do i=$((i+1)); '
        '[ $i -gt 50 ] && { echo "$f has no carrier" >&2; exit 9; }; sleep 0.1; done; '
        'echo "$f" > "/sys/class/net/$bond/bonding/active_slave"; confirm "$f"; '
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
