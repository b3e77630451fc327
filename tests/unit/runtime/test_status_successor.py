"""A PodGroup status write lands on the group it was computed for or nowhere (#25): a group
deleted and created again under its name (a job re-applied) must not get the late write of the
one before it. The writes are JSON patches testing the group's uid (`status_patch`); they keep
what the merge patches did: one request per write, and a None removes the field."""

from __future__ import annotations

from typing import Any, cast

import pytest

from operators.controllers.scheduler_status import StatusWriter
from operators.runtime import status_patch
from operators.runtime.client import ApiError, KubeClient
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_cache import Harness
from .test_status import _IDLE, _MARK, _REVERT, StoringApi, _victim_and_preemptor

PATH = "/apis/scheduling.sluice.dev/v1alpha1/namespaces/ns/sluicepodgroups/g"


class CountingApi(StoringApi):
    def __init__(self, statuses: dict[str, dict[str, Any]]) -> None:
        super().__init__(statuses)
        self.requests: list[str] = []

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.requests.append("PATCH")
        return await super().json_patch(path, ops)

    async def get(self, path: str) -> dict[str, Any]:
        self.requests.append("GET")
        return await super().get(path)


async def test_a_late_write_for_a_deleted_group_does_not_land_on_its_same_name_successor() -> None:
    """The victim is marked WillEvict; before the write reaches the API server the group is
    deleted and created again (its job re-applied). A merge patch addressed by name put the
    old group's mark, counts and Running phase on the new one, which no session had admitted.
    The write is dropped as the merge patch's 404 was ("gone": the group's SOLE_FIELDS
    bookkeeping forgotten)."""
    _, api, writer = _victim_and_preemptor(CountingApi)
    writer.write_groups(SessionResult(decisions=(_MARK,), explanations={}), 1.0, "t1")
    successor = {"metadata": {"uid": "pg-victim-2"}, "status": {"phase": "Pending"}}
    api.stored["victim"] = successor  # replaced while the write waits for its turn
    await writer.drain()
    assert api.stored["victim"] == successor  # nothing of the old group's status
    assert "pg-victim" not in writer._sent
    assert api.stored["urgent"]["status"]["phase"] == "Inqueue"  # the other write landed


async def test_a_write_for_the_group_itself_is_one_request_whole_or_field_by_field() -> None:
    """The write count stays what it was: a group the watch shows without a status (as
    created) gets it whole in one request; one with a status, field by field in one request;
    the fields other writers own stay."""
    h = Harness()
    h.group(podgroup("new", min_member=1))  # no status yet
    h.group(podgroup("old", min_member=1, status={"phase": "Inqueue", "succeeded": 0}))
    h.pod(pod("old-0", group="old"))
    api = CountingApi({"old": {"phase": "Inqueue", "succeeded": 0}})
    api.stored["new"] = {"metadata": {"uid": "pg-new"}}
    writer = StatusWriter(cast(KubeClient, api), h.cache, SchedulerMetrics(), concurrency=2)
    writer.write_groups(_IDLE, 1.0, "t1")
    await writer.drain()
    assert api.requests == ["PATCH", "PATCH"]
    assert api.stored["new"]["status"]["phase"] == "Pending"
    assert "preemption" not in api.stored["new"]["status"]  # a None is left out of a whole one
    assert api.stored["old"]["status"]["succeeded"] == 0  # the podgroup operator's field
    assert api.stored["old"]["status"]["pending"] == 1


async def test_a_revoked_mark_is_removed_in_the_one_write() -> None:
    """`preemption: None` removes the mark (the merge patch's null): without the `add` before
    the `remove`, the patch would be refused where the mark is missing, and where it is there
    the revoke would need a second request."""
    h, api, writer = _victim_and_preemptor(CountingApi)
    writer.write_groups(SessionResult(decisions=(_MARK,), explanations={}), 1.0, "t1")
    await writer.drain()
    assert api.stored["victim"]["status"]["preemption"]["role"] == "WillEvict"
    h.group(podgroup("victim", min_member=2, status=dict(api.stored["victim"]["status"])))
    assert isinstance(api, CountingApi)
    api.requests.clear()
    writer.write_groups(SessionResult(decisions=(_REVERT,), explanations={}), 2.0, "t2")
    await writer.drain()
    assert "preemption" not in api.stored["victim"]["status"]
    assert api.requests == ["PATCH", "PATCH"]  # one each (the revoke names both), no read


@pytest.mark.parametrize("there", [True, False], ids=["present", "missing"])
async def test_a_field_set_to_none_is_removed_whether_or_not_it_exists(there: bool) -> None:
    """A JSON patch `remove` of a missing member refuses the whole patch, and the schema may
    refuse a null: without the `add` first, the write of a revoke the watch had not shown
    yet to be needed (the mark never landed) would fail."""
    status: dict[str, Any] = {"phase": "Running", "succeeded": 1}
    if there:
        status["preemption"] = {"role": "WillEvict"}
    api = CountingApi({"g": status})
    api.stored["g"]["metadata"]["uid"] = "u1"
    fields = {"preemption": None, "running": 2}
    assert await status_patch.write_status(cast(KubeClient, api), PATH, "u1", fields)
    assert api.stored["g"]["status"] == {"phase": "Running", "succeeded": 1, "running": 2}
    assert api.requests == ["PATCH"]


async def test_a_whole_status_leaves_out_the_fields_set_to_none() -> None:
    api = CountingApi({})
    api.stored["g"] = {"metadata": {"uid": "u1"}}
    fields = {"phase": "Pending", "preemption": None}
    assert await status_patch.write_status(cast(KubeClient, api), PATH, "u1", fields, whole=True)
    assert api.stored["g"]["status"] == {"phase": "Pending"}


async def test_a_write_refused_for_what_it_says_still_raises() -> None:
    """The read that tells gone from refused does not take a schema refusal for gone."""

    class Invalid(CountingApi):
        async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
            self.requests.append("PATCH")
            raise ApiError(422, {"reason": "Invalid"}, "PATCH", path)

    api = Invalid({"g": {"phase": "Running"}})
    api.stored["g"]["metadata"]["uid"] = "u1"
    with pytest.raises(ApiError):
        await status_patch.write_status(cast(KubeClient, api), PATH, "u1", {"preemption": None})
    assert api.requests == ["PATCH", "GET"]
