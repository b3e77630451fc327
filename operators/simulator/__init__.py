"""Trace-driven simulator: replays a cluster and a workload through the scheduler core.

The simulator never talks to an API server and never reads a clock: it builds
:class:`~operators.scheduler.snapshot.Snapshot` objects, runs
:func:`~operators.scheduler.engine.run_session` on them, and carries the decisions forward in
simulated time. So the decisions it reports are the ones the live scheduler would take.

* ``openb.py`` - the FGD paper's one-shot protocol on the Alibaba openb GPU trace;
* ``fragmentation.py`` - FGD's fragmentation measure, vectorised over nodes;
* ``policies.py`` - the paper's reference node scorers, plugged into the core's scorer hook;
* ``replay.py`` - jobs with arrivals and durations replayed in simulated time (gangs, queues);
* ``report.py`` - tables and plots for docs/quality.md.
"""
