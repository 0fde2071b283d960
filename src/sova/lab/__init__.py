"""The hypervisor lab: two real libvirt daemons (HV1, HV2) on one machine, real QEMU guests.

The fourth world beside the simulator, the namespace testbed and production: ``sova lab
up|run|down`` builds it, and Sova's own ``LibvirtDriver`` acts on it. Everything the lab
makes is named with one prefix and lives under one directory, so ``down`` can remove it
even after a crash (``docs/lab.md``).
"""

from sova.install import require_extra

# libvirt is left out: its absence is reported where the lab opens a connection, and the
# lab's unit tests run without it.
require_extra(__name__, "lab", ("numpy", "matplotlib", "httpx", "fastapi"))
