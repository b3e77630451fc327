"""Sluice's CRD names never collide with Volcano's or KAI's, so all can be installed side by side.

kubectl resolves a word given to `kubectl get` against every installed CRD's plural, singular and
short names; when two CRDs share one, the word silently means one of them (whichever discovery
prefers). The other schedulers' names are written here from their documentation and published
CRDs; the test reads our generated CRDs, the files users install.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from operators.api import KINDS
from operators.api.crdgen import filename_for

CRDS = Path(__file__).resolve().parents[3] / "crds"

# (CRD name, plural, singular, short names)
VOLCANO = (
    ("jobs.batch.volcano.sh", "jobs", "job", ("vcjob", "vj")),
    ("cronjobs.batch.volcano.sh", "cronjobs", "cronjob", ("cronvcjob", "cronvj")),
    ("queues.scheduling.volcano.sh", "queues", "queue", ("q", "queue-v1beta1")),
    ("podgroups.scheduling.volcano.sh", "podgroups", "podgroup", ("pg", "podgroup-v1beta1")),
    ("commands.bus.volcano.sh", "commands", "command", ()),
    ("numatopologies.nodeinfo.volcano.sh", "numatopologies", "numatopology", ("numatopo",)),
    ("hypernodes.topology.volcano.sh", "hypernodes", "hypernode", ("hn",)),
    ("jobflows.flow.volcano.sh", "jobflows", "jobflow", ("jf",)),
    ("jobtemplates.flow.volcano.sh", "jobtemplates", "jobtemplate", ("jt",)),
)
KAI = (
    ("queues.scheduling.run.ai", "queues", "queue", ()),
    ("podgroups.scheduling.run.ai", "podgroups", "podgroup", ("pg",)),
    ("bindrequests.scheduling.run.ai", "bindrequests", "bindrequest", ()),
    ("topologies.kai.scheduler", "topologies", "topology", ()),
    ("configs.kai.scheduler", "configs", "config", ()),
    ("schedulingshards.kai.scheduler", "schedulingshards", "schedulingshard", ()),
)
# Built-in kinds a Sluice word must not shadow either (batch/v1 Job, the scheduling.k8s.io kinds).
BUILT_IN = (
    ("jobs.batch", "jobs", "job", ()),
    ("priorityclasses.scheduling.k8s.io", "priorityclasses", "priorityclass", ("pc",)),
)


def _words(plural: str, singular: str, short: tuple[str, ...]) -> set[str]:
    return {plural, singular, *short}


def _ours() -> dict[str, set[str]]:
    out = {}
    for kind in KINDS:
        crd: dict[str, Any] = yaml.safe_load((CRDS / filename_for(kind)).read_text())
        names = crd["spec"]["names"]
        out[crd["metadata"]["name"]] = _words(
            names["plural"], names["singular"], tuple(names.get("shortNames", ()))
        )
    return out


@pytest.mark.parametrize(
    ("other", "plural", "singular", "short"), VOLCANO + KAI + BUILT_IN, ids=lambda v: str(v)
)
def test_no_sluice_word_is_another_schedulers(
    other: str, plural: str, singular: str, short: tuple[str, ...]
) -> None:
    theirs = _words(plural, singular, short)
    clashes = {crd: sorted(words & theirs) for crd, words in _ours().items() if words & theirs}
    assert not clashes, f"{other} shares kubectl words with {clashes}"


def test_the_renamed_kinds_keep_their_short_names_and_category() -> None:
    ours = _ours()
    assert ours["sluicequeues.scheduling.sluice.dev"] == {"sluicequeues", "sluicequeue", "sq"}
    assert ours["sluicepodgroups.scheduling.sluice.dev"] == {
        "sluicepodgroups",
        "sluicepodgroup",
        "spg",
    }
    for kind in KINDS:
        crd = yaml.safe_load((CRDS / filename_for(kind)).read_text())
        assert crd["spec"]["names"]["categories"] == ["sluice"]


def test_the_check_catches_a_clash() -> None:
    """Control: the old plural would have been reported."""
    theirs = _words(*VOLCANO[2][1:])
    assert _words("queues", "queue", ("sq",)) & theirs == {"queues", "queue"}
