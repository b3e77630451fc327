"""Run an operator as its ServiceAccount from outside the cluster.

`kubeconfig_for()` writes a kubeconfig whose user is an exec credential plugin: this module's
`main`, which asks the TokenRequest API (as the admin kubeconfig's user) for a short-lived token of
the ServiceAccount and prints it as an ExecCredential. The operator's client runs it again when the
token expires, so a long `make deploy` session never holds a stale token, and every request the
operator makes is authorised by the installed RBAC alone.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

TOKEN_SECONDS = 3600


def cluster_entry(admin_kubeconfig: Path, context: str | None = None) -> dict[str, Any]:
    """The admin kubeconfig's current cluster, with file paths made absolute."""
    doc = yaml.safe_load(admin_kubeconfig.read_text()) or {}
    ctx_name = context or doc["current-context"]
    ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
    cluster = dict(next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"]))
    ca = cluster.get("certificate-authority")
    if ca and not Path(ca).is_absolute():
        cluster["certificate-authority"] = str((admin_kubeconfig.parent / ca).resolve())
    return cluster


def kubeconfig_for(
    admin_kubeconfig: Path,
    namespace: str,
    service_account: str,
    python: str = sys.executable,
) -> dict[str, Any]:
    user = f"{namespace}:{service_account}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster_entry(admin_kubeconfig)}],
        "users": [
            {
                "name": user,
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": python,
                        "args": [
                            "-m",
                            "operators.install",
                            "token",
                            f"--admin-kubeconfig={admin_kubeconfig.resolve()}",
                            f"--namespace={namespace}",
                            f"--service-account={service_account}",
                        ],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [
            {"name": user, "context": {"cluster": "cluster", "user": user, "namespace": namespace}}
        ],
        "current-context": user,
    }


def request_token(
    admin_kubeconfig: Path, namespace: str, service_account: str, seconds: int = TOKEN_SECONDS
) -> tuple[str, dt.datetime]:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(admin_kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as api:
        review = client.CoreV1Api(api).create_namespaced_service_account_token(
            service_account, namespace, {"spec": {"expirationSeconds": seconds}}
        )
    expiry: dt.datetime = review.status.expiration_timestamp
    return str(review.status.token), expiry


def exec_credential(token: str, expiry: dt.datetime) -> dict[str, Any]:
    return {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "token": token,
            "expirationTimestamp": expiry.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        },
    }


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m operators.install token",
        description="kubeconfig exec credential plugin: a TokenRequest token of a ServiceAccount",
    )
    parser.add_argument("--admin-kubeconfig", required=True, type=Path)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--service-account", required=True)
    parser.add_argument("--seconds", type=int, default=TOKEN_SECONDS)
    args = parser.parse_args(list(argv))
    token, expiry = request_token(
        args.admin_kubeconfig, args.namespace, args.service_account, args.seconds
    )
    print(json.dumps(exec_credential(token, expiry)))
    return 0
