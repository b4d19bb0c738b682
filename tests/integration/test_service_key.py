"""The reward and judge services behind ``AGORA_SERVICE_KEY`` (agora/ops/service_key.py), as
real uvicorn processes: /v1 refused without the key or with a wrong one, the key opens it,
health and metrics stay open; agora's own clients (the sandbox client, the scoring client) send
the key from their environment."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import httpx
import pytest

from agora.ops.service_key import SERVICE_KEY_ENV
from agora.rollout.scoring import post_json
from agora.sandbox.remote import run_remote
from agora.sandbox.runner import SandboxLimits
from agora.stack.procs import free_port
from tests.conftest import uvicorn_service

KEY = secrets.token_urlsafe(24)


@pytest.fixture(scope="module")
def keyed(logs_dir, redis_url) -> Iterator[dict[str, str]]:
    services, urls = [], {}
    for name, app, extra in (("reward", "services.reward.app:app", {}),
                             ("judge", "services.judge.app:app",
                              {"AGORA_JUDGE_BACKEND": "rubric", "REDIS_URL": redis_url})):
        port = free_port()
        svc = uvicorn_service(f"{name}-keyed", app, port, logs_dir / f"{name}-keyed.log",
                              {SERVICE_KEY_ENV: KEY, **extra})
        services.append(svc.start())
        urls[name] = f"http://127.0.0.1:{port}"
    try:
        for svc in services:
            svc.wait_healthy(60)
        yield urls
    finally:
        for svc in services:
            svc.stop()


@pytest.mark.parametrize(("service", "route"), [("reward", "/v1/sandbox/run"),
                                                ("reward", "/v1/verify"),
                                                ("judge", "/v1/judge/pairwise")])
def test_v1_routes_want_the_key_and_probes_stay_open(keyed, service, route):
    url = keyed[service]
    assert httpx.get(url + "/health").status_code == 200
    assert httpx.get(url + "/metrics").status_code == 200
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
        resp = httpx.post(url + route, json={}, headers=headers)
        assert resp.status_code == 401 and SERVICE_KEY_ENV in resp.json()["detail"]
    # With the key the request reaches the route: an empty body is the route's 422.
    resp = httpx.post(url + route, json={}, headers={"authorization": f"Bearer {KEY}"})
    assert resp.status_code == 422


def test_agoras_clients_send_the_key_from_their_environment(keyed, monkeypatch):
    monkeypatch.setenv(SERVICE_KEY_ENV, KEY)
    result = run_remote(keyed["reward"], "print(6 * 7)", limits=SandboxLimits())
    assert result.stdout.strip() == "42"
    verdict = post_json(keyed["judge"] + "/v1/judge/score",
                        {"context": "Say hi.", "response": "Hello!", "rubric": "helpfulness"},
                        RuntimeError, "judge")
    assert verdict["scale_min"] <= verdict["overall"] <= verdict["scale_max"]
    monkeypatch.delenv(SERVICE_KEY_ENV)
    with pytest.raises(ValueError, match="401"):
        run_remote(keyed["reward"], "print(1)", limits=SandboxLimits())


def test_a_full_weight_vllm_server_wants_the_key_off_v1_too(monkeypatch):
    """vLLM's own key covers /v1 only; in development mode (full-weight agents) its
    /collective_rpc runs any worker method. agora's ``--middleware`` (what vllm_command adds for
    such a server) wants the key on every route but the probes."""
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route
    from starlette.testclient import TestClient

    from agora.serving.auth import RequireKeyOffV1
    from agora.serving.vllm_server import vllm_command
    from tests.stack_helpers import tiny_config

    def ok(_request):
        return PlainTextResponse("ok")

    routes = [Route(path, ok, methods=["GET", "POST"])
              for path in ("/collective_rpc", "/reset_prefix_cache", "/sleep", "/health",
                           "/metrics", "/v1/models")]
    model = tiny_config().models["tiny"]
    full = vllm_command("/model", model, "127.0.0.1", lora=False)
    assert full[full.index("--middleware") + 1] == "agora.serving.auth.RequireKeyOffV1"
    assert "--middleware" not in vllm_command("/model", model, "127.0.0.1")  # LoRA: vLLM's key
    monkeypatch.setenv("VLLM_API_KEY", KEY)
    app = Starlette(routes=routes)
    app.add_middleware(RequireKeyOffV1)  # as vLLM adds a --middleware class: no arguments
    client = TestClient(app)
    for path in ("/collective_rpc", "/reset_prefix_cache", "/sleep", "/v1/models"):
        refused = client.post(path, headers={"authorization": "Bearer wrong"})
        assert refused.status_code == 401 and "AGORA_VLLM_API_KEY" in refused.text
        assert client.post(path).status_code == 401
        assert client.post(path, headers={"authorization": f"Bearer {KEY}"}).text == "ok"
    assert client.get("/health").text == client.get("/metrics").text == "ok"
    monkeypatch.delenv("VLLM_API_KEY")
    open_app = Starlette(routes=routes)
    open_app.add_middleware(RequireKeyOffV1)
    assert TestClient(open_app).post("/collective_rpc").text == "ok"  # no key: as vLLM, open
