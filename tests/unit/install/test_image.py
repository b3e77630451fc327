"""The image's build context, checked without a container engine, and its entry points run as
processes the way the Deployments start them."""

from __future__ import annotations

import fnmatch
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from operators.__main__ import OPERATORS
from operators.install.kustomize import MANIFESTS, REPO, build, deployments, operator_container

DOCKERFILE = REPO / "Dockerfile"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_every_base_image_is_pinned() -> None:
    stages: set[str] = set()
    for word, args in instructions():
        if word != "FROM":
            continue
        image, *alias = args.split()
        if image not in stages:
            _name, _, tag = image.partition(":")
            assert "@sha256:" in image or re.fullmatch(r"\d+\.\d+\.\d+-\S+", tag), image
            assert "latest" not in tag
        if alias:
            stages.add(alias[-1])


def test_the_runtime_stage_runs_as_non_root_with_the_operators_entry_point() -> None:
    steps = instructions()
    last_from = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    final = steps[last_from:]
    users = [args for word, args in final if word == "USER"]
    assert users
    uid = users[-1].split(":")[0]
    assert uid.isdigit()
    assert int(uid) != 0
    (entrypoint,) = [args for word, args in final if word == "ENTRYPOINT"]
    assert entrypoint.startswith("[")  # exec form: signals reach Python, not a shell
    assert shlex.split(entrypoint.strip("[]").replace(",", " ")) == ["python", "-m", "operators"]
    # The pods' securityContext runs as the image's user.
    for deployment in deployments(build(MANIFESTS / "base")):
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_no_remote_sources_and_every_copied_path_is_in_the_build_context() -> None:
    allowed = [
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    for word, args in instructions():
        assert word != "ADD", "COPY only: ADD fetches URLs and unpacks archives implicitly"
        if word != "COPY" or args.startswith("--from="):
            continue
        *sources, _dest = args.split()
        for source in sources:
            assert (REPO / source).exists(), source
            assert any(fnmatch.fnmatch(source, pattern) for pattern in allowed), source


def test_runtime_lock_pins_every_dependency_with_hashes() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lock = (REPO / "requirements" / "runtime.lock").read_text()
    pinned = {
        m.lower().replace("_", "-") for m in re.findall(r"^([A-Za-z0-9_.-]+)==", lock, re.MULTILINE)
    }
    for requirement in project["dependencies"]:
        name = re.split(r"[<>=!~; \[]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, name
    assert lock.count("--hash=sha256:") >= len(pinned)


def test_manifests_use_the_projects_version_as_image_tag() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    for deployment in deployments(build(MANIFESTS / "base")):
        assert operator_container(deployment)["image"] == f"sluice-operators:{version}"


@pytest.mark.parametrize("args", sorted(OPERATORS))
def test_entry_point_starts_each_operator(args: str) -> None:
    """`python -m operators <name> --help` for every operator the image can run: imports
    resolve and the flags parse, as they must when a pod starts."""
    result = subprocess.run(
        [sys.executable, "-m", "operators", args, "--help"],
        capture_output=True,
        text=True,
        check=False,
        # A hang detector, not a speed target: on a loaded 2-core machine the import alone
        # took 40-50 s.
        timeout=240,
        cwd=Path("/"),  # not the checkout: the installed package, as in the image
    )
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()


def test_entry_point_without_an_operator_lists_them() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "operators"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 2
    for name in OPERATORS:
        assert name in result.stdout
