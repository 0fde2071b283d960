"""Who performs a migration or a fast-path change: the host itself, or the cloud's orchestrator.

The agents and the manager decide as everywhere else; this package only chooses the hands.
``libvirt`` (the default) lets the host driver act (``migrateToURI3``, VF hot-plug through
libvirt), which is right for a cluster without an orchestrator. ``openstack`` acts through
Nova, Neutron and Placement, which own the placement, the PCI claims and the port bindings of
an OpenStack cloud; acting behind their backs would corrupt their view of the cloud.
"""

from sova.orchestrator.base import Actuator, CloudConfigError, OrchestratedDriver

__all__ = ["Actuator", "CloudConfigError", "OrchestratedDriver"]
