"""A QEMU install tree of empty pieces (its binary a file, the rest directories) for the
lab's QEMU tests: a prefix to lay over, or the system it is laid over."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from sova.lab.qemu import BINARY


def qemu_tree(top: Path, pieces: Iterable[str]) -> Path:
    """``top`` with each piece (paths as in ``sova.lab.qemu.OVERLAID``) made under it."""
    for rel in pieces:
        (top / rel).parent.mkdir(parents=True, exist_ok=True)
        if rel == BINARY:
            (top / rel).write_text("#!/bin/sh\n")
        else:
            (top / rel).mkdir()
    return top
