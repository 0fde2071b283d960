"""Schema revisions, oldest first; each one only moves the schema forward or back."""
