"""The report wire format: its size budget and the exactness of the reduced VM list."""

from __future__ import annotations

import string

from hypothesis import given, settings
from hypothesis import strategies as st

from sova.manager.daemons.schema import (
    REPORT_BUDGET_BYTES,
    Report,
    build_report,
    encode,
    select_candidates,
)
from sova.policy.hotspot import RESOURCES, Utilisation, VMLoad, choose_vm

GIB = 2**30


def test_a_realistic_report_fits_the_304_byte_budget() -> None:
    # An OpenStack-style host: libvirt names "instance-0000xxxx", 20 VMs, a busy afternoon.
    vms = {
        f"instance-{0x1A2B + i:08x}": VMLoad(
            Utilisation(
                0.013 * (i % 7) + 0.0123456, 0.0312 + 0.001 * i, 0.04 * (i % 5) + 0.0098765
            ),
            (2 + i % 3) * 2 * GIB,
        )
        for i in range(20)
    }
    r = build_report(
        1_234_567, 1_764_000_123.456, Utilisation(0.7312345, 0.6412, 0.8156789), vms, ack=98_765
    )
    body = encode(r)
    assert len(body) <= REPORT_BUDGET_BYTES, (len(body), body)
    # Long names leave room for 3 candidates: the per-resource best, which is all the
    # manager needs to choose exactly (see test below); the 4th (filler) was trimmed.
    assert len(r.vms) == 3
    assert Report.model_validate_json(body) == r
    print(f"report size: {len(body)} bytes for {len(r.vms)} candidate VMs")


def test_a_report_with_short_names_carries_the_default_four() -> None:
    vms = {
        f"vm-web-{i:02d}": VMLoad(Utilisation(0.0123 * i, 0.0456, 0.0402 * i), 2 * GIB)
        for i in range(12)
    }
    r = build_report(123_456, 1_764_000_000.1, Utilisation(0.52311, 0.31, 0.8113), vms, ack=17)
    assert len(r.vms) == 4 and len(encode(r)) <= REPORT_BUDGET_BYTES


def test_over_budget_reports_drop_filler_never_forced_candidates() -> None:
    # One VM per resource is the largest-MF VM with a share of it: those three are forced.
    vms = {
        "a": VMLoad(Utilisation(0.5, 0.0, 0.0), GIB),
        "b": VMLoad(Utilisation(0.0, 0.5, 0.0), GIB),
        "c": VMLoad(Utilisation(0.0, 0.0, 0.5), GIB),
    }
    for i in range(8):  # lower MF, long names: filler that cannot all fit
        vms["filler-" + "x" * 50 + str(i)] = VMLoad(Utilisation(0.01, 0.01, 0.01), GIB)
    r = build_report(1, 1.0, Utilisation(0.5, 0.5, 0.5), vms, k=8)
    assert len(encode(r)) <= REPORT_BUDGET_BYTES
    names = [e.name for e in r.vms]
    assert names[:3] == ["a", "b", "c"] and 3 < len(names) < 8


names = st.text(string.ascii_lowercase, min_size=1, max_size=6)
share = st.floats(0.0, 0.3)
loads = st.dictionaries(
    names,
    st.builds(
        lambda c, m, n, g, mig: VMLoad(Utilisation(c, m, n), g * GIB, migrating=mig),
        share,
        share,
        share,
        st.integers(1, 16),
        st.booleans(),
    ),
    min_size=1,
    max_size=12,
)
hot_sets = st.sets(st.sampled_from(RESOURCES), min_size=1)


@settings(max_examples=200, deadline=None)
@given(loads, hot_sets, st.integers(3, 6))
def test_the_manager_chooses_the_same_vm_from_the_reduced_list(vms, hot, k) -> None:  # type: ignore[no-untyped-def]
    reduced = {n: vms[n] for n in select_candidates(vms, k)}
    assert choose_vm(reduced, resources=hot) == choose_vm(vms, resources=hot)
