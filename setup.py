"""Build hook: the wheel carries the repository's ``scenarios/`` tree as ``sova/_scenarios``.

Everything else is declared in pyproject.toml. The tree stays at the top of the repository
(documentation, tests and tools refer to ``scenarios/…``); copying it at build time ships
every scenario, profile and trace without listing them, and ``sova.shipped`` finds them
through importlib.resources after installation.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

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


setup(cmdclass={"build_py": BuildWithScenarios})
