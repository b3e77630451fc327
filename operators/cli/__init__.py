"""The `sluice` command and `kubectl sluice` plugin."""
