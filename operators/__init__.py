"""Sluice: Kubernetes operators that gang-schedule AI training jobs on shared GPU clusters."""

__version__ = "0.1.0"
