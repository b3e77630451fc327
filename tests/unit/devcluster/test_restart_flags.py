"""Restarting a control-plane process with some flags changed (fault tests, `make soak`)."""

from __future__ import annotations

from operators.devcluster.cluster import with_flags


def test_flags_are_replaced_in_place_or_appended() -> None:
    args = ["kube-apiserver", "--max-requests-inflight=1600", "--v=1", "--profiling=false"]
    got = with_flags(
        args, {"--max-requests-inflight": "20", "--max-mutating-requests-inflight": "10"}
    )
    assert got == [
        "kube-apiserver",
        "--v=1",
        "--profiling=false",
        "--max-requests-inflight=20",
        "--max-mutating-requests-inflight=10",
    ]
    assert with_flags(args, {}) == args
