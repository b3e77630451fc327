from __future__ import annotations

import io
import ssl
from importlib import resources
from pathlib import Path

import pytest
import yaml
from cryptography import x509

from operators.devcluster import build, pki
from operators.devcluster.cluster import DevCluster
from operators.devcluster.errors import DevClusterError
from operators.devcluster.versions import COMPONENTS, Component, bin_dir


def test_missing_go_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no `go` here
    with pytest.raises(DevClusterError, match="Go toolchain") as err:
        build.build_all(out=io.StringIO())
    assert "PATH" in err.value.hint


def test_cached_binaries_skip_the_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))  # a build would fail: no go
    for component in COMPONENTS:
        folder = bin_dir(component)
        folder.mkdir(parents=True)
        for name, _ in component.packages:
            (folder / name).write_text("#!/bin/sh\n")
            (folder / name).chmod(0o755)
    out = io.StringIO()
    build.build_all(out=out)
    assert out.getvalue().count("cached in") == len(COMPONENTS)


def test_every_component_has_a_pinned_wrapper_module() -> None:
    root = resources.files("operators.devcluster") / "toolchain"
    for component in COMPONENTS:
        gomod = (root / component.module_dir / "go.mod").read_text()
        assert (root / component.module_dir / "go.sum").read_text()
        for _, package in component.packages:
            module = package.split("/cmd/")[0] if "/cmd/" in package else package
            assert module in gomod, (module, component.name)


def test_kubernetes_binaries_get_version_stamped() -> None:
    kube = next(c for c in COMPONENTS if c.name == "kubernetes")
    flags = build._ldflags(kube)
    assert f"gitVersion={kube.version}" in flags
    assert "gitMinor=33" in flags


def test_up_without_binaries_fails_before_starting_anything(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "empty"))
    cluster = DevCluster(tmp_path / "state")
    with pytest.raises(DevClusterError, match="not built") as err:
        cluster.up()
    assert "make setup" in err.value.hint
    assert cluster.state() is None


def test_pki_chain_and_names(tmp_path: Path) -> None:
    keys = pki.generate(tmp_path)
    ca = x509.load_pem_x509_certificate(keys.ca_cert.read_bytes())
    serving = x509.load_pem_x509_certificate(keys.serving_cert.read_bytes())
    admin = x509.load_pem_x509_certificate(keys.admin_cert.read_bytes())
    serving.verify_directly_issued_by(ca)
    admin.verify_directly_issued_by(ca)
    sans = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    orgs = admin.subject.get_attributes_for_oid(x509.oid.NameOID.ORGANIZATION_NAME)
    assert orgs[0].value == "system:masters"
    # The files load as a TLS client identity, the way the kubeconfig uses them.
    ctx = ssl.create_default_context(cafile=str(keys.ca_cert))
    ctx.load_cert_chain(str(keys.admin_cert), str(keys.admin_key))
    config = yaml.safe_load(pki.kubeconfig(keys, "https://127.0.0.1:1"))
    assert config["users"][0]["user"]["client-key"] == str(keys.admin_key)


def test_kwok_stages_cover_the_documented_lifecycle() -> None:
    text = (resources.files("operators.devcluster") / "kwok-stages.yaml").read_text()
    stages = {d["metadata"]["name"]: d for d in yaml.safe_load_all(text)}
    assert set(stages) == {
        "sluice-node-ready",
        "sluice-node-heartbeat",
        "sluice-pod-running",
        "sluice-pod-complete",
        "sluice-pod-fail",
        "sluice-pod-delete",
    }
    complete = stages["sluice-pod-complete"]["spec"]
    assert "sluice.dev/complete-after" in complete["delay"]["durationFrom"]["expressionFrom"]
    assert "jitterDurationMilliseconds" not in complete["delay"]


def test_failed_build_shows_the_go_error_and_a_fix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real `go build` that cannot fetch its module: the error carries Go's own words."""
    monkeypatch.setenv("SLUICE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", "off")  # no network: the missing module fails at once
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "gomod"))
    module = tmp_path / "toolchain" / "broken"
    module.mkdir(parents=True)
    (module / "go.mod").write_text(
        "module sluice.dev/broken\n\ngo 1.24\n\nrequire example.com/nothing v1.0.0\n"
    )
    (module / "go.sum").write_text("")
    component = Component("broken", "v0.0.1", "broken", (("nothing", "example.com/nothing"),))
    log = tmp_path / "build.log"
    with pytest.raises(DevClusterError, match=r"building nothing v0\.0\.1 failed") as err:
        build.build_component(component, log, toolchain=tmp_path / "toolchain")
    assert "example.com/nothing" in str(err.value)
    assert "GOPROXY" in err.value.hint
    assert not bin_dir(component).exists()


def test_helm_gets_its_version_stamped_and_is_not_needed_by_the_cluster() -> None:
    helm = next(c for c in COMPONENTS if c.name == "helm")
    assert f"internal/version.version={helm.version}" in build._ldflags(helm)
    assert not helm.cluster
