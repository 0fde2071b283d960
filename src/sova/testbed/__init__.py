"""The network-namespace testbed: real packets, HTB, veth (``sova testbed``)."""

from sova.install import require_extra

require_extra(__name__, "testbed", ("numpy", "matplotlib", "pyroute2"))
