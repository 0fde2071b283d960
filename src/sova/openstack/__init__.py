"""OpenStack integrations that need OpenStack code installed (the Watcher strategy)."""
