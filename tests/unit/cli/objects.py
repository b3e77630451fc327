"""API objects the golden-file tests render (as the API server returns them)."""

from __future__ import annotations

from typing import Any


def pool(name: str, status: dict[str, Any], **flags: bool) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"nodeSelector": {}, **flags}, "status": status}


POOLS = [
    pool(
        "gpu-pool",
        {
            "nodeCount": 4,
            "capacity": {"cpu": "256", "memory": "2Ti", "nvidia.com/gpu": "32", "pods": "440"},
            "allocatable": {
                "cpu": "192",
                "memory": "1536Gi",
                "nvidia.com/gpu": "24",
                "pods": "330",
            },
            "used": {"cpu": "48", "memory": "256Gi", "nvidia.com/gpu": "16", "pods": "6"},
            "shared": {"cpu": "8", "nvidia.com/gpu": "0", "pods": "1"},
            "pending": {"cpu": "16", "nvidia.com/gpu": "8", "pods": "2"},
        },
    ),
    pool(
        "cpu-pool",
        {
            "nodeCount": 2,
            "capacity": {"cpu": "64", "memory": "256Gi", "pods": "220"},
            "allocatable": {"cpu": "64", "memory": "256Gi", "pods": "220"},
            "used": {"cpu": "1500m", "memory": "1Gi", "pods": "3"},
        },
    ),
    pool(
        "masters",
        {"nodeCount": 1, "capacity": {"cpu": "8", "pods": "110"}},
        disablePreemption=True,
        disableBorrowing=True,
        disableSharing=True,
    ),
    pool("default", {}),  # the operator has not written it yet
]


def queue(
    name: str,
    parent: str | None = None,
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    valid: tuple[str, str] | None = ("True", "Valid"),
) -> dict[str, Any]:
    body_spec = dict(spec or {})
    if parent:
        body_spec["parent"] = parent
    body_status = dict(status or {})
    if valid is not None:
        body_status["conditions"] = [{"type": "Valid", "status": valid[0], "reason": valid[1]}]
    return {"metadata": {"name": name}, "spec": body_spec, "status": body_status}


QUEUES = [
    queue("root", status={"state": "Open", "allocated": {"nvidia.com/gpu": "16"}}),
    queue("default", "root", status={"state": "Open"}),
    queue(
        "research",
        None,
        {
            "weight": 4,
            "guarantee": {"cpu": "64", "nvidia.com/gpu": "16"},
            "capability": {"nvidia.com/gpu": "24"},
        },
        {
            "state": "Open",
            "deserved": {"cpu": "96", "nvidia.com/gpu": "20"},
            "allocated": {"cpu": "48", "memory": "256Gi", "nvidia.com/gpu": "16"},
            "running": 2,
            "pending": 1,
        },
    ),
    queue(
        "vision",
        "research",
        {"guarantee": {"nvidia.com/gpu": "8"}, "state": "Closed"},
        {"state": "Closing", "allocated": {"nvidia.com/gpu": "8"}, "running": 1},
    ),
    queue(
        "greedy",
        "research",
        {"guarantee": {"nvidia.com/gpu": "12"}},
        {"state": "Open"},
        valid=("False", "GuaranteeOvercommitted"),
    ),
    queue("orphan", "gone", {}, {"state": "Open"}, valid=("False", "ParentNotFound")),
]

EVENT = {
    "type": "Warning",
    "reason": "FailedScheduling",
    "message": "needs 8 GPUs; 4 free in pool gpu-pool",
    "lastTimestamp": "2026-11-23T10:00:00Z",
    "involvedObject": {"kind": "PodGroup", "name": "train"},
}


def member(name: str, phase: str = "Pending", node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {"scheduling.sluice.dev/pod-group": "train"}},
        "spec": {"schedulerName": "sluice", **({"nodeName": node} if node else {})},
        "status": {"phase": phase},
    }


WAITING_GROUP: dict[str, Any] = {
    "kind": "podgroup",
    "namespace": "ml",
    "name": "train",
    "groupName": "train",
    "podgroup": {
        "metadata": {"name": "train"},
        "spec": {"minMember": 4, "queue": "research", "pool": "gpu-pool"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {"type": "Enqueued", "status": "False", "reason": "NotEnoughResources"},
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NotEnoughResources",
                    "message": "needs 8 GPUs; 4 free in pool gpu-pool",
                },
            ],
        },
    },
    "pods": [member(f"train-{i}") for i in range(4)],
    "events": [EVENT],
}

RUNNING_JOB: dict[str, Any] = {
    "kind": "HybridJob",
    "namespace": "ml",
    "name": "train",
    "groupName": "train",
    "podgroup": {
        "metadata": {"name": "train"},
        "spec": {"minMember": 2, "queue": "research"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"}],
        },
    },
    "pods": [member("train-0", "Running", "n1"), member("train-1", "Running", "n2")],
    "events": [],
}

MISSING_GROUP_POD: dict[str, Any] = {
    "kind": "pod",
    "namespace": "ml",
    "name": "lost-0",
    "groupName": "lost",
    "pod": {
        "metadata": {"name": "lost-0", "annotations": {"scheduling.k8s.io/group-name": "lost"}},
        "spec": {"schedulerName": "sluice"},
        "status": {"phase": "Pending"},
    },
    "podgroup": None,
    "events": [],
}

PLAIN_POD: dict[str, Any] = {
    "kind": "pod",
    "namespace": "web",
    "name": "infer-7d9",
    "pod": {
        "metadata": {"name": "infer-7d9"},
        "spec": {"schedulerName": "sluice"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "needs 9 GPUs on one node; the largest node has 8",
                }
            ],
        },
    },
    "events": [],
}


def job_pod(group: str, name: str, phase: str = "Pending", node: str = "") -> dict[str, Any]:
    pod = member(name, phase, node)
    pod["metadata"]["annotations"] = {"scheduling.sluice.dev/pod-group": group}
    return pod


def job_group(
    name: str, pool: str, status: dict[str, Any], queue: str = "default"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"minMember": 1, "queue": queue, "pool": pool},
        "status": status,
    }


def event(reason: str, message: str, name: str, when: str = "10:00:00") -> dict[str, Any]:
    return {
        "type": "Warning",
        "reason": reason,
        "message": message,
        "lastTimestamp": f"2026-11-24T{when}Z",
        "involvedObject": {"kind": "PodGroup", "name": name},
    }


# Scenario 1: a sweep running partly at home, partly on gpu-pool's idle CPUs.
BORROWING_JOB: dict[str, Any] = {
    "kind": "VCJob",
    "namespace": "research",
    "name": "cpu-sweep",
    "groupName": "cpu-sweep",
    "podgroup": job_group(
        "cpu-sweep",
        "cpu-pool",
        {"phase": "Running", "conditions": [{"type": "Scheduled", "status": "True"}]},
    ),
    "pods": [
        job_pod("cpu-sweep", "cpu-sweep-trial-0", "Running", "cpu-0"),
        job_pod("cpu-sweep", "cpu-sweep-trial-1", "Running", "cpu-1"),
        job_pod("cpu-sweep", "cpu-sweep-trial-2", "Running", "gpu-0"),
        job_pod("cpu-sweep", "cpu-sweep-trial-3", "Running", "gpu-1"),
    ],
    "nodePools": {
        "cpu-0": "cpu-pool",
        "cpu-1": "cpu-pool",
        "gpu-0": "gpu-pool",
        "gpu-1": "gpu-pool",
    },
    "events": [],
}

# Scenario 1: a full pool that may not borrow.
BORROWING_DISABLED_GROUP: dict[str, Any] = {
    "kind": "VCJob",
    "namespace": "research",
    "name": "overflow",
    "groupName": "overflow",
    "podgroup": job_group(
        "overflow",
        "homebody-pool",
        {
            "phase": "Inqueue",
            "conditions": [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "BorrowingDisabled",
                    "message": "in pool 'homebody-pool': needs 2 pod(s) of task 'worker' with "
                    "cpu 1 each, only 0 fit; pool 'homebody-pool' disables borrowing: it waits "
                    "for room in its own pool",
                }
            ],
        },
    ),
    "pods": [job_pod("overflow", f"overflow-worker-{i}") for i in range(2)],
    "events": [],
}

# Scenario 3: a job reclaimed by another team, re-queued, now over its parent's capability.
RECLAIMED_JOB: dict[str, Any] = {
    "kind": "VCJob",
    "namespace": "team-a",
    "name": "a-0",
    "groupName": "a-0",
    "podgroup": job_group(
        "a-0",
        "lab-pool",
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "QuotaExceeded",
                    "message": "queue 'lab' would exceed its capability (GPUs 16): it holds "
                    "GPUs 16, needs GPUs 2 more",
                }
            ],
        },
        queue="team-a",
    ),
    "pods": [job_pod("a-0", "a-0-worker-0")],
    "events": [event("Reclaimed", "to make room for team-b/b-train", "a-0")],
}

# Scenario 6: both sides of a delayed preemption.
WILL_EVICT_JOB: dict[str, Any] = {
    "kind": "VCJob",
    "namespace": "research",
    "name": "nightly-eval",
    "groupName": "nightly-eval",
    "podgroup": job_group(
        "nightly-eval",
        "gpu-pool",
        {
            "phase": "Running",
            "conditions": [{"type": "WillEvict", "status": "True", "reason": "DelayedPreemption"}],
            "preemption": {
                "role": "WillEvict",
                "deadline": "2026-11-24T10:02:00Z",
                "peers": ["research/urgent"],
            },
        },
    ),
    "pods": [
        job_pod("nightly-eval", f"nightly-eval-worker-{i}", "Running", "gpu-0") for i in (0, 1)
    ],
    "nodePools": {"gpu-0": "gpu-pool"},
    "events": [
        event(
            "WillEvict",
            "will be preempted by research/urgent at 2026-11-24T10:02:00Z",
            "nightly-eval",
        )
    ],
}

PRIVILEGED_JOB: dict[str, Any] = {
    "kind": "VCJob",
    "namespace": "research",
    "name": "urgent",
    "groupName": "urgent",
    "podgroup": job_group(
        "urgent",
        "gpu-pool",
        {
            "phase": "Inqueue",
            "conditions": [
                {
                    "type": "Privileged",
                    "status": "True",
                    "reason": "DelayedPreemption",
                    "message": "until 2026-11-24T10:02:00Z; peers: research/nightly-eval",
                }
            ],
            "preemption": {
                "role": "Privileged",
                "deadline": "2026-11-24T10:02:00Z",
                "peers": ["research/nightly-eval"],
            },
        },
    ),
    "pods": [job_pod("urgent", "urgent-worker-0")],
    "events": [],
}

# #28 item 2: a non-preemptible job whose queue's deserved share is used up, though room is idle.
NON_PREEMPTIBLE_JOB: dict[str, Any] = {
    "kind": "VCJob",
    "namespace": "team-a",
    "name": "steady",
    "groupName": "steady",
    "podgroup": job_group(
        "steady",
        "gpu-pool",
        {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "Unschedulable",
                    "status": "True",
                    "reason": "NonPreemptibleOverQuota",
                    "message": "non-preemptible: runs only within its queues' deserved share; "
                    "queue 'team-a' holds GPUs 6 of GPUs 8 deserved, it needs GPUs 4",
                }
            ],
        },
        queue="team-a",
    ),
    "pods": [job_pod("steady", f"steady-worker-{i}") for i in (0, 1)],
    "events": [],
}
