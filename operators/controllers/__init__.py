"""The kopf operators, one per concern, each runnable alone with `python -m operators <name>`."""
