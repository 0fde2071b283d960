"""What the manager decides: ManagerCore, its planning pipeline and their rules.

Pure of I/O, in the layer of the agent's loop: the simulator, the daemons' service and
Watcher's plug-in all run it (docs/architecture.md).
"""
