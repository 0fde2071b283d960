"""Human units in config files: what each spelling means, and what is refused."""

from __future__ import annotations

import pytest

from sova.units import parse_duration, parse_rate, parse_size


@pytest.mark.parametrize(
    ("text", "bits_per_s"),
    [
        ("10Gbit", 10e9),
        ("150Mbit/s", 150e6),  # the "/s" is decoration: still bits
        ("64kbit", 64e3),
        ("1e9", 1e9),  # a bare number is bit/s, as machine-written files use
        (2_000_000, 2e6),
    ],
)
def test_rates_in_bits(text: object, bits_per_s: float) -> None:
    assert parse_rate(text) == pytest.approx(bits_per_s)


@pytest.mark.parametrize("text", ["100Mbps", "100MBps", "100mbps", "1Gbps", "64kbps", "10bps"])
def test_bps_is_refused_as_ambiguous(text: str) -> None:
    # tc reads "mbps" as megaBYTES per second; most people write it meaning megabits.
    # Guessing either way is off by 8x for half the operators, so it is refused, naming
    # both spellings that say what is meant.
    with pytest.raises(ValueError, match="ambiguous") as info:
        parse_rate(text)
    assert text in str(info.value)
    assert "bit" in str(info.value)


def test_sizes_and_durations() -> None:
    assert parse_size("512MiB") == 512 * 1024**2
    assert parse_size("1GB") == 1000**3
    assert parse_duration("200ms") == pytest.approx(0.2)
    assert parse_duration("15min") == 900.0


@pytest.mark.parametrize("bad", ["fast", "10 furlongs", "inf", True, None])
def test_bad_rates_name_the_value(bad: object) -> None:
    with pytest.raises(ValueError) as info:
        parse_rate(bad)
    assert repr(bad) in str(info.value) or str(bad) in str(info.value)
