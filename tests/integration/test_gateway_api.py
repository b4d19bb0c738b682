"""The complete gateway against real parts: vLLM's CPU server on tiny-random with real PEFT
adapters published the way the trainer publishes them (``weight_sync.publish``), the session
Redis (its own database index, so the keys made here bind only this gateway), the gateway under
real uvicorn, the official ``openai`` client, the ``agora keys`` CLI, and a real ``agora up``
subprocess for ``/v1/runs``."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import openai
import psutil
import pytest
import redis
import yaml
from typer.testing import CliRunner

from agora.cli.main import app as cli_app
from agora.config.run import parse_config
from agora.gateway.keys import DIGESTS_HASH, SALT_KEY, key_digest
from agora.gateway.runs import RUNS_HASH, tagged_processes
from agora.rollout.stream import EpisodeStream
from agora.serving.client import PolicyAdmin
from agora.serving.weights import adapter_dir, publish
from agora.stack.procs import port_in_use
from tests.conftest import uvicorn_service
from tests.stack_helpers import processes_of_run, wait_for

TIMEOUT = httpx.Timeout(180.0, connect=10.0)
HELLO = [{"role": "user", "content": "Say hello."}]
RUN_ID = "gwapi-run"
AGENT = "ana"
BODY_LIMIT = 64 * 1024
MY_PORTS = range(8380, 8400)  # this test file's port range


def my_ports(count: int) -> list[int]:
    """``count`` distinct ports of this file's range that are free right now."""
    free = [p for p in MY_PORTS if not port_in_use(p)]
    if len(free) < count:
        raise RuntimeError(f"only {len(free)} free ports left in {MY_PORTS}")
    return free[:count]


def save_random_loras(model_path: str, outs: dict[int, Path]) -> None:
    """One LoRA per seed with random B matrices (PEFT starts B at zero = the base model)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    lora = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                      task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    for seed, out in outs.items():
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in peft_model.named_parameters():
                if "lora_B" in name:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
        peft_model.save_pretrained(str(out))


@dataclass
class Gateway:
    url: str
    redis_url: str
    run_dir: Path
    runs_dir: Path
    vllm_url: str


@pytest.fixture(scope="module")
def gateway(vllm_tiny, tiny_model, redis_url, logs_dir, tmp_path_factory) -> Iterator[Gateway]:
    """The gateway of a run whose trainer published ``ana`` v1 (the run folder and Redis look
    as the trainer leaves them; v2 is saved but published by a test)."""
    vllm_url, tiny_cfg = vllm_tiny
    db_url = re.sub(r"/\d+$", "/7", redis_url)
    redis.Redis.from_url(db_url).flushdb()
    root = tmp_path_factory.mktemp("gwapi")
    run_dir, runs_dir = root / RUN_ID, root / "runs"
    save_random_loras(tiny_model, {seed: adapter_dir(run_dir, AGENT, seed) for seed in (1, 2)})
    stream = EpisodeStream(redis.Redis.from_url(db_url), RUN_ID)
    publish(PolicyAdmin(vllm_url), stream, AGENT, 1, adapter_dir(run_dir, AGENT, 1))
    (port,) = my_ports(1)
    data = {
        "name": "gwapi",
        "models": {"tiny": tiny_cfg.model_dump()},
        "agents": [{"name": AGENT, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                    "sampling": {"temperature": 1.0, "max_tokens": 6, "stop": ["]"]}}],
        "environment": {"name": "tictactoe", "seats": [AGENT, AGENT]},
        "services": {"gateway_port": port},
    }
    parse_config(data)
    config_path = root / "run.yaml"
    config_path.write_text(yaml.safe_dump(data))
    env = {"AGORA_CONFIG": str(config_path), "AGORA_REDIS_URL": db_url, "AGORA_RUN_ID": RUN_ID,
           "AGORA_RUN_DIR": str(run_dir), "AGORA_GATEWAY_RUNS_DIR": str(runs_dir),
           "AGORA_GATEWAY_MAX_BODY_BYTES": str(BODY_LIMIT), "AGORA_GATEWAY_STOP_GRACE_S": "40"}
    svc = uvicorn_service("gateway-api", "services.gateway.app:app", port,
                          logs_dir / "gateway-api.log", env).start()
    try:
        svc.wait_healthy(120)
        yield Gateway(f"http://127.0.0.1:{port}", db_url, run_dir, runs_dir, vllm_url)
    finally:
        svc.stop()


def keys_cli(*args: str, redis_url: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli_app, ["keys", *args, "--redis-url", redis_url])
    return result.exit_code, result.output


def printed_key(output: str) -> str:
    """The key ``agora keys create`` printed (stdout), among its note (stderr)."""
    match = re.search(r"^agora-[A-Za-z0-9_\-]{40,}$", output, re.MULTILINE)
    assert match, output
    return match.group(0)


@dataclass
class Keys:
    main: str
    slow: str
    open_before: int  # status of a key-less request before any key existed
    open_after: int  # ... and right after the first key was created


@pytest.fixture(scope="module")
def keys(gateway) -> Keys:
    """Keys made with the real CLI; the gateway turns auth on when the first appears."""
    before = httpx.get(f"{gateway.url}/v1/models", timeout=TIMEOUT).status_code
    code, main = keys_cli("create", "main", "--scope", "admin", redis_url=gateway.redis_url)
    assert code == 0, main
    after = httpx.get(f"{gateway.url}/v1/models", timeout=TIMEOUT).status_code
    code, slow = keys_cli("create", "slow", "--rate", "2", redis_url=gateway.redis_url)
    assert code == 0, slow
    return Keys(printed_key(main), printed_key(slow), before, after)


@pytest.fixture(scope="module")
def http(gateway, keys) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=TIMEOUT,
                      headers={"authorization": f"Bearer {keys.main}"}) as client:
        yield client


def error_of(resp: httpx.Response) -> dict:
    error = resp.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert {"message", "type", "param", "code"} <= set(error)
    return error


def greedy(http: httpx.Client, model: str) -> tuple[list[float], httpx.Response]:
    resp = http.post("/v1/chat/completions", json={
        "model": model, "messages": HELLO, "max_tokens": 6, "temperature": 0.0,
        "logprobs": True, "top_logprobs": 1})
    assert resp.status_code == 200, resp.text
    return [t["logprob"] for t in resp.json()["choices"][0]["logprobs"]["content"]], resp


# --- keys and auth ----------------------------------------------------------------------------


def test_gateway_is_open_until_the_first_key(keys):
    assert keys.open_before == 200
    assert keys.open_after == 401


def test_missing_or_wrong_key_is_401_but_health_and_metrics_stay_open(gateway, keys):
    no_key = httpx.get(f"{gateway.url}/v1/agents", timeout=TIMEOUT)
    assert no_key.status_code == 401
    assert "Authorization: Bearer" in error_of(no_key)["message"]
    wrong = httpx.post(f"{gateway.url}/v1/chat/completions", timeout=TIMEOUT,
                       headers={"authorization": "Bearer agora-not-a-key"},
                       json={"model": AGENT, "messages": HELLO})
    assert wrong.status_code == 401
    assert error_of(wrong)["code"] == "invalid_api_key"
    assert httpx.get(f"{gateway.url}/health", timeout=TIMEOUT).status_code == 200
    assert httpx.get(f"{gateway.url}/metrics", timeout=TIMEOUT).status_code == 200


def test_the_api_docs_are_behind_the_keys(gateway, keys, http):
    for path in ("/docs", "/openapi.json"):
        assert httpx.get(f"{gateway.url}{path}", timeout=TIMEOUT).status_code == 401, path
    assert "/v1/chat/completions" in http.get("/openapi.json").json()["paths"]
    assert "swagger" in http.get("/docs").text.lower()
    assert http.get("/redoc").status_code == 404  # one docs page, not two


def test_requests_a_web_page_could_forge_are_refused(gateway, keys, http):
    """A cross-site page can send text/plain, form or typeless bodies without a preflight, and
    its browser names its origin: both refused, with the key (a logged-in user) or without."""
    chat_body = json.dumps({"model": AGENT, "messages": HELLO, "max_tokens": 2})
    for content_type in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"content-type": content_type} if content_type else {}
        resp = http.post("/v1/chat/completions", content=chat_body, headers=headers)
        assert resp.status_code == 415, (content_type, resp.text)
        assert "application/json" in error_of(resp)["message"]
    run_yaml = yaml.safe_dump(tiny_run_config())
    assert http.post("/v1/runs", content=run_yaml).status_code == 415
    evil = http.post("/v1/chat/completions", content=chat_body,
                     headers={"content-type": "application/json",
                              "origin": "https://evil.example"})
    assert evil.status_code == 403 and "evil.example" in error_of(evil)["message"]
    # The gateway's own pages (its /docs) and clients that send no Origin go through.
    own = http.post("/v1/chat/completions", content=chat_body,
                    headers={"content-type": "application/json; charset=utf-8",
                             "origin": gateway.url})
    assert own.status_code == 200, own.text
    # Body-less requests need no type.
    assert http.get("/v1/agents", headers={"origin": gateway.url}).status_code == 200


def test_allowed_origins_let_a_dashboard_call_the_gateway(gateway, logs_dir):
    """AGORA_GATEWAY_ALLOWED_ORIGINS: those sites' pages may call it, others still may not
    (an open gateway on an empty database: no key in the way)."""
    empty_db = re.sub(r"/\d+$", "/9", gateway.redis_url)
    redis.Redis.from_url(empty_db).flushdb()
    svc, url = start_extra_gateway(
        gateway.run_dir.parent / "run.yaml", logs_dir / "gateway-origins.log", my_ports(1)[0],
        AGORA_REDIS_URL=empty_db,
        AGORA_GATEWAY_ALLOWED_ORIGINS="https://dash.example, http://localhost:3000/")
    try:
        for origin, status in (("https://dash.example", 200), ("http://localhost:3000", 200),
                               ("https://evil.example", 403), ("null", 403)):
            resp = httpx.get(f"{url}/v1/models", headers={"origin": origin}, timeout=TIMEOUT)
            assert resp.status_code == status, (origin, resp.text)
    finally:
        svc.stop()


def test_openai_client_with_a_key(gateway, keys):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=keys.main, max_retries=0,
                           timeout=180.0)
    assert [m.id for m in client.models.list()] == [AGENT]
    completion = client.chat.completions.create(model=AGENT, messages=HELLO, max_tokens=6,
                                                temperature=0.0)
    assert completion.model == AGENT and completion.choices[0].message.role == "assistant"
    stream = client.chat.completions.create(model=f"{AGENT}@v1", messages=HELLO, max_tokens=6,
                                            temperature=0.0, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert isinstance(text, str)
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="agora-wrong",
                      max_retries=0).models.list()
    with pytest.raises(openai.NotFoundError, match="v99"):
        client.chat.completions.create(model=f"{AGENT}@v99", messages=HELLO, max_tokens=4)


def test_rate_limit_is_429_with_retry_after(gateway, keys):
    headers = {"authorization": f"Bearer {keys.slow}"}
    statuses = [httpx.get(f"{gateway.url}/v1/models", headers=headers, timeout=TIMEOUT)
                for _ in range(3)]
    assert [r.status_code for r in statuses] == [200, 200, 429]
    limited = statuses[-1]
    assert 1 <= int(limited.headers["retry-after"]) <= 60
    assert error_of(limited)["code"] == "rate_limit_exceeded"
    # The main key has no rate: unaffected.
    main = httpx.get(f"{gateway.url}/v1/models", timeout=TIMEOUT,
                     headers={"authorization": f"Bearer {keys.main}"})
    assert main.status_code == 200
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=keys.slow, max_retries=0)
    with pytest.raises(openai.RateLimitError):
        client.models.list()


def test_keys_cli_create_list_revoke_round_trip(gateway, keys):
    code, out = keys_cli("create", "temp", "--rate", "100", redis_url=gateway.redis_url)
    assert code == 0
    key = printed_key(out)
    stored = redis.Redis.from_url(gateway.redis_url).hgetall("agora:gateway:keys")
    assert key.encode() not in b"".join(stored.values())  # only the digest is stored
    code, listing = keys_cli("list", redis_url=gateway.redis_url)
    assert code == 0 and "temp" in listing and key not in listing
    auth = {"authorization": f"Bearer {key}"}
    assert httpx.get(f"{gateway.url}/v1/models", headers=auth, timeout=TIMEOUT).status_code == 200
    code, out = keys_cli("create", "temp", redis_url=gateway.redis_url)
    assert code == 2 and "exists" in out
    code, _ = keys_cli("revoke", "temp", redis_url=gateway.redis_url)
    assert code == 0
    assert httpx.get(f"{gateway.url}/v1/models", headers=auth, timeout=TIMEOUT).status_code == 401
    code, out = keys_cli("revoke", "temp", redis_url=gateway.redis_url)
    assert code == 2 and "no key named 'temp'" in out
    code, out = keys_cli("create", "temp", "--scope", "root", redis_url=gateway.redis_url)
    assert code == 2 and "--scope root: must be one of chat, admin" in out


def test_a_chat_key_cannot_touch_training_runs(gateway, keys, http):
    """Scopes (issue 18): `agora keys create` makes chat keys unless told --scope admin; runs
    (start, list, read logs, stop) need admin. A key stored before scopes existed stays admin."""
    code, out = keys_cli("create", "chatter", redis_url=gateway.redis_url)
    assert code == 0
    chat = {"authorization": f"Bearer {printed_key(out)}"}
    try:
        code, listing = keys_cli("list", redis_url=gateway.redis_url)
        assert re.search(r"chatter\s*│\s*chat\b", listing) and re.search(
            r"main\s*│\s*admin\b", listing), listing
        assert httpx.get(f"{gateway.url}/v1/models", headers=chat,
                         timeout=TIMEOUT).status_code == 200
        for method, path in (("GET", "/v1/runs"), ("GET", "/v1/runs/anything"),
                             ("POST", "/v1/runs"), ("POST", "/v1/runs/anything/stop")):
            resp = httpx.request(method, f"{gateway.url}{path}", headers=chat, json={},
                                 timeout=TIMEOUT)
            assert resp.status_code == 403, (method, path, resp.text)
            assert error_of(resp)["code"] == "insufficient_scope"
            assert "--scope admin" in error_of(resp)["message"]
        assert http.get("/v1/runs").status_code == 200  # the admin key
    finally:
        keys_cli("revoke", "chatter", redis_url=gateway.redis_url)
    # A record written before scopes: no "scope" field, and it keeps the power it had.
    legacy = "agora-legacy-" + "x" * 40
    client = redis.Redis.from_url(gateway.redis_url, decode_responses=True)
    digest = key_digest(legacy, client.get(SALT_KEY), "")
    client.hset(DIGESTS_HASH, digest, json.dumps({"name": "legacy", "rate": None}))
    try:
        resp = httpx.get(f"{gateway.url}/v1/runs", timeout=TIMEOUT,
                         headers={"authorization": f"Bearer {legacy}"})
        assert resp.status_code == 200, resp.text
    finally:
        client.hdel(DIGESTS_HASH, digest)


def start_extra_gateway(config_path: Path, log_path: Path, port: int, **env: str):
    svc = uvicorn_service("gateway-extra", "services.gateway.app:app", port, log_path,
                          {"AGORA_CONFIG": str(config_path), **env}).start()
    svc.wait_healthy(60)
    return svc, f"http://127.0.0.1:{port}"


def test_a_key_without_a_rate_gets_the_default_rate(gateway, keys, logs_dir):
    """AGORA_GATEWAY_DEFAULT_RATE (600 unless set): a key created without --rate is limited
    too (2 a minute on this gateway)."""
    code, out = keys_cli("create", "no-rate-given", redis_url=gateway.redis_url)
    assert code == 0
    headers = {"authorization": f"Bearer {printed_key(out)}"}
    svc, url = start_extra_gateway(gateway.run_dir.parent / "run.yaml",
                                   logs_dir / "gateway-default-rate.log", my_ports(1)[0],
                                   AGORA_REDIS_URL=gateway.redis_url,
                                   AGORA_GATEWAY_DEFAULT_RATE="2")
    try:
        statuses = [httpx.get(f"{url}/v1/models", headers=headers, timeout=TIMEOUT).status_code
                    for _ in range(3)]
        assert statuses == [200, 200, 429]
    finally:
        svc.stop()
        keys_cli("revoke", "no-rate-given", redis_url=gateway.redis_url)


def test_require_keys_closes_a_gateway_without_keys(gateway, logs_dir):
    """AGORA_GATEWAY_REQUIRE_KEYS=1: 401 before any key exists (an empty database here)."""
    empty_db = re.sub(r"/\d+$", "/8", gateway.redis_url)
    redis.Redis.from_url(empty_db).flushdb()
    svc, url = start_extra_gateway(gateway.run_dir.parent / "run.yaml",
                                   logs_dir / "gateway-require.log", my_ports(1)[0],
                                   AGORA_REDIS_URL=empty_db, AGORA_GATEWAY_REQUIRE_KEYS="1")
    try:
        resp = httpx.get(f"{url}/v1/models", timeout=TIMEOUT)
        assert resp.status_code == 401 and error_of(resp)["code"] == "invalid_api_key"
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).status_code == 200
    finally:
        svc.stop()


def test_redis_down_is_503_not_open(gateway, logs_dir):
    """Keys live in Redis: when it is unreachable the gateway refuses (503), never opens up."""
    port, dead = my_ports(2)  # nothing listens on `dead`
    svc, url = start_extra_gateway(gateway.run_dir.parent / "run.yaml",
                                   logs_dir / "gateway-noredis.log", port,
                                   AGORA_REDIS_URL=f"redis://127.0.0.1:{dead}/0")
    try:
        resp = httpx.get(f"{url}/v1/models", timeout=TIMEOUT)
        assert resp.status_code == 503 and error_of(resp)["code"] == "redis_unavailable"
        assert resp.headers["retry-after"] == "5"
        assert httpx.get(f"{url}/health", timeout=TIMEOUT).status_code == 200
    finally:
        svc.stop()


# --- limits and errors ------------------------------------------------------------------------


def test_oversize_body_is_413(http):
    big = {"model": AGENT, "messages": [{"role": "user", "content": "x" * BODY_LIMIT}]}
    for path in ("/v1/chat/completions", "/v1/episodes", "/v1/runs"):
        resp = http.post(path, json=big)
        assert resp.status_code == 413, path
        assert error_of(resp)["code"] == "request_too_large"


@pytest.mark.parametrize("model", ["nobody", "nobody@v1", f"{AGENT}@v7", f"{AGENT}@12", "a@b@c"])
def test_unknown_model_or_version_is_404(http, model):
    resp = http.post("/v1/chat/completions", json={"model": model, "messages": HELLO})
    assert resp.status_code == 404
    error = error_of(resp)
    assert error["code"] == "model_not_found" and model in error["message"]


def test_unknown_version_names_the_saved_ones(http):
    resp = http.post("/v1/chat/completions", json={"model": f"{AGENT}@v7", "messages": HELLO})
    assert "v1..v2" in error_of(resp)["message"]


# --- versions ---------------------------------------------------------------------------------


def test_pinned_version_outlives_a_hot_swap(gateway, http):
    """``ana@v1`` keeps answering with v1's weights after the trainer publishes v2, while
    ``ana`` / ``ana@latest`` move on to v2."""
    latest_v1, resp = greedy(http, AGENT)
    assert resp.headers["x-agora-policy-version"] == "1"
    pinned_v1, resp = greedy(http, f"{AGENT}@v1")
    assert resp.headers["x-agora-policy-version"] == "1"
    assert resp.json()["model"] == f"{AGENT}@v1"
    assert pinned_v1 == pytest.approx(latest_v1, abs=1e-4)

    stream = EpisodeStream(redis.Redis.from_url(gateway.redis_url), RUN_ID)
    publish(PolicyAdmin(gateway.vllm_url), stream, AGENT, 2, adapter_dir(gateway.run_dir, AGENT, 2))

    latest_v2, resp = greedy(http, f"{AGENT}@latest")
    assert resp.headers["x-agora-policy-version"] == "2"
    assert latest_v2 != pytest.approx(latest_v1, abs=1e-4)
    still_v1, _ = greedy(http, f"{AGENT}@v1")
    assert still_v1 == pytest.approx(latest_v1, abs=1e-4)
    pinned_v2, _ = greedy(http, f"{AGENT}@v2")
    assert pinned_v2 == pytest.approx(latest_v2, abs=1e-4)
    models = httpx.get(f"{gateway.vllm_url}/v1/models", timeout=TIMEOUT).json()["data"]
    assert {f"{AGENT}@v1", f"{AGENT}@v2"} <= {m["id"] for m in models}


def test_agents_show_version_and_training_metrics(gateway, http):
    row = {"update": 2, "elapsed_s": 30.0, "episodes": 8, "dropped_stale": 0,
           "agents": {AGENT: {"reward_mean": 0.25, "kl": 0.01, "entropy": 1.5,
                              "legal_rate": 0.75, "policy_version": 2.0}}}
    (gateway.run_dir / "metrics.jsonl").write_text(json.dumps(row) + "\n")
    resp = http.get("/v1/agents")
    assert resp.status_code == 200
    (agent,) = resp.json()["data"]
    assert agent["id"] == AGENT and agent["base"] == "tiny" and agent["base_model"] == "tiny-random"
    assert agent["trainable"] is True and agent["run_id"] == RUN_ID
    assert agent["versions"] == [1, 2]
    assert agent["version"] == int(redis.Redis.from_url(gateway.redis_url).get(
        f"agora:{RUN_ID}:version:{AGENT}"))
    assert agent["metrics"] == row["agents"][AGENT] and agent["metrics_update"] == 2
    assert http.get(f"/v1/agents/{AGENT}").json()["id"] == AGENT
    assert http.get("/v1/agents/nobody").status_code == 404


# --- episodes ---------------------------------------------------------------------------------


def test_tictactoe_episode_played_to_the_end(gateway, http):
    live_version = int(redis.Redis.from_url(gateway.redis_url).get(
        f"agora:{RUN_ID}:version:{AGENT}"))
    resp = http.post("/v1/episodes", json={"env": "tictactoe", "seats": ["user", AGENT],
                                           "temperature": 0.0, "seed": 3})
    assert resp.status_code == 201, resp.text
    episode = resp.json()
    assert episode["status"] == "your_turn" and episode["current_seat"] == 0
    assert episode["legal_actions"] == [f"[{i}]" for i in range(9)]
    assert "Tic-Tac-Toe" in episode["observation"][0]["content"]
    eid = episode["id"]

    illegal = http.post(f"/v1/episodes/{eid}/moves", json={"move": "[9]"})
    assert illegal.status_code == 422
    assert "not between 0 and 8" in error_of(illegal)["message"]
    assert http.get(f"/v1/episodes/{eid}").json()["turns"] == []  # nothing was applied

    moves = 0
    while episode["status"] == "your_turn":
        episode = http.post(f"/v1/episodes/{eid}/moves",
                            json={"move": episode["legal_actions"][0]}).json()
        moves += 1
        assert episode["new_turns"][0]["player"] == "user"
        for turn in episode["new_turns"][1:]:
            assert turn["player"] == AGENT and turn["text"].startswith("[")
            assert turn["version"] == live_version
        assert moves <= 5
    assert episode["status"] == "finished" and episode["outcome"] is not None
    assert len(episode["outcome"]["results"]) == 2
    assert {t["player"] for t in episode["turns"]} == {"user", AGENT}
    again = http.post(f"/v1/episodes/{eid}/moves", json={"move": "[4]"})
    assert again.status_code == 409


def test_episode_against_a_bot_and_a_discussion(http):
    game = http.post("/v1/episodes", json={"env": "tictactoe", "seats": ["bot:minimax", "user"]})
    assert game.status_code == 201
    state = game.json()
    assert state["turns"][0]["player"] == "bot:minimax" and state["current_seat"] == 1
    while state["status"] == "your_turn":
        state = http.post(f"/v1/episodes/{state['id']}/moves",
                          json={"move": state["legal_actions"][-1]}).json()
    assert state["outcome"]["results"][1] in ("loss", "draw")  # nobody beats minimax

    talk = http.post("/v1/episodes", json={
        "env": "discussion", "seats": ["user", f"{AGENT}@v1"], "rounds": 1,
        "temperature": 0.0, "task": {"question": "What is 2 + 3?", "kind": "math"}})
    assert talk.status_code == 201, talk.text
    done = http.post(f"/v1/episodes/{talk.json()['id']}/moves",
                     json={"move": "2 + 3 = 5.\nAnswer: 5"}).json()
    assert done["status"] == "finished"
    assert done["outcome"]["answers"][0][0] == "2 + 3 = 5.\nAnswer: 5"
    assert done["new_turns"][1]["player"] == f"{AGENT}@v1" and done["new_turns"][1]["version"] == 1


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ({"env": "tictactoe", "seats": ["user"]}, "seats"),
        ({"env": "tictactoe", "seats": [AGENT, AGENT]}, "'user'"),
        ({"env": "tictactoe", "seats": ["user", "bot:hanabi_simple"]}, "seats.1"),
        ({"env": "chess", "seats": ["user", AGENT]}, "env"),
        ({"env": "discussion", "seats": ["user", AGENT]}, "task"),
    ],
)
def test_bad_episode_is_422_naming_the_field(http, body, needle):
    resp = http.post("/v1/episodes", json=body)
    assert resp.status_code == 422
    assert needle in error_of(resp)["message"]


def test_an_episode_belongs_to_the_key_that_made_it(gateway, keys, http):
    """Another key cannot read or play it, and gets the same 404 as for a missing id."""
    game = http.post("/v1/episodes", json={"env": "tictactoe", "seats": ["user", "bot:random"]})
    assert game.status_code == 201
    eid = game.json()["id"]
    code, out = keys_cli("create", "someone-else", redis_url=gateway.redis_url)
    assert code == 0
    other = {"authorization": f"Bearer {printed_key(out)}"}
    try:
        seen = httpx.get(f"{gateway.url}/v1/episodes/{eid}", headers=other, timeout=TIMEOUT)
        played = httpx.post(f"{gateway.url}/v1/episodes/{eid}/moves", headers=other,
                            json={"move": game.json()["legal_actions"][0]}, timeout=TIMEOUT)
    finally:
        keys_cli("revoke", "someone-else", redis_url=gateway.redis_url)
    missing = http.get("/v1/episodes/ep-0000000000000000")
    for resp in (seen, played, missing):
        assert resp.status_code == 404 and error_of(resp)["code"] == "episode_not_found"
    assert error_of(seen)["message"].replace(eid, "ID") == error_of(missing)["message"].replace(
        "ep-0000000000000000", "ID")
    assert http.get(f"/v1/episodes/{eid}").json()["turns"] == game.json()["turns"]


def test_episode_with_unknown_agent_or_id_is_404(http):
    resp = http.post("/v1/episodes", json={"env": "tictactoe", "seats": ["user", "ghost"]})
    assert resp.status_code == 404 and error_of(resp)["param"] == "seats.1"
    assert http.get("/v1/episodes/ep-missing").status_code == 404


# --- runs -------------------------------------------------------------------------------------


def tiny_run_config() -> dict:
    """A run of the embedded stack on tiny-random, on free ports of this file's range."""
    vllm, worker, reward, gateway, trainer, judge = my_ports(6)
    return {
        "name": "gwrun",
        "models": {"tiny": {"model": "tiny-random", "port": vllm, "max_model_len": 256,
                            "max_loras": 1, "max_lora_rank": 8, "dtype": "float32"}},
        "agents": [{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16}],
        "environment": {"name": "tictactoe", "seats": ["player", "player"]},
        "ppo": {"batch_turns": 4, "minibatch_turns": 4},
        "trainer": {"max_updates": 1, "dtype": "fp32"},
        "workers": {"count": 1, "concurrency": 2, "queue_ahead": 4, "metrics_port": worker},
        "services": {"reward_port": reward, "gateway_port": gateway,
                     "trainer_metrics_port": trainer, "judge_port": judge},
    }


@contextlib.contextmanager
def own_run_status(gateway: Gateway, status: str) -> Iterator[None]:
    """The trainer status of the run this gateway belongs to (RUN_ID), as its trainer sets it."""
    client = redis.Redis.from_url(gateway.redis_url)
    key = f"agora:{RUN_ID}:state"
    client.hset(key, "status", status)
    try:
        yield
    finally:
        client.hdel(key, "status")


def test_bad_run_config_is_422_naming_the_field(http):
    cfg = tiny_run_config()
    cfg["ppo"]["learning_rte"] = 0.1
    resp = http.post("/v1/runs", content=yaml.safe_dump(cfg),
                     headers={"content-type": "application/yaml"})
    assert resp.status_code == 422
    error = error_of(resp)
    assert "ppo.learning_rte" in error["message"] and error["param"] == "ppo.learning_rte"
    assert http.post("/v1/runs", content=b"a: [unclosed",
                     headers={"content-type": "application/yaml"}).status_code == 400
    # What only the server's owner may choose, refused before validation (which would import
    # tool modules) and naming the field (agora/gateway/posted_config.py).
    for field, change in (("services.host", {"services": {"host": "0.0.0.0"}}),
                          ("judge.base_url", {"judge": {"base_url": "http://x.example/v1"}})):
        posted = {**tiny_run_config(), **change}
        refused = http.post("/v1/runs", json={"config": posted})
        assert refused.status_code == 422 and error_of(refused)["param"] == field


def test_run_start_status_stop_leaves_no_process(gateway, http):
    run_id = "gwapi-managed"
    with own_run_status(gateway, "finished"), contextlib.ExitStack() as cleanup:
        cleanup.callback(kill_leftovers, run_id)
        resp = http.post("/v1/runs", json={"config": tiny_run_config(), "run_id": run_id})
        assert resp.status_code == 201, resp.text
        run = resp.json()
        assert run["id"] == run_id and run["status"] == "starting" and run["pid"] > 0
        assert run["run_dir"] == str((gateway.runs_dir / run_id).resolve())

        second = http.post("/v1/runs", json={"config": tiny_run_config()})
        assert second.status_code == 409 and run_id in error_of(second)["message"]

        def phase() -> str:
            return http.get(f"/v1/runs/{run_id}").json()["phase"] or ""

        wait_for(lambda: "policy server" in phase(), 90, lambda: f"run phase ({phase()!r})")
        assert processes_of_run(run_id)  # the stack's services are being started

        # Whoever can write Redis points the record at another process group: the stop still
        # signals the gateway's own child, never that group.
        decoy = cleanup.enter_context(decoy_process())
        forge_record(gateway, run_id, pid=decoy.pid)
        stopped = http.post(f"/v1/runs/{run_id}/stop")
        assert stopped.status_code == 200, stopped.text
        assert stopped.json()["status"] == "stopped" and stopped.json()["exit_code"] is not None
        assert processes_of_run(run_id) == []
        assert decoy.poll() is None, "the stop signalled the group a forged record named"
        assert http.get("/v1/runs").json()["data"][-1]["status"] == "stopped"
        assert http.get("/v1/runs/nope").status_code == 404


@contextlib.contextmanager
def decoy_process() -> Iterator[subprocess.Popen]:
    """A process in its own group that nothing may signal (not the run's, no AGORA_RUN_ID)."""
    proc = subprocess.Popen(["sleep", "120"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def forge_record(gateway: Gateway, run_id: str, **fields) -> None:
    """Rewrite a run's record in Redis as an attacker with Redis access would."""
    client = redis.Redis.from_url(gateway.redis_url)
    raw = client.hget(RUNS_HASH, run_id)
    record = json.loads(raw) if raw else {
        "run_id": run_id, "name": "x", "pid": 1, "config_path": "", "log_path": "",
        "run_dir": "", "gateway_url": "", "started_at": time.time()}
    client.hset(RUNS_HASH, run_id, json.dumps({**record, **fields}))


def test_a_forged_run_record_reads_no_file_and_kills_nothing(gateway, http):
    """A record in Redis naming /etc/passwd as its log and another group as its pid: the
    gateway reads the run's files where it puts them and signals no process it did not start
    or cannot tie to the run."""
    run_id = "gwapi-forged"
    with decoy_process() as decoy:
        forge_record(gateway, run_id, pid=decoy.pid, log_path="/etc/passwd", run_dir="/etc",
                     config_path="/etc/passwd")
        forge_record(gateway, "../../etc", pid=decoy.pid)  # a key no run id can be
        try:
            view = http.get(f"/v1/runs/{run_id}").json()
            assert view["status"] == "failed"  # the decoy is no process of this run
            assert view["log"] == str((gateway.runs_dir / ".gateway" / f"{run_id}.log")
                                      .resolve())
            assert view["run_dir"] == str((gateway.runs_dir / run_id).resolve())
            assert "root:" not in json.dumps(view)
            assert http.post(f"/v1/runs/{run_id}/stop").status_code == 200
            assert decoy.poll() is None
            listed = [r["id"] for r in http.get("/v1/runs").json()["data"]]
            assert run_id in listed and "../../etc" not in listed
        finally:
            client = redis.Redis.from_url(gateway.redis_url)
            client.hdel(RUNS_HASH, run_id, "../../etc")


def kill_leftovers(run_id: str) -> None:
    """Only does something if the test failed half-way: kill what the run started."""
    for proc in tagged_processes(run_id):
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and processes_of_run(run_id):
        time.sleep(0.2)


def test_own_stack_run_blocks_new_runs(gateway, http):
    """This gateway belongs to run RUN_ID (AGORA_RUN_ID); until its trainer says finished, a
    new run would fight it for ports and CPUs."""
    with own_run_status(gateway, "training"):
        resp = http.post("/v1/runs", json={"config": tiny_run_config()})
    assert resp.status_code == 409 and RUN_ID in error_of(resp)["message"]


# --- metrics ----------------------------------------------------------------------------------


def test_gateway_metrics(gateway, keys, http):
    greedy(http, AGENT)
    httpx.get(f"{gateway.url}/v1/agents", timeout=TIMEOUT)  # no key: 401
    for _ in range(3):  # the slow key's 2/minute are spent by the third at the latest
        httpx.get(f"{gateway.url}/v1/models", timeout=TIMEOUT,
                  headers={"authorization": f"Bearer {keys.slow}"})
    text = httpx.get(f"{gateway.url}/metrics", timeout=TIMEOUT).text
    assert 'agora_gateway_requests_total{route="/v1/chat/completions",status="200"}' in text
    assert 'agora_gateway_requests_total{route="/v1/agents",status="401"}' in text
    assert 'agora_gateway_requests_total{route="/v1/models",status="429"}' in text
    assert re.search(r'agora_gateway_rate_limited_total\{key="slow"\} [1-9]', text)
    assert 'agora_gateway_request_seconds_bucket{le="0.1",route="/v1/models"}' in text
