"""How Sova is installed: the distribution's name and the extra each role needs.

The command and the import package are ``sova``; the distribution on PyPI is
``sova-sriov`` because ``sova`` there is an unrelated project. Every install hint the
program prints comes from here, so a rename touches one line.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

DIST = "sova-sriov"

# Top-level module → the extra that provides it, for "missing dependency" hints.
EXTRA_OF_MODULE = {
    "httpx": "agent",
    "prometheus_client": "agent",
    "libvirt": "agent",
    "pyroute2": "agent",
    "fastapi": "manager",
    "uvicorn": "manager",
    "sqlalchemy": "manager",
    "alembic": "manager",
    "psycopg": "manager",
    "numpy": "sim",
    "matplotlib": "sim",
    "dask": "distributed",
    "typer": "cli",
    "rich": "cli",
    "yaml": "cli",
    "distributed": "distributed",
}


class MissingExtra(ModuleNotFoundError):
    """A part of Sova imported without the extra that carries its dependencies."""


def require_extra(package: str, extra: str, modules: Iterable[str]) -> None:
    """Raise :class:`MissingExtra`, one line naming ``extra``, unless ``modules`` import.

    Called at the top of ``sova.sim``, ``sova.testbed`` and ``sova.lab``: their code ships in
    every wheel, but runs only with its extra; without it, ``import sova.sim`` says what to
    install instead of failing on numpy somewhere inside.
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtra(
            f"{package} needs {', '.join(missing)}: {install_hint(extra)}", name=missing[0]
        )


def install_hint(extra: str) -> str:
    """The command that installs ``extra``, quoted for a POSIX shell."""
    return f"pip install '{DIST}[{extra}]'"


def missing_module_hint(module: str | None) -> str | None:
    """The install command for a missing top-level module, or None if it is not ours."""
    extra = EXTRA_OF_MODULE.get((module or "").split(".")[0])
    return None if extra is None else install_hint(extra)


def missing_extras(extras: Iterable[str]) -> list[str]:
    """Those of ``extras`` whose modules are not importable here, in the order given.

    Checked before a command that starts processes needing them (``sova demo``), so a
    host with one role's extra gets one line saying what to install, not a child process
    dying later.
    """
    wanted = list(extras)
    return [
        extra
        for extra in wanted
        if any(
            importlib.util.find_spec(module) is None
            for module, of in EXTRA_OF_MODULE.items()
            if of == extra
        )
    ]
