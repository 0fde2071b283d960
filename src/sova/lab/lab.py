"""``sova lab up`` and ``sova lab down``: build the lab, and remove every trace of it."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sova.lab import daemons, network
from sova.lab.accel import AccelChoice, choose_accel
from sova.lab.guests import build_image, domain_xml, wait_agent
from sova.lab.qemu import QemuChoiceError
from sova.lab.qemu import resolve as resolve_qemu
from sova.lab.settings import LabSettings

Say = Callable[[str], None]


@dataclass
class LabState:
    accel: str
    accel_reason: str
    image: str
    daemons: dict[str, int]
    guests: dict[str, str]  # guest -> host it was started on
    boot_s: dict[str, float] = field(default_factory=dict)
    up_s: float = 0.0
    slow_rate_bps: float = 0.0
    qemu: str = "system"  # the choice as resolved (LabQemu.name)
    qemu_version: str = ""  # as the daemons' libvirt reports the hypervisor


def load_state(s: LabSettings) -> LabState | None:
    try:
        return LabState(**json.loads(s.state_file.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _save(s: LabSettings, st: LabState) -> None:
    tmp = s.state_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(st), indent=1))
    tmp.replace(s.state_file)


def connect(s: LabSettings, host: str) -> Any:
    import libvirt

    libvirt.registerErrorHandler(lambda _c, _e: None, None)
    return libvirt.open(s.uri(host))


def backup_taps(s: LabSettings, host: str) -> dict[str, str]:
    """Guest -> the host-side tap of its backup NIC on ``host`` (tap names change on migration)."""
    from sova.driver.libvirt_xml import parse_domain

    conn = connect(s, host)
    try:
        out: dict[str, str] = {}
        for dom in conn.listAllDomains(1):  # VIR_CONNECT_LIST_DOMAINS_ACTIVE
            info = parse_domain(dom.XMLDesc(0))
            for n in info.nics:
                if n.alias == "ua-backup" and n.target_dev:
                    out[info.name] = n.target_dev
        return out
    finally:
        conn.close()


def shape_backups(s: LabSettings, rate_bps: float) -> list[str]:
    """The slow path's cost on every backup tap of both hosts (re-run after a migration)."""
    import libvirt

    from sova.driver.libvirt_driver.tap_shaping import TapShaper

    done = []
    for host in s.hosts:
        try:
            taps = backup_taps(s, host)
        except libvirt.libvirtError:
            continue  # that daemon is down (a fault test killed it): nothing of it to shape
        for _guest, tap in sorted(taps.items()):
            TapShaper(tap, ifb=f"{s.prefix}i{tap}"[:15]).apply(rate_bps)
            done.append(tap)
    return done


def wait_network(s: LabSettings, ip: str, timeout_s: float) -> float:
    """Seconds until the guest answers a ping from the peer: its bond is up with its address.

    The guest agent answers before the guest's own network unit has run, so an agent that
    answers is not yet a guest the driver can fail over.
    """
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        r = network.sh(
            "ip", "netns", "exec", s.peer_ns, "ping", "-c", "1", "-W", "1", ip, check=False
        )
        if r.returncode == 0:
            return time.monotonic() - t0
        time.sleep(0.5)
    raise daemons.LabError(f"guest {ip} not reachable from {s.peer_ns} after {timeout_s:g}s")


def hypervisor_version(conn: Any) -> str:
    """The QEMU version a daemon runs, as libvirt probed it (``getVersion``: 10000002 is
    10.0.2): the proof of which QEMU the lab really runs."""
    v = int(conn.getVersion())
    return f"{v // 1_000_000}.{v // 1000 % 1000}.{v % 1000}"


#: The tools `up` needs on the machine (scripts/ci-setup-lab.sh installs them).
LAB_TOOLS = (
    "libvirtd",
    "virsh",
    "unshare",
    "qemu-system-x86_64",
    "qemu-img",
    "mmdebstrap",
    "mkfs.ext4",
    "ip",
    "tc",
    "ping",
)


def install_hint(repo: Path) -> str:
    """How to get everything the lab needs into this checkout's own venv (.venv)."""
    return f"run `sudo {repo / 'scripts' / 'lab-setup.sh'}` and use {repo / '.venv/bin/sova'}"


def preflight(repo: Path) -> None:
    """Everything `up` needs, checked before it starts anything: a failure leaves no
    daemon, bridge, namespace or directory behind."""
    missing = [t for t in LAB_TOOLS if shutil.which(t) is None]
    if missing:
        raise daemons.LabError(
            f"{', '.join(missing)} not found: {install_hint(repo)} "
            "(scripts/ci-setup-lab.sh installs the system packages)"
        )
    try:
        import importlib

        importlib.import_module("libvirt")
        importlib.import_module("libvirt_qemu")
    except ImportError:
        raise daemons.LabError(
            f"libvirt-python is not installed in this Python: {install_hint(repo)}"
        ) from None


def up(
    s: LabSettings,
    repo: Path,
    *,
    guests: int | None = None,
    slow_rate_bps: float = 100e6,
    say: Say = print,
) -> LabState:
    t0 = time.monotonic()
    if load_state(s) is not None:
        raise daemons.LabError(f"a lab is already up ({s.state_file}); run `sova lab down` first")
    preflight(repo)
    try:
        qemu = resolve_qemu(s.qemu, repo, s.image_cache)
    except QemuChoiceError as exc:
        raise daemons.LabError(str(exc)) from None
    s.root.mkdir(parents=True, exist_ok=True)
    s.qemu_record.write_text(qemu.name + "\n")
    n_guests = s.guests if guests is None else guests
    image = build_image(s, repo)
    say(f"image: {image.directory}")
    accel: AccelChoice = choose_accel(image.kernel, wrap=qemu.wrap)
    say(f"accelerator: {'KVM' if accel.domain_type == 'kvm' else 'TCG'} — {accel.reason}")
    st = LabState(
        accel.domain_type,
        accel.reason,
        str(image.directory),
        {},
        {},
        slow_rate_bps=slow_rate_bps,
        qemu=qemu.name,
    )
    _save(s, st)
    network.up(s)
    for i, host in enumerate(s.hosts):
        st.daemons[host] = daemons.start_daemon(s, host, i)
        _save(s, st)
        say(f"{host}: libvirtd pid {st.daemons[host]} at {s.uri(host)}")
    conn = connect(s, s.hosts[0])
    try:
        st.qemu_version = hypervisor_version(conn)
        _save(s, st)
        say(f"QEMU {st.qemu_version} ({qemu.name})")
        names = list(range(1, n_guests + 1))
        for start in range(0, len(names), max(1, s.boot_parallel)):
            batch = names[start : start + s.boot_parallel]
            doms = []
            for n in batch:
                dom = conn.defineXML(domain_xml(s, image, n, accel.domain_type))
                dom.create()
                st.guests[dom.name()] = s.hosts[0]
                _save(s, st)
                doms.append(dom)
            for dom in doms:
                n = int(dom.name()[1:])
                st.boot_s[dom.name()] = round(
                    wait_agent(dom, s.boot_timeout_s)
                    + wait_network(s, s.guest_ip(n), s.boot_timeout_s),
                    1,
                )
                say(f"{dom.name()}: guest agent up after {st.boot_s[dom.name()]} s on {s.hosts[0]}")
    finally:
        conn.close()
    shape_backups(s, slow_rate_bps)
    st.up_s = round(time.monotonic() - t0, 1)
    _save(s, st)
    say(f"lab up in {st.up_s} s")
    return st


def down(s: LabSettings, say: Say = print) -> list[str]:
    """Remove every guest, daemon, link, namespace and file of the lab; works without state."""
    removed: list[str] = []
    pids = daemons.kill_all(s)
    if pids:
        removed.append(f"processes {pids}")
    removed += network.down(s)
    from sova.lab.settings import HOST_DIRS

    # A daemon killed mid-way can leave a bind mount behind only inside its own mount
    # namespace, which died with it; nothing is mounted in ours. Checked, not assumed:
    mounts = Path("/proc/self/mounts").read_text()
    for target in HOST_DIRS.values():
        if f" {target} " in mounts and str(s.root) in mounts:
            with contextlib.suppress(Exception):
                network.sh("umount", "-l", target, check=False)
    if s.root.exists():
        shutil.rmtree(s.root, ignore_errors=True)
        removed.append(str(s.root))
    for r in removed:
        say(f"removed {r}")
    return removed
