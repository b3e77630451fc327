"""The cluster a live benchmark runs on: a running one (`--kubeconfig`) or a fresh devcluster."""

from __future__ import annotations

import argparse
import contextlib
import pathlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def bench_cluster(
    kubeconfig: str | None,
    profile: str,
    logs: pathlib.Path,
    keep: bool = False,
    nodes: int | None = None,
    cluster_dir: str | None = None,
) -> Iterator[tuple[str, str, Any]]:
    """(kubeconfig path, description for the report, DevCluster or None for a given one).

    `cluster_dir`: a devcluster kept in that folder, started there unless it already runs and
    left running afterwards, so that several runs (each holding the machine for a short while)
    measure the same cluster with every contestant, kube-scheduler included."""
    if kubeconfig is not None:
        yield kubeconfig, "an existing cluster", None
        return
    from operators.devcluster.cluster import DevCluster
    from operators.devcluster.demo import apply_crds

    if cluster_dir is not None:
        cluster = DevCluster(pathlib.Path(cluster_dir), die_with_parent=False)
        keep = True
    else:
        cluster = DevCluster(logs / "cluster")
    state = cluster.up(profile=profile, nodes=nodes, log=print, timeout=600)
    try:
        apply_crds(cluster)
        yield str(cluster.kubeconfig), f"{state.nodes:,} kwok nodes (`{profile}` profile)", cluster
    finally:
        if not keep:
            cluster.down()


def bench_parser(prog: str, doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's command line, with the cluster choice every live benchmark shares."""
    parser = argparse.ArgumentParser(
        prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kubeconfig", help="use this running cluster instead of starting one")
    parser.add_argument("--profile", default="large", help="devcluster profile to start")
    parser.add_argument(
        "--nodes", type=int, help="kwok nodes of the started cluster (default: the profile's)"
    )
    parser.add_argument(
        "--cluster-dir",
        help="start the cluster in this folder and leave it running (reused if it already runs; "
        "`python -m operators.devcluster --state-dir DIR down` stops it)",
    )
    return parser
