"""The network-namespace testbed: real packets, HTB, veth (``sova testbed``)."""
