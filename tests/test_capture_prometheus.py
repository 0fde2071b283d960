"""`sova scenario capture` against a real Prometheus server (issue 35 item 7).

The test writes the libvirt exporter's per-VM series for one hour of yesterday as OpenMetrics
text, backfills them into a TSDB with ``promtool tsdb create-blocks-from openmetrics``,
starts ``prometheus`` on that TSDB (loopback only), captures a scenario from it, and replays
it with ``sova simulate``: the captured CSV carries the series' rates and the simulated VMs
offer them. Skipped, saying why, where Debian's ``prometheus`` package (both binaries;
scripts/ci-setup-ops.sh installs it) is missing.
"""

from __future__ import annotations

import csv
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from sova.cli import app
from sova.scenario import load_scenario

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
NO_PROMETHEUS = (
    "needs Debian's prometheus package (prometheus and promtool; scripts/ci-setup-ops.sh)"
)
runner = CliRunner()

SCRAPE = 15  # s between the exporter's samples
MBIT = 1e6 / 8  # bytes per second in one Mbit/s
# The hour captured: yesterday, on the hour. Backfilled blocks must be older than the head
# Prometheus starts with, and inside its retention (15 days by default).
START = (int(time.time()) // 3600 - 24) * 3600
END = START + 3600


def web_tx(t: float) -> float:
    """web's transmit rate (bytes/s): 100 Mbit/s, then 800 Mbit/s from minute 30."""
    return (100 if t < START + 1800 else 800) * MBIT


def batch_tx(t: float) -> float:
    """batch sends 300 Mbit/s from minute 10 to minute 30, nothing before or after."""
    return 300 * MBIT if START + 600 <= t < START + 1800 else 0.0


def const(mbit: float) -> Callable[[float], float]:
    return lambda t: mbit * MBIT


def web_cpu(t: float) -> float:
    """CPU seconds per second: 1 of web's 4 vCPUs busy, 3 from minute 30."""
    return 1.0 if t < START + 1800 else 3.0


Samples = list[tuple[int, float]]


def counter(
    rate: Callable[[float], float], times: list[int], reset_at: int | None = None
) -> Samples:
    """A counter's samples at ``times`` for a rate that is constant between samples; at
    ``reset_at`` it restarts from the increase of that scrape (an exporter restart)."""
    out, c = [], 0.0
    for i, t in enumerate(times):
        if i:
            c += rate(times[i - 1]) * (t - times[i - 1])
            if reset_at is not None and times[i - 1] < reset_at <= t:
                c = rate(times[i - 1]) * (t - times[i - 1])
        out.append((t, c))
    return out


def gauge(value: float, times: list[int]) -> Samples:
    return [(t, value) for t in times]


def openmetrics(path: Path) -> None:
    # Samples from 5 minutes before the window to 5 after, so the first step has its rate.
    times = list(range(START - 300, END + 300 + 1, SCRAPE))
    before = [t for t in times if t <= START + 1200]
    after = [t for t in times if t >= START + 1200]
    lib = {"job": "libvirt"}
    hv1, hv2 = {**lib, "instance": "hv1:9177"}, {**lib, "instance": "10.0.0.2:9177"}
    n1, n2 = {"job": "node", "instance": "hv1:9100"}, {"job": "node", "instance": "hv2:9100"}
    families: dict[str, tuple[str, list[tuple[dict[str, str], Samples]]]] = {
        "libvirt_domain_interface_stats_transmit_bytes": ("counter", [
            ({**hv1, "domain": "web", "target_device": "vnet0"}, counter(web_tx, times)),
            ({**hv1, "domain": "web", "target_device": "vnet1"}, counter(const(0), times)),
            ({**hv1, "domain": "batch", "target_device": "vnet2"}, counter(batch_tx, times)),
            ({**hv2, "domain": "db", "target_device": "vnet0"}, counter(const(20), times, START + 2400)),
            # mover is live-migrated from hv1 to 10.0.0.2 at minute 20, sending 40 Mbit/s
            ({**hv1, "domain": "mover", "target_device": "vnet3"}, counter(const(40), before)),
            ({**hv2, "domain": "mover", "target_device": "vnet1"}, counter(const(40), after)),
            # the same VM scraped by another job: --selector 'job="libvirt"' leaves it out
            ({"job": "other", "instance": "hv1:9177", "domain": "web", "target_device": "vnet0"},
             counter(const(5000), times)),
        ]),
        "libvirt_domain_interface_stats_receive_bytes": ("counter", [
            ({**hv1, "domain": "web", "target_device": "vnet0"}, counter(const(10), times)),
            ({**hv1, "domain": "web", "target_device": "vnet1"}, counter(const(5), times)),
            ({**hv1, "domain": "batch", "target_device": "vnet2"}, counter(const(0), times)),
            ({**hv2, "domain": "db", "target_device": "vnet0"}, counter(const(50), times, START + 2400)),
        ]),
        # the node exporter's view of the tap devices: a tap receives what its VM sends
        "node_network_receive_bytes": ("counter", [
            ({**n1, "device": "vnet0"}, counter(web_tx, times)),
            ({**n1, "device": "eno1"}, counter(const(9000), times)),
            ({**n2, "device": "vnet0"}, counter(const(20), times)),
        ]),
        "node_network_transmit_bytes": ("counter", [
            ({**n1, "device": "vnet0"}, counter(const(10), times)),
            ({**n1, "device": "eno1"}, counter(const(9000), times)),
            ({**n2, "device": "vnet0"}, counter(const(50), times)),
        ]),
        "libvirt_domain_info_cpu_time_seconds": ("counter", [
            ({**hv1, "domain": "web"}, counter(web_cpu, times)),
            ({**hv1, "domain": "batch"}, counter(lambda t: 2.0, times)),
            ({**hv2, "domain": "db"}, counter(lambda t: 0.1, times)),
        ]),
        "libvirt_domain_info_virtual_cpus": ("gauge", [
            ({**hv1, "domain": "web"}, gauge(4.0, times)),
            ({**hv1, "domain": "batch"}, gauge(2.0, times)),
            ({**hv2, "domain": "db"}, gauge(1.0, times)),
        ]),
        "libvirt_domain_info_maximum_memory_bytes": ("gauge", [
            ({**hv1, "domain": "web"}, gauge(8.0 * 2**30, times)),
            ({**hv1, "domain": "batch"}, gauge(2.0 * 2**30, times)),
            ({**hv2, "domain": "db"}, gauge(16.0 * 2**30, times)),
        ]),
    }  # fmt: skip
    lines = []
    for family, (kind, series) in families.items():
        lines.append(f"# TYPE {family} {kind}")
        name = family + ("_total" if kind == "counter" else "")
        for labels, samples in series:
            sel = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines.extend(f"{name}{{{sel}}} {v!r} {t}" for t, v in samples)
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass(frozen=True)
class Served:
    """A Prometheus serving the backfilled series over TLS, and the CA that signed it."""

    url: str
    ca: Path


def tls_pair(d: Path) -> Path:
    """A throwaway self-signed certificate for 127.0.0.1 (key.pem, cert.pem in ``d``)."""
    made = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"), "-days", "2",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return d / "cert.pem"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if PROMETHEUS is None or PROMTOOL is None:
        pytest.skip(NO_PROMETHEUS)
    if shutil.which("openssl") is None:
        pytest.skip("needs openssl for the server's throwaway TLS certificate")
    d = tmp_path_factory.mktemp("prom")
    ca = tls_pair(d)
    (d / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {d / 'cert.pem'}\n  key_file: {d / 'key.pem'}\n"
    )
    openmetrics(d / "series.om")
    data = d / "data"
    made = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(d / "series.om"), str(data)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    (d / "prometheus.yml").write_text("global: {}\nscrape_configs: []\n")
    port = free_port()
    log = (d / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={d / 'prometheus.yml'}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            f"--web.config.file={d / 'web.yml'}",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"prometheus exited {proc.returncode}: {(d / 'prometheus.log').read_text()[-2000:]}"
                )
            try:
                if (
                    httpx.get(
                        url + "/-/ready", timeout=2, verify=ssl.create_default_context(cafile=ca)
                    ).status_code
                    == 200
                ):
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"prometheus not ready in 60 s: {(d / 'prometheus.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        yield Served(url, ca)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        log.close()


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def capture(prom: Served | str, out: Path, *extra: str) -> tuple[int, str]:
    where = ["--prometheus", prom] if isinstance(prom, str) else [
        "--prometheus", prom.url, "--ca-file", str(prom.ca)
    ]  # fmt: skip
    r = runner.invoke(
        app,
        ["scenario", "capture", *where, "--out", str(out),
         "--start", str(START), "--end", str(END), "--step", "60s", *extra],
    )  # fmt: skip
    return r.exit_code, r.output


def test_capture_from_prometheus_replays_the_series(prom: Served, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "defaults": {"nic_capacity": "25Gbit"},
                "hosts": [
                    {"name": "hv1", "vf_pool": 1},
                    {"name": "edge", "instance": "10.0.0.2:9177", "vf_pool": 4},
                    {"name": "spare"},
                ],
            }
        )
    )
    out = tmp_path / "mine.yaml"
    code, output = capture(
        prom, out, "--inventory", str(inventory), "--vf-pool", "2",
        "--selector", 'job="libvirt"', "--compare", "default,dsr-iov",
    )  # fmt: skip
    assert code == 0, output
    assert "4 VM(s) on 3 host(s), 60 steps of 60 s" in output, output
    scn = load_scenario(out)  # what `sova validate` runs
    hosts = {h.name: h for h in scn.hosts}
    assert {n: sorted(h.vms) for n, h in hosts.items()} == {
        "hv1": ["batch", "web"], "edge": ["db", "mover"], "spare": [],
    }  # fmt: skip
    assert (hosts["hv1"].nic.vf_pool, hosts["edge"].nic.vf_pool, hosts["spare"].nic.vf_pool) == (
        1,
        4,
        2,
    )
    assert all(h.nic.capacity == 25e9 for h in scn.hosts)
    vms = {v.name: v for v in scn.vms}
    assert (vms["web"].vcpus, vms["batch"].vcpus, vms["db"].vcpus) == (4, 2, 1)
    assert vms["db"].memory == 16 * 2**30

    rows = read_csv(out.with_suffix(".csv"))
    assert len(rows) == 60
    for r in rows:
        t = float(r["time_s"])  # the row is the step [t, t + 60) of the window
        # rx + tx over both of web's interfaces: 100 + 10 + 5, then 800 + 10 + 5
        want = {
            "web": 115.0 if t < 1800 else 815.0,
            "batch": 300.0 if 600 <= t < 1800 else 0.0,
            "db": 70.0,  # through its counters' reset at minute 40
            "mover": 40.0,  # on hv1, then on edge: one VM, no gap at the migration
            "web.cpu": 0.25 if t < 1800 else 0.75,  # 1 then 3 of 4 vCPUs
            "batch.cpu": 1.0,
            "db.cpu": 0.1,
        }
        for col, w in want.items():
            assert float(r[col]) == pytest.approx(w, rel=1e-3, abs=1e-3), (t, col, r)

    sim = tmp_path / "sim"
    r = runner.invoke(
        app, ["simulate", str(out), "--out", str(sim), "--no-progress", "-p", "default"]
    )
    assert r.exit_code == 0, r.output
    timeline = read_csv(sim / "timeline.csv")

    def mean_of(column: str, vm: str, a: float, b: float) -> float:
        got = [float(x[column]) for x in timeline if x["vm"] == vm and a < float(x["time_s"]) <= b]
        assert got, (vm, a, b)
        return sum(got) / len(got)

    # Samples at t show the period before t; the first and last minute of a phase are
    # left out. Rate jitter (lognormal, sigma 0.05) averages out over 50+ periods. Guest
    # CPU is the captured busy share plus what sending costs the guest (< 0.02 here) with
    # the profile's 3 % jitter; batch's two busy vCPUs of two stay at 1.
    for vm, a, b, mbps, cpu in (
        ("web", 60, 1740, 115.0, 0.25),
        ("web", 1860, 3600, 815.0, 0.75),
        ("batch", 60, 540, 0.0, 1.0),
        ("batch", 660, 1740, 300.0, 1.0),
        ("batch", 1860, 3600, 0.0, 1.0),
        ("db", 60, 3600, 70.0, 0.1),
    ):
        assert mean_of("offered_mbps", vm, a, b) == pytest.approx(mbps, rel=0.05, abs=0.5), (vm, a)
        assert mean_of("cpu_usage", vm, a, b) == pytest.approx(cpu, abs=0.03), (vm, a)


def test_capture_from_the_node_exporter(prom: Served, tmp_path: Path) -> None:
    """The documented node-exporter options: the VMs are the tap devices, what a tap
    receives its VM sent; one device name on two hosts at once is two VMs."""
    out = tmp_path / "node.yaml"
    code, output = capture(
        prom, out, "--vm-label", "device", "--selector", 'device=~"vnet.*"',
        "--tx-metric", "node_network_receive_bytes_total",
        "--rx-metric", "node_network_transmit_bytes_total",
        "--cpu-metric", "", "--vcpus-metric", "", "--memory-metric", "",
    )  # fmt: skip
    assert code == 0, output
    rows = read_csv(out.with_suffix(".csv"))
    assert list(rows[0]) == ["time_s", "vnet0@hv1", "vnet0@hv2"]  # eno1 is not a VM
    for r in rows:
        t = float(r["time_s"])
        assert float(r["vnet0@hv1"]) == pytest.approx(110.0 if t < 1800 else 810.0, rel=1e-3)
        assert float(r["vnet0@hv2"]) == pytest.approx(70.0, rel=1e-3)
    assert {h.name: h.vms for h in load_scenario(out).hosts} == {
        "hv1": ["vnet0@hv1"], "hv2": ["vnet0@hv2"],
    }  # fmt: skip


def test_capture_without_selector_counts_every_job(prom: Served, tmp_path: Path) -> None:
    out = tmp_path / "all.yaml"
    code, output = capture(prom, out, "--direction", "tx", "--cpu-metric", "")
    assert code == 0, output
    rows = read_csv(out.with_suffix(".csv"))
    # the other job's 5,000 Mbit/s of web is summed in; tx only; no CPU columns asked for
    assert float(rows[0]["web"]) == pytest.approx(5100.0, rel=1e-3)
    assert float(rows[0]["db"]) == pytest.approx(20.0, rel=1e-3)
    assert not any(k.endswith(".cpu") for k in rows[0])
    # no inventory: the hosts are the instance labels without their port
    assert {h.name for h in load_scenario(out).hosts} == {"hv1", "10.0.0.2"}


def test_capture_names_what_prometheus_did_not_have(prom: Served, tmp_path: Path) -> None:
    out = tmp_path / "none.yaml"
    code, output = capture(prom, out, "--selector", 'job="nope"')
    assert code == 2, output
    assert "no series of libvirt_domain_interface_stats_receive_bytes_total" in output
    assert not out.exists()
    code, output = capture(prom, out, "--tx-metric", "rate(")
    assert code == 3 and "HTTP 400" in output and output.count("\n") == 1, output
    # TLS: a server whose CA was not given is not trusted
    code, output = capture(prom.url, out)
    assert code == 3 and "CERTIFICATE_VERIFY_FAILED" in output and output.count("\n") == 1, output


def test_unreachable_prometheus_is_one_line_and_exit_3(tmp_path: Path) -> None:
    out = tmp_path / "x.yaml"
    code, output = capture(f"http://127.0.0.1:{free_port()}", out, "--timeout", "5")
    assert code == 3, output
    assert output.startswith("error: Prometheus http://127.0.0.1:") and output.count("\n") == 1
    assert not out.exists()


DOC = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
DOC_URL, DOC_CA, DOC_TOKEN = (
    "https://prometheus.example:9090",
    "/etc/sova/prometheus-ca.pem",
    "/etc/sova/prometheus.token",
)
DOC_START, DOC_END = "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"


def documented_replay() -> tuple[str, list[tuple[str, str]]]:
    """docs/operations.md#replay-your-cluster: the inventory, and the console block's
    commands (continuations joined) with the output shown under each."""
    lines = DOC.read_text().splitlines()
    at = lines.index("# inventory.yaml")
    inventory = "\n".join(lines[at : lines.index("```", at)]) + "\n"
    mark = next(
        i
        for i, x in enumerate(lines)
        if x.startswith("<!-- illustrative") and Path(__file__).name in x
    )
    assert lines[mark + 1] == "```console"
    body = lines[mark + 2 : lines.index("```", mark + 2)]
    cmds: list[tuple[str, str]] = []
    for line in body:
        if line.startswith("$ "):
            cmds.append((line[2:], ""))
        elif cmds and cmds[-1][0].endswith("\\"):
            cmds[-1] = (cmds[-1][0][:-1].rstrip() + " " + line.strip(), "")
        elif cmds:
            cmds[-1] = (cmds[-1][0], (cmds[-1][1] + "\n" + line).lstrip("\n"))
    return inventory, cmds


def test_the_documented_capture_validate_simulate_run(prom: Served, tmp_path: Path) -> None:
    """The operator's lines in docs/operations.md, verbatim but for the docs' example server,
    CA, token file and dates, which become this test's."""
    import sys
    from datetime import UTC, datetime

    inventory, cmds = documented_replay()
    assert [c.split()[1] for c in (cmd for cmd, _ in cmds)] == ["scenario", "validate", "simulate"]
    (tmp_path / "inventory.yaml").write_text(inventory)
    (tmp_path / "token").write_text("not-checked-by-this-prometheus\n")
    iso = {t: datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") for t in (START, END)}
    swap = {
        DOC_URL: prom.url,
        DOC_CA: str(prom.ca),
        DOC_TOKEN: str(tmp_path / "token"),
        DOC_START: iso[START],
        DOC_END: iso[END],
    }
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "MPLBACKEND": "Agg",
        "HOME": str(tmp_path),
    }
    for cmd, shown in cmds:
        for a, b in swap.items():
            assert a in cmd or cmd.split()[1] != "scenario", a
            cmd = cmd.replace(a, b)
        p = subprocess.run(
            ["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert p.returncode == 0, (cmd, p.stdout, p.stderr)
        got = p.stdout.strip()
        if cmd.split()[1] == "simulate":
            # policies change what they decide; the lines must name the same policies
            def names(text: str) -> list[str]:
                return [x.split(":")[0].strip() for x in text.splitlines()]

            assert names(got) == names(shown), (got, shown)
        else:
            assert got == shown, (cmd, got)
