"""Plugins, the I/O part: the objects a job's plugins need (headless Service, host-list and
hostfile ConfigMaps, the SSH key Secret), created once per job and owned by it. What goes into
them and into the pods is decided in operators/jobs/presets.py.

Each object has a fixed name; the Service and the SSH Secret are only ever created
(AlreadyExists means done: the key pair is never replaced), the host-list ConfigMaps are created
or, when they exist, given the current lists (a job whose replica counts were edited). Repeating
`ensure` after a crash or on every new pod is harmless; what a job's objects carry is remembered
by uid, so a steady job costs no requests.
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
        self._done: dict[str, tuple[object, ...]] = {}
        """job uid -> the host lists its objects carry (they exist)."""

    def forget(self, uid: str) -> None:
        self._done.pop(uid, None)

    async def ensure(self, job: JobShape, on: presets.Enabled) -> None:
        if not on.any:
            return
        configs: list[tuple[str, dict[str, str]]] = []
        if on.svc:
            configs.append(("svc", presets.svc_hosts_data(job)))
        if on.framework == "mpi":
            configs.append(("hostfile", {"hostfile": presets.mpi_hostfile(job)}))
        carried = tuple((what, sorted(data.items())) for what, data in configs)
        known = self._done.get(job.uid)
        if known == carried:
            return
        ns = job.namespace
        for what, data in configs:
            await self._put_config(job, what, data)
        if known is not None:  # only the host lists changed
            self._done[job.uid] = carried
            return
        if on.svc:
            await self._create(f"/api/v1/namespaces/{ns}/services", self._service(job))
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
        self._done[job.uid] = carried

    async def _put_config(self, job: JobShape, what: str, data: Mapping[str, str]) -> None:
        path = f"/api/v1/namespaces/{job.namespace}/configmaps"
        try:
            await self.client.post(path, self._object(job, "ConfigMap", what, data))
        except ApiError as err:
            if err.status != 409:
                raise
            name = presets.config_name(job, what)
            await self.client.merge_patch(f"{path}/{name}", {"data": dict(data)})

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
