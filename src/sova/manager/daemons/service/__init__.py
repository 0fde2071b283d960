"""The manager daemon (``sova manager``): intake, ledger, rounds, operator desk, standby,
the store and the HTTP API, around ManagerCore (``sova.manager.decisions``)."""
