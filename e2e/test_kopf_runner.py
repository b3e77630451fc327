"""Two kopf operators and an unrelated task in one event loop (what `python -m operators all`
does): each sees only its own objects through its own registry, serves its own liveness
endpoint, stops on its own without taking the others down, and a stop signal reaches all."""

from __future__ import annotations

import asyncio
import urllib.request
from typing import Any

import kopf
import pytest
from kubernetes import client

from operators.controllers.kopf_runner import KopfOperator, KopfSettings, OperatorContext, run
from operators.devcluster.cluster import DevCluster
from operators.devcluster.processes import free_port
from operators.runtime import signals

pytestmark = pytest.mark.e2e


def watcher(name: str, seen: dict[str, set[str]]) -> KopfOperator:
    def register(registry: kopf.OperatorRegistry, ctx: OperatorContext) -> None:
        @kopf.on.event("", "v1", "configmaps", labels={"e2e-operator": name}, registry=registry)
        async def saw(body: kopf.Body, **_: Any) -> None:
            seen[name].add(body["metadata"]["name"])

    return KopfOperator(name, register)


def healthz(port: int) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
        return int(resp.status)


async def eventually(check: Any, within: float = 30.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not check():
        assert loop.time() < deadline, "condition not reached in time"
        await asyncio.sleep(0.2)


async def test_two_operators_one_loop(
    cluster: DevCluster, k8s: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(k8s)
    seen: dict[str, set[str]] = {"alpha": set(), "beta": set()}
    ports = {"alpha": free_port(), "beta": free_port()}
    stops = {"alpha": asyncio.Event(), "beta": asyncio.Event()}
    bystander = asyncio.create_task(asyncio.sleep(3600), name="not-kopf")
    tasks = {
        name: asyncio.create_task(
            run(
                watcher(name, seen),
                KopfSettings(
                    kubeconfig=str(cluster.kubeconfig),
                    namespaces=namespace,
                    health_host="127.0.0.1",
                    health_port=ports[name],
                ),
                stop=stops[name],
            )
        )
        for name in seen
    }
    try:
        for name in seen:
            for i in range(2):
                body = client.V1ConfigMap(
                    metadata=client.V1ObjectMeta(name=f"{name}-{i}", labels={"e2e-operator": name})
                )
                await asyncio.to_thread(core.create_namespaced_config_map, namespace, body)
        await eventually(lambda: all(len(s) == 2 for s in seen.values()))
        assert seen == {"alpha": {"alpha-0", "alpha-1"}, "beta": {"beta-0", "beta-1"}}
        assert await asyncio.to_thread(healthz, ports["alpha"]) == 200
        assert await asyncio.to_thread(healthz, ports["beta"]) == 200

        # One operator stopping leaves the other (and unrelated tasks) running.
        stops["alpha"].set()
        assert await asyncio.wait_for(tasks["alpha"], 30) == 0
        assert not tasks["beta"].done()
        assert not bystander.done()
        await asyncio.to_thread(
            core.create_namespaced_config_map,
            namespace,
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="beta-2", labels={"e2e-operator": "beta"})
            ),
        )
        await eventually(lambda: "beta-2" in seen["beta"])

        # A stop signal (here without the signal itself) reaches every operator still running.
        signals.stop_all()
        assert await asyncio.wait_for(tasks["beta"], 30) == 0
        assert not bystander.done()

        # on.event handlers persist nothing: no kopf annotations on the watched objects.
        cm = await asyncio.to_thread(core.read_namespaced_config_map, "beta-2", namespace)
        assert not (cm.metadata.annotations)
        assert not ({})
        assert not (cm.metadata.finalizers)
        assert not ([])
    finally:
        for stop in stops.values():
            stop.set()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        bystander.cancel()
