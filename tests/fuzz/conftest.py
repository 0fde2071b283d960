"""The full mutation tier runs only when selected: ``pytest -m full_fuzz tests/fuzz``."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "full_fuzz: 500 mutations per shipped scenario (about an hour on 2 cores)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "full_fuzz" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="full mutation tier: select it with -m full_fuzz")
    for item in items:
        if "full_fuzz" in item.keywords:
            item.add_marker(skip)
