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
