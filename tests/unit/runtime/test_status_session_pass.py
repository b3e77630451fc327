"""A session's status pass visits only the groups something changed for
(StatusWriter.write_session): the dirty ones, those the session decided something for or
explains differently, and those whose last write failed; every group at the start of a term
and when the Pools changed."""

from __future__ import annotations

from typing import Any

import pytest

from operators.controllers.scheduler_status import StatusWriter
from operators.runtime.client import ApiError
from operators.runtime.metrics import SchedulerMetrics
from operators.scheduler import decisions as D
from operators.scheduler import snapshot as S
from operators.scheduler.session import SessionResult

from .factories import pod, podgroup
from .test_cache import Harness
from .test_status import StoringApi

QUOTA = D.Explanation("pg-moved", D.ReasonCode.QUOTA_EXCEEDED, "queue 'team-a' is at its share")
ROOM = D.Explanation("pg-moved", D.ReasonCode.NOT_ADMITTED, "needs 2 CPUs; 0 free")
QUIET = D.Explanation("pg-quiet", D.ReasonCode.NOT_ADMITTED, "needs 4 CPUs; 0 free")


class Refusing(StoringApi):
    """Refuses (times out) the writes of the groups named in `refuse`; names the groups it
    wrote, in order."""

    def __init__(self, statuses: dict[str, dict[str, Any]]) -> None:
        super().__init__(statuses)
        self.refuse: set[str] = set()
        self.written: list[str] = []

    async def json_patch(self, path: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        name = path.rsplit("/", 2)[-2]
        if name in self.refuse:
            raise TimeoutError
        self.written.append(name)
        return await super().json_patch(path, ops)


def _two_groups() -> tuple[Harness, Refusing, StatusWriter]:
    """Groups `moved` and `quiet`, both pending, written by a first session pass and echoed."""
    h = Harness()
    api = Refusing({"moved": {"phase": "Pending"}, "quiet": {"phase": "Pending"}})
    for name in ("moved", "quiet"):
        h.group(podgroup(name, min_member=2, status={"phase": "Pending"}))
        h.pod(pod(f"{name}-0", group=name))
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=2)
    return h, api, writer


async def _settled(h: Harness, api: Refusing, writer: StatusWriter, result: SessionResult) -> None:
    """A session pass, its writes answered and echoed, the cache's dirty set taken by it."""
    writer.write_session(result, 100.0, "t0", h.cache.dirty_groups)
    await writer.drain()
    for name, obj in api.stored.items():
        h.group(podgroup(name, min_member=2, status=obj["status"]))
    h.cache.dirty_groups.clear()


def _stale_quiet(h: Harness, api: Refusing) -> None:
    """Put an outdated status into `quiet`'s record without telling anyone (no dirty mark):
    a pass that visits `quiet` writes it, one that does not leaves it as it is."""
    h.group(podgroup("quiet", min_member=2, status={"phase": "Pending"}))
    h.cache.dirty_groups.clear()
    api.written.clear()


def _reason(api: Refusing, name: str) -> str:
    conds = {c["type"]: c for c in api.stored[name]["status"].get("conditions", [])}
    return str(conds.get("Unschedulable", {}).get("reason", ""))


@pytest.mark.parametrize("change", ["explained", "no-longer-explained", "phase", "mark"])
async def test_a_session_pass_writes_what_the_session_changed_and_visits_nothing_else(
    change: str,
) -> None:
    h, api, writer = _two_groups()
    await _settled(h, api, writer, SessionResult((), {"pg-moved": QUOTA, "pg-quiet": QUIET}))
    assert _reason(api, "moved") == "QuotaExceeded"
    before = dict(api.stored["moved"]["status"])
    _stale_quiet(h, api)

    explanations: dict[str, D.Explanation] = {"pg-moved": QUOTA, "pg-quiet": QUIET}
    decisions: tuple[D.Decision, ...] = ()
    if change == "explained":
        explanations["pg-moved"] = ROOM
    elif change == "no-longer-explained":
        del explanations["pg-moved"]
    elif change == "phase":
        decisions = (D.SetGroupPhase("pg-moved", S.GroupPhase.INQUEUE),)
    else:
        decisions = (D.MarkWillEvict(victim="pg-moved", preemptor="pg-quiet", deadline=1.8e9),)
    result = SessionResult(decisions, dict(explanations))
    writer.write_session(result, 101.0, "t1", set())
    await writer.drain()

    assert api.written == ["moved"]
    assert api.stored["moved"]["status"] != before
    if change == "explained":
        assert _reason(api, "moved") == "NotEnoughResources"
    # `quiet`: the same explanation, no decision, nothing dirty: not visited, so its outdated
    # record went unnoticed, which a pass over every group would have written.
    writer.write_groups(result, 102.0, "t2")
    await writer.drain()
    assert "quiet" in api.written[1:]


async def test_the_dirty_groups_are_visited() -> None:
    h, api, writer = _two_groups()
    same = SessionResult((), {"pg-moved": QUOTA, "pg-quiet": QUIET})
    await _settled(h, api, writer, same)
    api.written.clear()
    h.pod(pod("quiet-1", group="quiet"))  # its members moved: dirty
    writer.write_session(same, 101.0, "t1", h.cache.dirty_groups)
    await writer.drain()
    assert api.written == ["quiet"]
    assert api.stored["quiet"]["status"]["pending"] == 2


async def test_a_failed_write_is_sent_again_by_the_next_session_pass() -> None:
    h, api, writer = _two_groups()
    api.refuse = {"moved"}
    first = SessionResult((), {"pg-moved": QUOTA, "pg-quiet": QUIET})
    writer.write_session(first, 100.0, "t0", set(h.cache.dirty_groups))
    await writer.drain()
    assert "conditions" not in api.stored["moved"]["status"]
    h.cache.dirty_groups.clear()
    api.refuse = set()
    api.written.clear()
    writer.write_session(first, 101.0, "t1", set())  # nothing changed but the failure
    await writer.drain()
    assert api.written == ["moved"]
    assert _reason(api, "moved") == "QuotaExceeded"


@pytest.mark.parametrize("why", ["new-term", "pool-created"])
async def test_every_group_is_visited_in_a_new_term_and_when_the_pools_change(why: str) -> None:
    h, api, writer = _two_groups()
    same = SessionResult((), {"pg-moved": QUOTA, "pg-quiet": QUIET})
    await _settled(h, api, writer, same)
    _stale_quiet(h, api)
    if why == "new-term":
        writer.cancel()  # the lease was lost; whatever comes next starts from the API's view
    else:
        h.cache.on_pool("ADDED", ("", "gpu"), S.Pool(name="gpu"), None)
    writer.write_session(same, 101.0, "t1", set())
    await writer.drain()
    assert api.written == ["quiet"]  # visited: its status written back


async def test_bookkeeping_of_deleted_groups_is_forgotten_without_a_full_pass() -> None:
    h = Harness()
    names = [f"g{i}" for i in range(300)]
    api = StoringApi({n: {"phase": "Pending"} for n in names})
    for n in names:
        h.group(podgroup(n, status={"phase": "Pending"}))
    fake: Any = api
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=8)
    writer.write_session(SessionResult((), {}), 100.0, "t0", set())
    await writer.drain()
    h.pod(pod("p"))
    # plain pods' reason throttles: kept while the pod lives
    writer._last_write.update({"pod/uid-p": 100.0, "pod/uid-gone": 100.0})
    for n in names[:-1]:
        h.cache.on_podgroup("DELETED", ("ns", n), None, h.cache.groups[("ns", n)])
    writer.write_session(SessionResult((), {}), 101.0, "t1", h.cache.dirty_groups)
    assert set(writer._sent) <= {f"pg-{names[-1]}"}
    assert set(writer._last_write) == {f"pg-{names[-1]}", "pod/uid-p"}


class GonePods:
    """Every pod status write finds its pod gone (deleted before the write came)."""

    async def strategic_merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ApiError(404, {"reason": "NotFound"}, "PATCH", path)


async def test_pod_write_times_are_forgotten_on_a_cluster_of_plain_pods_only() -> None:
    """The write times of waiting plain pods' reasons are swept with the groups' bookkeeping
    (amortized over session passes): with no PodGroup at all, that sweep must come too, or a
    churn of short-lived plain pods grows the writer without bound."""
    h = Harness()
    names = [f"p{i}" for i in range(300)]
    for n in names:
        h.pod(pod(n))
    fake: Any = GonePods()
    writer = StatusWriter(fake, h.cache, SchedulerMetrics(), concurrency=8)
    waiting = SessionResult(
        (),
        {
            f"pod:uid-{n}": D.Explanation(f"pod:uid-{n}", D.ReasonCode.UNSCHEDULABLE, "no fit")
            for n in names
        },
    )
    writer.write_session(waiting, 100.0, "t0", set())
    assert len(writer.write_pod_reasons(waiting, 100.0, "t0")) == 300
    await writer.drain()
    for n in names:
        h.delete_pod(n)
    for t in (101.0, 102.0):
        writer.write_session(SessionResult((), {}), t, "t", set())
        writer.write_pod_reasons(SessionResult((), {}), t, "t")
    assert [k for k in writer._last_write if k.startswith("pod/")] == []
