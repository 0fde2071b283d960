"""Build hooks: the compiled policy core, and the ``scenarios/`` tree as ``sova/_scenarios``.

Everything else is declared in pyproject.toml.

The core (``rust/``, docs/design.md "The compiled core") is built by setuptools-rust into
``sova/policy/_core.abi3.so``: an abi3 module, so one wheel serves every CPython >= 3.11.
It is always a release build, editable installs included, because the simulator runs its
kernels every tick and a debug build is an order of magnitude slower. The tree stays at the top of the repository
(documentation, tests and tools refer to ``scenarios/…``); copying it at build time ships
every scenario, profile and trace without listing them, and ``sova.shipped`` finds them
through importlib.resources after installation.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools_rust import Binding, RustExtension

SHIPPED = ("*.yaml", "*.csv", "*.xml", "*.md")


class BuildWithScenarios(build_py):
    def run(self) -> None:
        super().run()
        src = Path(__file__).resolve().parent / "scenarios"
        if self.editable_mode or not src.is_dir():
            return  # editable installs read the checkout's scenarios/ directly
        dst = Path(self.build_lib) / "sova" / "_scenarios"
        if dst.exists():
            shutil.rmtree(dst)
        for pattern in SHIPPED:
            for f in src.rglob(pattern):
                target = dst / f.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(f, target)


setup(
    cmdclass={"build_py": BuildWithScenarios},
    # the wheel's tag says abi3 (cp311-abi3-<platform>): pyo3's abi3-py311 feature
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
    rust_extensions=[
        RustExtension(
            "sova.policy._core",
            path="rust/sova-py/Cargo.toml",
            binding=Binding.PyO3,
            # abi3 in every build, editable ones too (named _core.abi3.so), so a checkout's
            # src/ on another CPython >= 3.11's path (the OpenStack tier) imports it;
            # "auto" names an editable build for the building interpreter only
            py_limited_api=True,
            debug=False,
            # a wheel must not need the lock's crates to be fetched again differently
            args=["--locked"],
        )
    ],
)
