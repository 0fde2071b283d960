"""Every XML the driver generates must be valid libvirt XML (virt-xml-validate)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from sova.driver.libvirt_xml import (
    DomainInfo,
    detach_xml_for,
    failover_readiness,
    parse_domain,
    pci_address,
    pci_attrs,
    vf_interface_xml,
)

VALIDATOR = shutil.which("virt-xml-validate")
needs_validator = pytest.mark.skipif(
    VALIDATOR is None or shutil.which("xmllint") is None,
    reason="virt-xml-validate or xmllint not found (Debian packages libvirt-clients and "
    "libxml2-utils; scripts/ci-setup-libvirt.sh installs them)",
)

VIRTIO = (
    "<interface type='bridge'><mac address='52:54:00:12:34:56'/><source bridge='br0'/>"
    "<model type='virtio'/><teaming type='persistent'/><alias name='ua-net0'/></interface>"
)


def wrap(devices: str) -> str:
    """A minimal q35 domain around generated devices: libvirt has no device-only schema."""
    return (
        "<domain type='kvm'><name>v</name><memory unit='MiB'>512</memory><vcpu>1</vcpu>"
        "<os><type arch='x86_64' machine='q35'>hvm</type></os>"
        f"<devices>{devices}</devices></domain>"
    )


def validate(tmp_path: Path, xml: str) -> subprocess.CompletedProcess[str]:
    f = tmp_path / "dom.xml"
    f.write_text(xml)
    assert VALIDATOR is not None
    return subprocess.run([VALIDATOR, str(f), "domain"], capture_output=True, text=True, timeout=30)


def generated() -> list[str]:
    attach = vf_interface_xml("52:54:00:12:34:56", "0000:03:10.4", "ua-net0")
    info = parse_domain(wrap(VIRTIO + attach))
    vf = info.sova_vf()
    assert vf is not None
    return [attach, detach_xml_for(vf)]


@needs_validator
@pytest.mark.parametrize("which", [0, 1], ids=["attach", "detach"])
def test_generated_device_xml_validates(tmp_path, which):
    res = validate(tmp_path, wrap(VIRTIO + generated()[which]))
    assert res.returncode == 0, res.stderr + res.stdout


@needs_validator
def test_validator_rejects_a_broken_teaming(tmp_path):
    # the control: without it a validator that accepts everything would pass the test above
    bad = generated()[0].replace("type='transient'", "type='sometimes'")
    res = validate(tmp_path, wrap(VIRTIO + bad))
    assert res.returncode != 0 and "validity error" in res.stderr, res.stderr


@needs_validator
def test_fixture_domains_validate(tmp_path):
    import xml.etree.ElementTree as ET

    node = ET.parse(Path(__file__).parent / "data" / "node.xml").getroot()
    doms = node.findall("domain")
    assert len(doms) == 5
    for d in doms:
        for el in list(d):
            if el.tag.startswith("{"):  # the test driver's own runstate element
                d.remove(el)
        res = validate(tmp_path, ET.tostring(d, encoding="unicode"))
        assert res.returncode == 0, res.stderr


def test_attach_xml_roundtrips_through_the_parser():
    attach = vf_interface_xml("52:54:00:12:34:56", "0000:03:10.4", "ua-net0")
    info = parse_domain(wrap(VIRTIO + attach))
    vf = info.sova_vf()
    assert vf is not None and vf.pci == "0000:03:10.4" and vf.mac == "52:54:00:12:34:56"
    assert vf.teaming_persistent == "ua-net0"
    assert pci_address(**{k: int(v, 16) for k, v in pci_attrs("0000:03:10.4").items()}) == (
        "0000:03:10.4"
    )


@pytest.mark.parametrize(
    ("devices", "machine", "reason"),
    [
        ("", "q35", "no virtio interface"),
        (VIRTIO.replace("<teaming type='persistent'/>", ""), "q35", "teaming"),
        (VIRTIO.replace("ua-net0", "net0"), "q35", "user alias"),
        (VIRTIO, "pc-i440fx-7.2", "not q35"),
    ],
)
def test_failover_readiness_reasons(devices, machine, reason):
    info = parse_domain(wrap(devices).replace("machine='q35'", f"machine='{machine}'"))
    r = failover_readiness(info)
    assert not r.ready and reason in r.reason
    assert failover_readiness(parse_domain(wrap(VIRTIO))).ready
    assert isinstance(info, DomainInfo)
