"""Plugins, the I/O part: the objects a job's plugins need (headless Service, host-list and
hostfile ConfigMaps, the SSH key Secret), created once per job and owned by it. What goes into
them and into the pods is decided in operators/jobs/presets.py.

Each object has a fixed name and is only ever created (AlreadyExists means done), so repeating
`ensure` after a crash or on every new pod is harmless; a job's objects are remembered by uid so
a steady job costs no requests.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from operators.jobs import presets
from operators.jobs.pods import job_labels, owner_reference
from operators.jobs.shape import JobShape
from operators.runtime.client import ApiError, KubeClient

SSH_CONFIG = "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\nLogLevel ERROR\n"


def ssh_key_pair() -> tuple[str, str]:
    """(private key in OpenSSH format, public key line)."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return private, public + " sluice\n"


class Plugins:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._done: set[str] = set()  # job uids whose objects exist

    def forget(self, uid: str) -> None:
        self._done.discard(uid)

    async def ensure(self, job: JobShape, on: presets.Enabled) -> None:
        if not on.any or job.uid in self._done:
            return
        ns = job.namespace
        if on.svc:
            await self._create(f"/api/v1/namespaces/{ns}/services", self._service(job))
            data = presets.svc_hosts_data(job)
            await self._create(
                f"/api/v1/namespaces/{ns}/configmaps", self._object(job, "ConfigMap", "svc", data)
            )
        if on.framework == "mpi":
            data = {"hostfile": presets.mpi_hostfile(job)}
            await self._create(
                f"/api/v1/namespaces/{ns}/configmaps",
                self._object(job, "ConfigMap", "hostfile", data),
            )
        if on.ssh:
            private, public = ssh_key_pair()
            data = {
                "id_ed25519": private,
                "id_ed25519.pub": public,
                "authorized_keys": public,
                "config": SSH_CONFIG,
            }
            secret = self._object(job, "Secret", "ssh", _b64(data))
            secret["type"] = "Opaque"
            await self._create(f"/api/v1/namespaces/{ns}/secrets", secret)
        self._done.add(job.uid)

    def _meta(self, job: JobShape, name: str) -> dict[str, Any]:
        return {
            "name": name,
            "namespace": job.namespace,
            "labels": job_labels(job),
            "ownerReferences": [owner_reference(job)],
        }

    def _object(
        self, job: JobShape, kind: str, what: str, data: Mapping[str, str]
    ) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": kind,
            "metadata": self._meta(job, presets.config_name(job, what)),
            "data": dict(data),
        }

    def _service(self, job: JobShape) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": self._meta(job, presets.svc_name(job)),
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {k: v for k, v in job_labels(job).items() if "managed-by" not in k},
                "ports": [{"name": "placeholder", "port": 1, "protocol": "TCP"}],
            },
        }

    async def _create(self, path: str, body: dict[str, Any]) -> None:
        try:
            await self.client.post(path, body)
        except ApiError as err:
            if err.status != 409:
                raise


def _b64(data: Mapping[str, str]) -> dict[str, str]:
    return {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
