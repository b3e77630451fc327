"""The API client's proxy comes from the HTTP(S)_PROXY / NO_PROXY environment (or the
kubeconfig's proxy-url), looked up once per client rather than once per request."""

from __future__ import annotations

import pytest
from aiohttp import web

from operators.runtime.client import KubeClient, env_proxy
from operators.runtime.kubeconfig import Connection


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    return monkeypatch


def test_env_proxy_follows_the_environment(no_proxy_env: pytest.MonkeyPatch) -> None:
    assert env_proxy("https://api.example:6443") == {}
    no_proxy_env.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    options = env_proxy("https://api.example:6443")
    assert str(options["proxy"]) == "http://proxy.example:3128"
    assert options["proxy_auth"] is None
    no_proxy_env.setenv("NO_PROXY", "api.example")
    assert env_proxy("https://api.example:6443") == {}
    assert str(env_proxy("https://other.example")["proxy"]) == "http://proxy.example:3128"


async def test_requests_go_through_the_environment_proxy(no_proxy_env: pytest.MonkeyPatch) -> None:
    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(str(request.url))  # a proxy is asked for the absolute URL
        return web.json_response({"kind": "APIVersions"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        no_proxy_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        async with KubeClient(Connection(server="http://api.example:8080")) as client:
            # Set after the client exists: the lookup is done once, when it is made.
            no_proxy_env.setenv("NO_PROXY", "api.example")
            assert await client.get("/api") == {"kind": "APIVersions"}
            assert await client.get("/apis") == {"kind": "APIVersions"}
    finally:
        await runner.cleanup()
    assert seen == ["http://api.example:8080/api", "http://api.example:8080/apis"]
