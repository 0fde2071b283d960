"""The control plane: ``sova manager`` and ``sova agent`` as daemons talking HTTP (issue 4).

The policy core (``sova.policy``), the agent loop (``sova.agent``) and the manager core
(``sova.manager.decisions``) decide; this package only carries their inputs and outputs between
processes, persists them, and exposes them to operators (metrics, OpenAPI, decision log).
Nothing in here makes a scheduling or migration decision of its own.
"""
