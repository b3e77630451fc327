"""The job core: pure logic shared by both job kinds (HybridJob and VCJob).

Like the scheduler core it does no I/O, reads no clock and imports neither kopf nor a Kubernetes
client: the `jobs` operator (operators/controllers/jobs*.py) observes the job, its pods and its
PodGroup, calls `reconcile`, and applies the `Plan` it returns. Unit tests drive it directly.

- `shape`: the kind-neutral shape of a job (tasks = VCJob tasks or HybridJob replica types);
- `observed`: what the operator saw (pods, pods gone since, the PodGroup);
- `tables`: the Job, Task and Replica state machines as tables;
- `policies`: lifecycle events and event/exit code -> action resolution;
- `pods`: the pods a job should have (names, labels, owner references, plugins, presets);
- `translog`: the ordered per-job transition log;
- `reconcile`: one level-based step from (shape, memory, observations, now) to a Plan.
"""
