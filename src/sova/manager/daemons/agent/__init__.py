"""The agent daemon (``sova agent``): HostAgent on a host's driver, and its link to the manager."""
