"""Choosing the lab's QEMU (``sova lab up --qemu``, ``$SOVA_LAB_QEMU``): no root needed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from qemu_tree import qemu_tree

from sova.lab.qemu import LabQemu, QemuChoiceError, from_record, resolve

ROOT = Path(__file__).resolve().parents[2]


def _prefix(tmp_path: Path, *rel: str) -> Path:
    return qemu_tree(tmp_path / "qemu-10", rel)


def test_the_machines_own_qemu_needs_no_namespace(tmp_path):
    q = resolve("system", ROOT, tmp_path)
    assert q == LabQemu() and q.name == "system"
    assert q.binds() == [] and q.mount_script() == ""
    assert q.wrap(["qemu-system-x86_64", "-version"]) == ["qemu-system-x86_64", "-version"]


def test_a_prefix_is_laid_over_the_machines_qemu_where_both_have_a_piece(tmp_path):
    p = _prefix(tmp_path, "usr/bin/qemu-system-x86_64", "usr/share/qemu", "usr/share/seabios")
    fake_root = tmp_path / "root"
    for r in ("usr/bin/qemu-system-x86_64", "usr/share/qemu"):  # no seabios on this machine
        (fake_root / r).parent.mkdir(parents=True, exist_ok=True)
        (fake_root / r).write_text("") if r.endswith("64") else (fake_root / r).mkdir()
    q = resolve(str(p / "usr/bin/qemu-system-x86_64"), ROOT, tmp_path)
    assert q.prefix == p
    # the binary and the firmware; seabios has no target here (a bind needs one), modules
    # and option ROMs are not in this prefix
    assert q.binds(fake_root) == [
        (p / "usr/bin/qemu-system-x86_64", fake_root / "usr/bin/qemu-system-x86_64"),
        (p / "usr/share/qemu", fake_root / "usr/share/qemu"),
    ]


def test_wrap_runs_the_command_after_the_binds_in_a_private_mount_namespace(tmp_path):
    p = _prefix(tmp_path / "a dir", "usr/bin/qemu-system-x86_64")
    system = _prefix(tmp_path / "system", "usr/bin/qemu-system-x86_64")  # the QEMU laid over
    q = LabQemu(p, system)
    argv = ["qemu-system-x86_64", "-append", "console=ttyS0 panic=-1"]
    got = q.wrap(argv)
    assert got[:5] == ["unshare", "--mount", "--propagation", "private", "sh"]
    script = got[-1]
    # the bind (quoted: the path has a space) comes before the exec, arguments stay whole
    assert script.index(f"mount --bind '{p}/usr/bin/qemu-system-x86_64' ") < script.index("exec")
    # the machine's own QEMU is what the bind covers; without one there is nothing to bind
    assert f"{system}/usr/bin/qemu-system-x86_64 && exec" in script
    bare = LabQemu(p, tmp_path / "bare").wrap(argv)[-1]
    assert bare == "exec qemu-system-x86_64 -append 'console=ttyS0 panic=-1'"
    assert script.endswith("exec qemu-system-x86_64 -append 'console=ttyS0 panic=-1'")


@pytest.mark.parametrize(
    "value",
    ["qemu10", "/nonexistent/usr/bin/qemu-system-x86_64", "/usr/bin/true"],
)
def test_a_choice_naming_nothing_usable_is_refused_naming_the_value(tmp_path, value):
    with pytest.raises(QemuChoiceError, match=r"^--qemu: '" + value + "' is not system, backports"):
        resolve(value, ROOT, tmp_path)


def test_the_record_up_leaves_gives_the_same_qemu_back(tmp_path):
    p = _prefix(tmp_path, "usr/bin/qemu-system-x86_64")
    q = LabQemu(p)
    assert from_record(q.name + "\n") == q
    assert from_record("system\n") == LabQemu()
    assert from_record("") == LabQemu()


def test_the_daemon_starts_with_the_recorded_qemu(tmp_path):
    """`up` records its choice; a daemon started later (a fault test restarting HV2) reads it,
    so both hosts and every restart run the same QEMU."""
    from sova.lab.daemons import lab_qemu
    from sova.lab.settings import LabSettings

    s = LabSettings(root=tmp_path / "lab")
    assert lab_qemu(s) == LabQemu()  # nothing recorded: the machine's own
    p = _prefix(tmp_path, "usr/bin/qemu-system-x86_64")
    s.root.mkdir()
    s.qemu_record.write_text(f"{p}/usr/bin/qemu-system-x86_64\n")
    assert lab_qemu(s) == LabQemu(p)


def test_the_kvm_probe_runs_the_labs_qemu(tmp_path, monkeypatch):
    """The accelerator is judged on the QEMU the guests will run: the probe's command goes
    through the choice's wrap (here one that sets a variable the fake QEMU answers to)."""
    import os

    from sova.lab.accel import choose_accel

    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake = bin_ / "qemu-system-x86_64"
    fake.write_text('#!/bin/sh\n[ "$LAB_QEMU" = 10 ] && echo "Linux version 6.1"\nexec sleep 30\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_}:{os.environ['PATH']}")
    monkeypatch.delenv("SOVA_LAB_ACCEL", raising=False)
    kvm = tmp_path / "kvm"
    kvm.write_text("")
    got = choose_accel(
        tmp_path / "vmlinuz",
        timeout_s=2,
        kvm_dev=str(kvm),
        wrap=lambda argv: ["env", "LAB_QEMU=10", *argv],
    )
    assert got.domain_type == "kvm", got
    got = choose_accel(tmp_path / "vmlinuz", timeout_s=1, kvm_dev=str(kvm))
    assert got.domain_type == "qemu", got


@pytest.mark.skipif(
    not Path("/usr/bin/unshare").exists()
    or subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0",
    reason="needs root (mount namespaces)",
)
def test_a_wrapped_command_sees_the_prefix_and_the_machine_does_not(tmp_path):
    p = tmp_path / "pfx"
    (p / "usr/share/qemu").mkdir(parents=True)
    (p / "usr/share/qemu/sova-lab-mark").write_text("10\n")
    (p / "usr/bin").mkdir(parents=True)
    (p / "usr/bin/qemu-system-x86_64").write_text("#!/bin/sh\n")
    if not Path("/usr/share/qemu").is_dir():
        pytest.skip("no /usr/share/qemu on this machine")
    q = LabQemu(p)
    r = subprocess.run(
        q.wrap(["cat", "/usr/share/qemu/sova-lab-mark"]), capture_output=True, text=True, timeout=10
    )
    assert (r.returncode, r.stdout) == (0, "10\n"), r.stderr
    assert not Path("/usr/share/qemu/sova-lab-mark").exists()
