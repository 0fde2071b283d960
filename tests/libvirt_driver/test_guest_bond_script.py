"""The guest-bond scripts (run in a guest through guest-exec), run here by /bin/sh against a
stand-in /sys and ``ip``: what the guest's kernel and udev do is scripted, the shell is real.

Found in the hypervisor lab on QEMU 10: a hot-plugged NIC appears as ``eth0`` and udev
renames it ``ens5`` a moment later; a script that found it by MAC once and then used that
name failed with ``Cannot find device "eth0"`` (4 plugs in 3 runs). Needs only /bin/sh.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sova.driver.libvirt_driver.failover import TO_BACKUP, TO_FAST

pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs /bin/sh")

FAST, BACKUP = "52:54:00:aa:00:10", "52:54:00:aa:00:20"

# `ip link set DEV master BOND | up` on the stand-in /sys. The first call plays udev: the
# new NIC is renamed (eth0 -> ens5) just after the script looked it up.
FAKE_IP = r"""#!/bin/sh
S="$SOVA_SYSFS"
if [ -f "$S/.rename" ]; then
    set -- "$@"; read -r old new < "$S/.rename"; rm "$S/.rename"
    mv "$S/class/net/$old" "$S/class/net/$new"
fi
dev="$3"
[ -d "$S/class/net/$dev" ] || { echo "Cannot find device \"$dev\"" >&2; exit 1; }
case "$4" in
    master) ln -s "../$5" "$S/class/net/$dev/master" ;;
    up) echo 1 > "$S/class/net/$dev/carrier" ;;
esac
"""


def _nic(sysfs: Path, name: str, mac: str, carrier: int) -> Path:
    d = sysfs / "class" / "net" / name
    (d / "device").mkdir(parents=True)
    (d / "address").write_text(mac + "\n")
    (d / "carrier").write_text(f"{carrier}\n")
    return d


@pytest.fixture
def guest(tmp_path: Path) -> Path:
    sysfs = tmp_path / "sys"
    bk = _nic(sysfs, "eth1", BACKUP, 1)
    (bk / "master").symlink_to("../bond0")
    (bk / "bonding_slave").mkdir()
    (bk / "bonding_slave" / "perm_hwaddr").write_text(BACKUP + "\n")
    bond = sysfs / "class" / "net" / "bond0" / "bonding"
    bond.mkdir(parents=True)
    (bond / "active_slave").write_text("eth1\n")
    (bond / "slaves").write_text("eth1\n")
    _nic(sysfs, "eth0", FAST, 0)  # just hot-plugged, down, not yet renamed
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "ip").write_text(FAKE_IP)
    (bin_ / "ip").chmod(0o755)
    return tmp_path


def _run(root: Path, script: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, SOVA_SYSFS=str(root / "sys"))
    env["PATH"] = f"{root / 'bin'}:{env['PATH']}"
    return subprocess.run(
        ["/bin/sh", "-c", script, "sova-bond", FAST, BACKUP],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def test_a_nic_renamed_by_udev_while_being_enslaved_is_found_again_by_mac(guest):
    """Failed before the fix: exit 8, ``Cannot find device "eth0"``."""
    (guest / "sys" / ".rename").write_text("eth0 ens5\n")
    r = _run(guest, TO_FAST)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "bond0: active slave ens5"
    assert (guest / "sys/class/net/bond0/bonding/active_slave").read_text().strip() == "ens5"
    assert os.readlink(guest / "sys/class/net/ens5/master") == "../bond0"


def test_a_nic_that_never_joins_the_bond_is_one_short_line(guest):
    (guest / "bin" / "ip").write_text("#!/bin/sh\necho 'RTNETLINK answers: busy' >&2\nexit 2\n")
    r = _run(guest, TO_FAST)
    assert r.returncode == 8
    assert r.stderr.strip() == f"NIC with MAC {FAST} (eth0) could not join bond0"


def test_moving_to_the_backup_confirms_the_backup_active(guest):
    r = _run(guest, TO_BACKUP)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "fast NIC eth0 is in no bond: it carries nothing"
