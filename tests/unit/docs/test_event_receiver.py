"""The example receiver of docs/events.md (docs/event_receiver.py), over real HTTP."""

from __future__ import annotations

import importlib.util
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from operators.api.batch import TransitionLevel
from operators.api.events import SinkKind
from operators.jobs import delivery as D
from operators.jobs.translog import TransitionRec

RECEIVER = Path(__file__).resolve().parents[3] / "docs" / "event_receiver.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("event_receiver", RECEIVER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    out = tmp_path / "events.jsonl"
    server = _load().make_server(0, out, host="127.0.0.1")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/", out
    finally:
        server.shutdown()
        server.server_close()


def _post(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": D.CONTENT_TYPE}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)


def test_stores_each_event_once_and_acknowledges_duplicates(
    receiver: tuple[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    url, out = receiver
    job = D.JobRef("VCJob", "team-a", "train", "uid-1")
    first = D.cloudevent(job, TransitionRec(1, TransitionLevel.JOB, "train", None, "Pending"))
    second = D.cloudevent(job, TransitionRec(2, TransitionLevel.JOB, "train", "Pending", "Running"))
    for event in (first, first, second):  # the first one again, as after a lost answer
        assert _post(url, json.dumps(event).encode()) == 204
    stored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["id"] for e in stored] == ["uid-1-1", "uid-1-2"]
    assert stored[1] == second
    assert capsys.readouterr().out.splitlines() == [
        "dev.sluice.job.pending team-a train 1",
        "dev.sluice.job.running team-a train 2",
    ]


def test_takes_batches_and_de_duplicates_across_them(receiver: tuple[str, Path]) -> None:
    url, out = receiver
    job = D.JobRef("PodGroup", "team-a", "g", "uid-2")
    recs = [TransitionRec(n, SinkKind.POD_GROUP, "g", None, "Running") for n in (1, 2, 3)]
    events = [D.cloudevent(job, rec) for rec in recs]
    assert _post(url, json.dumps(events[:2]).encode()) == 204
    assert _post(url, json.dumps(events[1:]).encode()) == 204  # 2 again: a retried batch
    stored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [e["id"] for e in stored] == ["uid-2-1", "uid-2-2", "uid-2-3"]


@pytest.mark.parametrize("body", [b"not json", b"{}", b"[1, 2]", b'[{"id": "a"}, {}]'])
def test_refuses_what_it_can_never_store(receiver: tuple[str, Path], body: bytes) -> None:
    url, out = receiver
    # 400 is not retried by the operator (delivery.retryable), so a bad event cannot block a job.
    assert _post(url, body) == 400
    assert not D.retryable(400)
    assert not out.exists()
