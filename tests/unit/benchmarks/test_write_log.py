"""How the benches count status writes per object (bench/admin.py WriteLog)."""

from __future__ import annotations

from typing import Any

from bench.admin import WriteLog


def obj(name: str, phase: str, *stamps: tuple[str, str]) -> dict[str, Any]:
    fields = [
        {"manager": manager, "operation": "Update", "subresource": "status", "time": at}
        for manager, at in stamps
    ]
    fields.append({"manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:09Z"})
    return {
        "metadata": {"name": name, "namespace": "ns", "managedFields": fields},
        "status": {"phase": phase},
    }


def test_writes_by_one_writer_in_one_server_second_are_counted_per_object() -> None:
    log = WriteLog()
    log.see("VCJob", obj("a", "Pending"))
    log.see("VCJob", obj("a", "Inqueue", ("jobs", "2026-01-01T00:00:01Z")))
    log.see("VCJob", obj("a", "Running", ("jobs", "2026-01-01T00:00:01Z")))
    log.see("VCJob", obj("a", "Running", ("jobs", "2026-01-01T00:00:01Z")))  # no change
    log.see("VCJob", obj("a", "Done", ("jobs", "2026-01-01T00:00:02Z")))
    log.see("VCJob", obj("b", "Pending"))
    log.see(
        "VCJob",
        obj("b", "Running", ("jobs", "2026-01-01T00:00:01Z"), ("events", "2026-01-01T00:00:03Z")),
    )
    row = log.summary()["VCJob"]
    assert (row["writes"], row["objects"]) == (4, 2)
    assert row["max_per_second"] == 2  # a's two writes stamped 00:00:01
