"""The simulated cluster (``sova simulate``, the demo's world): needs the ``sim`` extra."""

from sova.install import require_extra

require_extra(__name__, "sim", ("numpy", "matplotlib"))
