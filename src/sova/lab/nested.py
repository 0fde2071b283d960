"""The nested SR-IOV lab: real VFs, passed through with VFIO, under the production driver.

This machine has no IOMMU, so a VF can only be had one level down: each hypervisor is an L1
VM (QEMU 10 on this machine, under TCG, with an emulated VT-d and an emulated Intel 82576
``igb`` whose SR-IOV gives real VFs), running Debian's libvirt 9.0 and QEMU 7.2; the
guests Sova acts on are L2 VMs inside it. The production ``LibvirtDriver`` (``sriov-vf`` +
``teaming``) drives an L1's libvirt over TCP from this machine: the PF and its VFs come
from libvirt's node devices, the VF is a ``<interface type='hostdev'>`` with
``<teaming type='transient'>`` next to the L2's persistent virtio NIC.

The L1 flags are the ones measured to work (docs/lab.md, "The nested SR-IOV lab"): 2560 MiB
and ``-global q35-pcihost.pci-hole64-size=0`` with the igb on ``pcie.0`` keep the VF BARs
below 4 GiB, which QEMU 10.0.2 needs (it maps a 64-bit VF BAR above 4 GiB at its low 32
bits only, and the VF's mailbox then reaches nothing); ``caching-mode=on`` lets VFIO in L1
use the emulated VT-d; ``ICH9-LPC.noreboot=true`` after two spontaneous L1 resets.

Everything lives in one network namespace (``<prefix>l0``: the L0 bridge, one tap per L1
NIC) joined to this machine by one veth, and under one directory; ``down`` kills what the
ledger recorded, deletes the namespace and the veth, and removes the directory.
"""

from __future__ import annotations

import compileall
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sova.lab.daemons import LabError, kill_pids, ledger_pids, record_pid_at
from sova.lab.qemu import LabQemu

#: a nested lab's name prefix: no '-', so that no testbed prefix (``P-``) matches its names
PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{1,5}$")

#: Tools this machine needs for the nested lab (scripts/ci-setup-lab.sh installs them).
TOOLS = ("ip", "unshare", "mmdebstrap", "mkfs.ext4", "qemu-img", "virsh", "apt-get", "dpkg")


@dataclass(frozen=True)
class NestedSettings:
    root: Path = Path(os.environ.get("SOVA_LAB_SRIOV_DIR", "/var/lib/sova-lab-sriov"))
    image_cache: Path = Path(os.environ.get("SOVA_LAB_CACHE", "/var/cache/sova-lab"))
    prefix: str = os.environ.get("SOVA_LAB_SRIOV_PREFIX", "svn")
    l1s: int = 1
    vfs: int = 2
    l1_memory_mib: int = 2560  # with pci-hole64-size=0: the VF BARs stay below 4 GiB
    subnet: str = "10.78.0"  # /24: this machine is .1, L1 n is .10+n
    boot_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if not PREFIX_RE.match(self.prefix):
            raise LabError(
                f"nested lab prefix: {self.prefix!r} is not 2-6 lower-case letters or digits "
                "(no '-')"
            )

    @property
    def netns(self) -> str:
        # no '-': the namespace testbed (tests/testbed, `sova testbed down --prefix P-`)
        # kills every process in each namespace whose name starts with its prefix, which
        # always ends in '-', and deletes the namespace. With `svt-l0` it took the tier's
        # L1s and its veth (the route to 10.78.0.0/24 with it) while a CI run's testbed
        # tests ran beside the tier (docs/lab.md#nested)
        return f"{self.prefix}l0"

    @property
    def bridge(self) -> str:
        return f"{self.prefix}-br"

    @property
    def veth(self) -> str:
        return f"{self.prefix}-h"

    def l1_ip(self, n: int) -> str:
        return f"{self.subnet}.{10 + n}"

    def l1_uri(self, n: int) -> str:
        return f"qemu+tcp://{self.l1_ip(n)}/system"

    def ctl_mac(self, n: int) -> str:
        return f"52:54:00:78:00:1{n}"

    def pf_mac(self, n: int) -> str:
        return f"52:54:00:78:01:1{n}"

    def l2_ip(self, n: int, k: int) -> str:
        """Guest k (1-based) of L1 n, on the same segment as the L1s and this machine."""
        return f"{self.subnet}.{100 + 10 * n + k}"

    def run_dir(self, n: int) -> Path:
        """L1 n's writable share: the agent's TOML goes in, its log and records come out."""
        return self.root / f"l1-{n}-run"

    def taps(self, n: int) -> tuple[str, str]:
        return f"{self.prefix}{n}c", f"{self.prefix}{n}p"

    @property
    def state_file(self) -> Path:
        return self.root / "state.json"


def _sh(*args: str, check: bool = True, timeout_s: float = 30.0) -> str:
    r = subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)
    if check and r.returncode != 0:
        raise LabError(f"{' '.join(args)} exited {r.returncode}: {r.stderr.strip()[-300:]}")
    return r.stdout


def _script(repo: Path, name: str, cache: Path, timeout_s: float = 1800) -> Path:
    r = subprocess.run(
        ["bash", str(repo / "scripts" / name), str(cache)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if r.returncode != 0:
        tail = " | ".join(r.stderr.strip().splitlines()[-3:])
        raise LabError(f"scripts/{name} exited {r.returncode}: {tail}")
    return Path(r.stdout.strip().splitlines()[-1])


def unavailable() -> str | None:
    """Why the nested lab cannot run here, or None."""
    if os.geteuid() != 0:
        return "the nested lab needs root (namespaces, taps, QEMU)"
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        return f"needs {', '.join(missing)} (scripts/ci-setup-lab.sh installs them)"
    try:
        import importlib

        importlib.import_module("libvirt")
    except ImportError:
        return "needs libvirt-python (scripts/lab-setup.sh installs it)"
    return None


def _network_up(ns: NestedSettings) -> None:
    _sh("ip", "netns", "add", ns.netns)
    _sh("ip", "-n", ns.netns, "link", "set", "lo", "up")
    # FDB entries age after 1 s: a guest's VF leaves L1 through the igb port and its virtio
    # backup through the control NIC (two ports here; one PF port on a production host), so
    # after an unplug a guest that sends nothing stayed unreachable behind the igb port until
    # its ARP entry went stale (28 s, 561 of 20/s pings lost, measured); flooding reaches it
    ageing = ("ageing_time", "100")  # centiseconds
    _sh(
        "ip",
        "-n",
        ns.netns,
        "link",
        "add",
        ns.bridge,
        "type",
        "bridge",
        "forward_delay",
        "0",
        *ageing,
    )
    _sh("ip", "-n", ns.netns, "link", "set", ns.bridge, "up")
    _sh("ip", "link", "add", ns.veth, "type", "veth", "peer", "name", f"{ns.veth}p")
    _sh("ip", "link", "set", f"{ns.veth}p", "netns", ns.netns)
    _sh("ip", "-n", ns.netns, "link", "set", f"{ns.veth}p", "master", ns.bridge, "up")
    _sh("ip", "addr", "add", f"{ns.subnet}.1/24", "dev", ns.veth)
    _sh("ip", "link", "set", ns.veth, "up")
    for n in range(1, ns.l1s + 1):
        for tap in ns.taps(n):
            _sh("ip", "-n", ns.netns, "tuntap", "add", "mode", "tap", "name", tap)
            _sh("ip", "-n", ns.netns, "link", "set", tap, "master", ns.bridge, "up")


def l1_command(
    ns: NestedSettings,
    qemu: Path,
    image: Path,
    n: int,
    repo: Path | None = None,
    system_root: Path = Path("/"),
) -> list[str]:
    """The L1's QEMU 10, in the L0 namespace, laid over the machine's QEMU 7.2 the way the
    ordinary lab lays it (:meth:`sova.lab.qemu.LabQemu.wrap`: a private mount namespace with
    QEMU 10's binary, modules and firmware bind-mounted over the system's).

    With ``repo``, L1 n's run directory as a writable 9p share: the agent inside L1
    (scripts/lab/nested/l1/…/sova-l1-agent) takes its code and its file from there.
    ``system_root``: the system QEMU 10 is laid over (:attr:`LabQemu.root`)."""
    ctl, pf = ns.taps(n)
    disk = ns.root / f"l1-{n}.qcow2"
    args = [
        str(qemu),
        "-name", f"sova-l1-{n}",
        "-uuid", f"5eb1a000-0000-4000-8000-0000000000{n:02d}",  # libvirt's host UUID: two hosts
        # one vCPU. Two on multi-threaded TCG: an L1 hung as two CPU-burning L2s started,
        # one vCPU waiting for ever for a TLB-flush IPI the other never answered (nested SVM
        # under MTTCG); two on single-threaded TCG: every cross-CPU wait lasts until the
        # round-robin switches, and two L2s' guest agents were not up after 6 min (36-41 s
        # on one vCPU). One vCPU has no cross-CPU flush to lose; two L1s on this 2-core
        # machine get about a core each anyway (docs/lab.md#nested)
        "-accel", "tcg",
        "-machine", "q35",
        "-cpu", "max",
        "-smp", "1",
        "-m", str(ns.l1_memory_mib),
        "-device", "intel-iommu,intremap=on,caching-mode=on",
        "-global", "q35-pcihost.pci-hole64-size=0",
        "-global", "ICH9-LPC.noreboot=true",
        "-nodefaults",
        "-display", "none",
        "-serial", f"file:{ns.root / f'l1-{n}.serial'}",
        "-kernel", str(image / "vmlinuz"),
        "-initrd", str(image / "initrd.img"),
        "-append",
        f"root=/dev/vda rw console=ttyS0 intel_iommu=on iommu=pt sova.l1={n} sova.vfs={ns.vfs}",
        "-drive", f"file={disk},if=virtio,format=qcow2",
        "-netdev", f"tap,id=pf,ifname={pf},script=no,downscript=no",
        "-device", f"igb,netdev=pf,bus=pcie.0,addr=0x6,mac={ns.pf_mac(n)}",
        "-netdev", f"tap,id=ctl,ifname={ctl},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=ctl,mac={ns.ctl_mac(n)}",
    ]  # fmt: skip
    if repo is not None:
        args += ["-virtfs", f"local,path={ns.run_dir(n)},mount_tag=sova-run,security_model=none"]
    return ["ip", "netns", "exec", ns.netns, *LabQemu(qemu.parents[2], system_root).wrap(args)]


def _answers(uri: str) -> bool:
    try:
        r = subprocess.run(["virsh", "-c", uri, "uri"], capture_output=True, timeout=15)
    except subprocess.TimeoutExpired:
        return False
    return r.returncode == 0


def up(ns: NestedSettings, repo: Path, say: Callable[[str], None] = print) -> dict[str, object]:
    """Build (cached) and boot the L1 hypervisors; the state written to ``state.json``."""
    tell = say
    why = unavailable()
    if why:
        raise LabError(why)
    if ns.state_file.exists():
        raise LabError(f"a nested lab is already up ({ns.state_file}); run its down first")
    t0 = time.monotonic()
    qemu = _script(repo, "lab-nested-qemu.sh", ns.image_cache)
    tell(f"L0 QEMU: {qemu}")
    image = _script(repo, "lab-nested-image.sh", ns.image_cache)
    tell(f"L1 image: {image} ({time.monotonic() - t0:.0f} s)")
    ns.root.mkdir(parents=True, exist_ok=True)
    state: dict[str, object] = {"image": str(image), "qemu": str(qemu), "l1": {}}
    ns.state_file.write_text(json.dumps(state))
    _network_up(ns)
    # all L1s boot at once: a boot waits on its disk and its timers as much as on the CPU
    # (docs/lab.md#nested has the figures)
    procs: dict[int, subprocess.Popen[bytes]] = {}
    for n in range(1, ns.l1s + 1):
        _sh(
            "qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2",
            "-b", str(image / "base.qcow2"), str(ns.root / f"l1-{n}.qcow2"),
        )  # fmt: skip
        ns.run_dir(n).mkdir(parents=True, exist_ok=True)
        log = open(ns.root / f"l1-{n}.out", "ab")  # noqa: SIM115 - handed to the child
        procs[n] = subprocess.Popen(
            l1_command(ns, qemu, image, n, repo),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        record_pid_at(ns.root, procs[n].pid, f"L1 {n} qemu")
    started = time.monotonic()
    boot: dict[str, float] = {}
    while len(boot) < ns.l1s:
        for n, proc in procs.items():
            if f"l1-{n}" in boot:
                continue
            if proc.poll() is not None:
                tail = (ns.root / f"l1-{n}.out").read_text(errors="replace").strip()[-300:]
                raise LabError(f"L1 {n}'s QEMU exited {proc.returncode}: {tail}")
            if _answers(ns.l1_uri(n)):
                boot[f"l1-{n}"] = round(time.monotonic() - started, 1)
                tell(f"l1-{n}: libvirt answers at {ns.l1_uri(n)} after {boot[f'l1-{n}']} s")
            elif time.monotonic() - started > ns.boot_timeout_s:
                raise LabError(
                    f"L1 {n}'s libvirt not answering at {ns.l1_uri(n)} after "
                    f"{ns.boot_timeout_s:g} s (serial log {ns.root / f'l1-{n}.serial'})"
                )
        time.sleep(2)
    state["l1"] = {f"l1-{n}": ns.l1_uri(n) for n in range(1, ns.l1s + 1)}
    state["boot_s"] = boot
    state["up_s"] = round(time.monotonic() - t0, 1)
    ns.state_file.write_text(json.dumps(state))
    return state


def down(ns: NestedSettings) -> list[str]:
    """Remove every process, link, namespace and file of the nested lab; needs no state."""
    removed: list[str] = []
    pids = set(ledger_pids(ns.root))
    mark = str(ns.root)
    for p in Path("/proc").iterdir():  # QEMUs whose disks are the lab's (a lost ledger)
        if p.name.isdigit() and int(p.name) != os.getpid():
            try:
                if mark.encode() in (p / "cmdline").read_bytes():
                    pids.add(int(p.name))
            except OSError:
                continue
    if pids:
        removed.append(f"processes {kill_pids(pids)}")
    if Path(f"/run/netns/{ns.netns}").exists():
        _sh("ip", "netns", "del", ns.netns, check=False)
        removed.append(f"namespace {ns.netns}")
    if Path(f"/sys/class/net/{ns.veth}").exists():
        _sh("ip", "link", "del", ns.veth, check=False)
        removed.append(f"link {ns.veth}")
    if ns.root.exists():
        shutil.rmtree(ns.root, ignore_errors=True)
        removed.append(str(ns.root))
    return removed


def agent_toml(
    ns: NestedSettings,
    n: int,
    controller: dict[str, Any],
    vf_pool: int | None = None,
    manager: tuple[str, str] | None = None,
    libvirt: dict[str, Any] | None = None,
) -> str:
    """The agent's file inside L1 n: production's strategies (``sriov-vf`` + ``teaming``,
    the defaults), this hypervisor's own libvirt, hot-plug bounds for TCG (an attempt
    takes seconds) that fit the controller's ``op_timeout``; standalone, or reporting to
    ``manager`` (URL, this host's token). ``libvirt``: more ``[libvirt]`` keys."""
    from sova.lab.sova_procs import to_toml

    data: dict[str, Any] = {
        "host": f"l1-{n}",
        "driver": "libvirt",
        "connect": "qemu:///system",
        "manager_url": manager[0] if manager else None,
        "token": manager[1] if manager else None,
        "report_timeout_s": 5.0,
        "poll_interval_s": 0.5,
        "log_level": "info",
        "controller": controller,
        "libvirt": {
            "host_name": f"l1-{n}",
            "vf_pool": vf_pool,
            "hotplug_timeout_s": 30.0,
            "hotplug_attempts": 2,
            "retry_backoff_s": 2.0,
            **(libvirt or {}),
        },
    }
    return to_toml(data) + "\n"


#: What the agent imports (its daemon, the libvirt driver, the policies it runs): the
#: top-level packages these pull in are what L1 gets.
AGENT_IMPORTS = (
    "sova.cli",
    "sova.cli_daemons",
    "sova.manager.daemons.agent.daemon",
    "sova.manager.daemons.agent.wiring",
    "sova.manager.daemons.preflight",
    "sova.manager.daemons.config",
    "sova.driver.libvirt_driver",
    "sova.agent.loop",
    "sova.manager.daemons.agent.client",
    "httpcore",  # httpx loads its transport's packages on first use
    "h11",
    "anyio",
    "certifi",
    "libvirt",
    "libvirt_qemu",
)


def agent_bundle(repo: Path, out: Path) -> int:
    """The agent's code for L1 as one archive: the checkout's ``sova`` package and every
    top-level package of the running interpreter's site-packages that importing the agent
    loads (found by importing it in a child interpreter, not by a hand-kept list). Bytes."""
    probe = (
        "import importlib, sys\n"
        f"for m in {AGENT_IMPORTS!r}: importlib.import_module(m)\n"
        "for m in list(sys.modules.values()):\n"
        "    f = getattr(m, '__file__', None)\n"
        "    if f: print(f)\n"
    )
    files = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(repo / "src")},
    ).stdout.split()
    # byte-code compiled here, where it takes seconds, and shipped beside the sources: L1's
    # Python is the same minor version (Debian 12's 3.11) and compiling every module under
    # TCG was most of the agent's 3.5 min start (docs/lab.md#nested)
    compileall.compile_dir(repo / "src" / "sova", quiet=1)
    site = Path(sysconfig.get_paths()["purelib"])
    tops: set[str] = set()
    for f in files:
        p = Path(f)
        if site in p.parents:
            tops.add(p.relative_to(site).parts[0])
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        tar.add(repo / "src" / "sova", "sova", filter=_no_cache)
        for top in sorted(tops - {"sova"}):
            tar.add(site / top, top, filter=_no_cache)
        for top in sorted(tops):  # the shared libraries a wheel bundles beside it
            libs = site / f"{top}.libs"
            if libs.is_dir():
                tar.add(libs, libs.name)
    return out.stat().st_size


def _no_cache(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Byte code of this interpreter's version only (what L1's 3.11 loads); no package's
    own test suite (numpy's is 10 MB)."""
    if "/tests/" in info.name or info.name.endswith("/tests"):
        return None
    if "__pycache__" not in info.name or info.isdir():
        return info
    return info if sys.implementation.cache_tag in info.name else None


def start_agent(ns: NestedSettings, n: int, toml: str, repo: Path) -> Path:
    """Hand L1 n's agent its code and its file (it waits for the file, docs/lab.md#nested);
    its log path. A previous agent's log is kept as ``agent.log.<k>``.

    The code is the checkout as it was at this lab's first agent start: one archive per
    lab (``<root>/sova-agent.tar.gz``, gone with ``down``), shared by every L1 and every
    restart — building it (byte code, 31 MB of gzip) took L0 tens of seconds per start
    beside two TCG L1s."""
    run = ns.run_dir(n)
    if (run / "agent.toml").exists():
        raise LabError(f"an agent already runs in L1 {n}: stop_agent first")
    log = run / "agent.log"
    if log.exists():
        log.rename(run / f"agent.log.{len(list(run.glob('agent.log.*'))) + 1}")
    shared = ns.root / "sova-agent.tar.gz"
    if not shared.exists():
        tmp_bundle = ns.root / "sova-agent.tar.gz.tmp"
        agent_bundle(repo, tmp_bundle)
        tmp_bundle.rename(shared)
    if not (run / "sova-agent.tar.gz").exists():
        os.link(shared, run / "sova-agent.tar.gz")
    tmp = run / "agent.toml.tmp"
    tmp.write_text(toml)
    tmp.rename(run / "agent.toml")  # the agent never reads half a file
    return log


def stop_agent(ns: NestedSettings, n: int, signal: str = "TERM", timeout_s: float = 120.0) -> float:
    """Stop L1 n's agent with ``signal`` (``KILL``: a crash); seconds until L1 acknowledged
    (it removes the agent's file). No agent: 0."""
    if signal not in ("TERM", "KILL", "INT"):
        raise LabError(f"stop_agent: signal {signal!r} is not TERM, KILL or INT")
    run = ns.run_dir(n)
    if not (run / "agent.toml").exists():
        return 0.0
    t0 = time.monotonic()
    (run / "agent.stop").write_text(signal)
    while (run / "agent.toml").exists():
        if time.monotonic() - t0 > timeout_s:
            raise LabError(f"L1 {n}'s agent not stopped {timeout_s:g} s after SIG{signal}")
        time.sleep(0.5)
    return time.monotonic() - t0


def l1_exec(ns: NestedSettings, n: int, script: str, timeout_s: float = 150.0) -> tuple[int, str]:
    """Run ``script`` (sh) in L1 n as root through its run share (the image's
    ``sova-l1-exec``; L1 bounds it at 120 s): its exit status and output."""
    d = ns.run_dir(n) / "exec"
    d.mkdir(exist_ok=True)
    ident = f"{time.time_ns()}"
    tmp = d / f"{ident}.tmp"
    tmp.write_text(script)
    tmp.rename(d / f"{ident}.sh")  # L1 never runs half a script
    t0 = time.monotonic()
    while not (d / f"{ident}.rc").exists():
        if time.monotonic() - t0 > timeout_s:
            raise LabError(f"L1 {n} did not run {script[:60]!r} within {timeout_s:g} s")
        time.sleep(0.3)
    out = (d / f"{ident}.out").read_text(errors="replace")
    return int((d / f"{ident}.rc").read_text().strip() or "255"), out


def l2_guest_xml(ns: NestedSettings, n: int, k: int, domain_type: str) -> str:
    """Guest ``g<k>`` created in L1 n: its address on the lab's segment, a MAC of its own."""
    return l2_xml(f"g{k}", f"52:54:00:77:{n:02x}:1{k}", domain_type, f"{ns.l2_ip(n, k)}/24")


def l2_xml(name: str, mac: str, domain_type: str, ip: str | None = None) -> str:
    """An L2 guest inside an L1: the L1's kernel and a busybox initramfs, one virtio NIC
    on the L1's br-back as the failover backup (persistent teaming, a user alias), spare
    PCIe root ports for the VF to be hot-plugged into, and a guest-agent channel. With
    ``ip`` (``A/N``) the guest puts it on its net_failover master."""
    cpu = (
        "<cpu mode='host-passthrough'/>"
        if domain_type == "kvm"
        else "<cpu mode='custom'><model>qemu64</model></cpu>"
    )
    ports = "".join("<controller type='pci' model='pcie-root-port'/>" for _ in range(4))
    return (
        f"<domain type='{domain_type}'><name>{name}</name>"
        "<memory unit='MiB'>256</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='q35'>hvm</type>"
        "<kernel>/var/lib/sova-l2/vmlinuz</kernel><initrd>/var/lib/sova-l2/initrd.img</initrd>"
        # quiet: every console byte is an exit to L1's QEMU under TCG; the kernel's boot
        # log alone took L2 minutes (measured), the init's own lines are still printed
        f"<cmdline>console=ttyS0 quiet panic=-1 sova.mac={mac}"
        f"{f' sova.ip={ip}' if ip else ''}</cmdline></os>"
        f"<features><acpi/></features>{cpu}<on_reboot>restart</on_reboot>"
        # no USB controller: it would take one of the root ports the VF is plugged into
        "<devices><controller type='pci' model='pcie-root'/><controller type='usb' model='none'/>"
        f"{ports}"
        f"<interface type='bridge'><mac address='{mac}'/><source bridge='br-back'/>"
        "<model type='virtio'/><teaming type='persistent'/><alias name='ua-backup0'/>"
        "</interface>"
        f"<serial type='file'><source path='/var/log/libvirt/qemu/{name}.serial'/></serial>"
        "<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>"
        "<memballoon model='none'/></devices></domain>"
    )
