"""The packaging tier: builds a wheel and installs each extra into a fresh venv (network to
PyPI, a few minutes). Selected only with ``-m packaging`` (scripts/ci-ops.sh runs it)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "packaging" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="packaging tier: run with -m packaging (scripts/ci-ops.sh)")
    for item in items:
        if item.get_closest_marker("packaging"):
            item.add_marker(skip)
