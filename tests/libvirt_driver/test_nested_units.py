"""The nested SR-IOV lab's names and commands (sova.lab.nested): no root, no QEMU needed."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from qemu_tree import qemu_tree
from tests.lab.nested_helpers import tier_settings

from sova.lab.daemons import LabError
from sova.lab.nested import NestedSettings, l1_command
from sova.lab.qemu import OVERLAID, LabQemu
from sova.testbed.plumbing import PREFIX_RE as TESTBED_PREFIX_RE


@pytest.mark.parametrize("ns", [NestedSettings(), tier_settings()], ids=["default", "tier"])
def test_no_testbed_teardown_can_take_the_nested_labs_namespace(ns):
    """`sova testbed down --prefix P-` (tests/testbed at every CI run: ``svt-``) kills every
    process in each namespace named ``P-…`` and deletes it. The tier's lab was ``svt-l0``:
    a CI run beside it killed both L1s, the veth went with the namespace and L1 1's libvirt
    address was routed to the machine's default gateway, whose HTTP answer libvirt read
    as `packet 1213486156 bytes received from server too large` (b"HTTP")."""
    takers = [ns.netns[:i] for i in range(1, len(ns.netns) + 1)]
    assert not [p for p in takers if TESTBED_PREFIX_RE.match(p)], ns.netns


@pytest.mark.parametrize("prefix", ["svt-", "", "s", "Svn", "svn_x", "abcdefg"])
def test_a_nested_prefix_that_a_testbed_could_match_is_refused_naming_it(prefix):
    with pytest.raises(LabError, match=rf"^nested lab prefix: {prefix!r} is not"):
        NestedSettings(prefix=prefix)


def test_the_l1_runs_qemu_10_laid_over_the_system_the_way_the_ordinary_lab_does(tmp_path):
    """One mechanism for both labs: the L1's command is ``LabQemu.wrap`` inside the L0
    namespace, so every piece the ordinary lab lays over the system's QEMU (binary,
    modules, firmware, option ROMs) is laid here too, and the arguments stay whole."""
    prefix = tmp_path / "qemu 10"  # a space: the arguments must stay quoted
    system = tmp_path / "system"  # the machine's QEMU 7.2, every piece present
    for top in (prefix, system):
        qemu_tree(top, OVERLAID)
    ns = NestedSettings(root=tmp_path / "lab", prefix="svx")
    qemu = prefix / "usr/bin/qemu-system-x86_64"
    cmd = l1_command(ns, qemu, tmp_path / "image", 1, repo=Path("/repo"), system_root=system)
    assert cmd[:4] == ["ip", "netns", "exec", "svxl0"]
    assert cmd[4:9] == ["unshare", "--mount", "--propagation", "private", "sh"]
    script = cmd[-1]
    mounts, _, exec_part = script.partition(" && exec ")
    binds = LabQemu(prefix, system).binds()
    assert len(binds) == len(OVERLAID)  # every piece laid over
    for src, dst in binds:
        assert f"mount --bind {shlex.quote(str(src))} {shlex.quote(str(dst))}" in mounts
    argv = shlex.split(exec_part)
    assert argv[0] == str(qemu)
    assert argv[argv.index("-virtfs") + 1].startswith(f"local,path={ns.run_dir(1)},")
    assert "igb,netdev=pf,bus=pcie.0,addr=0x6,mac=52:54:00:78:01:11" in argv
    # one vCPU per L1: two under multi-threaded TCG locked an L1 up in a TLB-flush IPI,
    # two under single-threaded TCG were too slow (docs/lab.md#nested)
    assert argv[argv.index("-smp") + 1] == "1"
