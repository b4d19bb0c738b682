"""Gateway against the real thing: vLLM's CPU server with a PEFT adapter loaded as agent "alice",
the gateway under real uvicorn started from a YAML config via AGORA_CONFIG, and the official
``openai`` client. Dead and hanging policy servers are real sockets (nothing listening / a
listener that never answers), so 502 and 504 come from real connection behaviour."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from agora.config.agents import BaseModelConfig
from agora.config.run import parse_config
from agora.stack.procs import Service, free_port
from tests.conftest import uvicorn_service

TIMEOUT = httpx.Timeout(180.0, connect=10.0)
HELLO = [{"role": "user", "content": "Say hello."}]


def make_adapter(model_path: str, out_dir: Path) -> None:
    """A LoRA on q/v whose B matrices are random (PEFT initialises B to zero, which would make
    the adapter identical to the base and the routing untestable)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    lora = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(model, lora)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
    peft_model.save_pretrained(str(out_dir))


@pytest.fixture(scope="module")
def alice(vllm_tiny, tiny_model, tmp_path_factory) -> str:
    """Load the adapter into vLLM under the agent's name, as the trainer does."""
    base_url, _ = vllm_tiny
    out = tmp_path_factory.mktemp("alice-adapter")
    make_adapter(tiny_model, out)
    body = {"lora_name": "alice", "lora_path": str(out), "load_inplace": True}
    resp = httpx.post(f"{base_url}/v1/load_lora_adapter", json=body, timeout=TIMEOUT)
    assert resp.status_code == 200, resp.text
    return "alice"


@pytest.fixture(scope="module")
def hanging_port() -> Iterator[int]:
    """A listener that never accepts: connects succeed (kernel backlog), answers never come."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture(scope="module")
def config_path(vllm_tiny, hanging_port, tmp_path_factory) -> Path:
    """alice on the real vLLM; bob on a port with nothing listening; carol on the hanging one;
    dave on the real vLLM but with no adapter loaded."""
    _, tiny_cfg = vllm_tiny
    data = {
        "name": "gateway-test",
        "models": {
            "tiny": tiny_cfg.model_dump(),
            "dead": BaseModelConfig(model="tiny-random", port=free_port()).model_dump(),
            "hang": BaseModelConfig(model="tiny-random", port=hanging_port).model_dump(),
        },
        "agents": [
            {"name": "alice", "base": "tiny", "trainable": True},
            {"name": "bob", "base": "dead", "trainable": False},
            {"name": "carol", "base": "hang", "trainable": False},
            {"name": "dave", "base": "tiny", "trainable": False},
        ],
        "environment": {"name": "tictactoe", "seats": ["alice", "alice"]},
        "services": {"gateway_port": free_port()},
    }
    parse_config(data)  # fail here, not inside the server, if the test config is wrong
    path = tmp_path_factory.mktemp("gateway-config") / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def start_gateway(config_path: Path, log_path: Path, **env: str) -> tuple[Service, str]:
    port = free_port()
    svc = uvicorn_service(
        "gateway",
        "services.gateway.app:app",
        port,
        log_path,
        env={"AGORA_CONFIG": str(config_path), **env},
    ).start()
    try:
        svc.wait_healthy(120)
    except Exception:
        svc.stop()
        raise
    return svc, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def gateway(alice, config_path, logs_dir) -> Iterator[str]:
    svc, url = start_gateway(config_path, logs_dir / "gateway.log")
    try:
        yield url
    finally:
        svc.stop()


def chat(url: str, model: str = "alice", **extra) -> httpx.Response:
    body = {"model": model, "messages": HELLO, "max_tokens": 8, "temperature": 0.0, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=TIMEOUT)


def error_of(resp: httpx.Response) -> dict:
    """The OpenAI error object; asserts the shape on the way."""
    error = resp.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert {"message", "type", "code"} <= set(error)
    return error


# --- happy paths ------------------------------------------------------------------------------


def test_health(gateway):
    resp = httpx.get(f"{gateway}/health", timeout=TIMEOUT)
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_models_lists_agents(gateway):
    resp = httpx.get(f"{gateway}/v1/models", timeout=TIMEOUT)
    assert resp.status_code == 200
    data = resp.json()
    assert data["object"] == "list"
    by_id = {m["id"]: m for m in data["data"]}
    assert set(by_id) == {"alice", "bob", "carol", "dave"}
    alice = by_id["alice"]
    assert alice["object"] == "model" and alice["owned_by"] == "agora"
    assert alice["base"] == "tiny" and alice["trainable"] is True
    assert by_id["bob"]["trainable"] is False


def test_chat_completion_structure(gateway):
    resp = chat(gateway)
    assert resp.status_code == 200, resp.text
    data = resp.json()
    assert data["model"] == "alice"
    assert data["object"] == "chat.completion"
    assert len(data["choices"]) >= 1
    message = data["choices"][0]["message"]
    assert message["role"] == "assistant" and isinstance(message["content"], str)
    assert data["usage"]["completion_tokens"] <= 8


def test_greedy_matches_vllm_directly_and_uses_the_adapter(gateway, vllm_tiny):
    """Same tokens and logprobs as asking vLLM for "alice" directly, and not the base model's:
    the gateway forwards faithfully and routes to the adapter."""
    base_url, _ = vllm_tiny
    extra = {"logprobs": True, "top_logprobs": 1}
    via_gateway = chat(gateway, **extra).json()["choices"][0]
    direct = chat(base_url, **extra).json()["choices"][0]
    base = chat(base_url, model="base", **extra).json()["choices"][0]

    def lps(choice: dict) -> list[float]:
        return [t["logprob"] for t in choice["logprobs"]["content"]]

    assert via_gateway["message"]["content"] == direct["message"]["content"]
    assert lps(via_gateway) == pytest.approx(lps(direct), abs=1e-4)
    assert lps(via_gateway) != pytest.approx(lps(base), abs=1e-4)


def test_streaming_sse_passthrough(gateway):
    body = {
        "model": "alice",
        "messages": HELLO,
        "max_tokens": 8,
        "temperature": 0.0,
        "stream": True,
    }
    with httpx.stream("POST", f"{gateway}/v1/chat/completions", json=body, timeout=TIMEOUT) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in resp.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines), lines
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line.removeprefix("data: ")) for line in lines[:-1]]
    assert chunks and all(c["model"] == "alice" for c in chunks)
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    whole = chat(gateway).json()["choices"][0]["message"]["content"]
    assert streamed == whole


def test_openai_client(gateway):
    client = openai.OpenAI(base_url=f"{gateway}/v1", api_key="unused", max_retries=0, timeout=180.0)
    assert "alice" in [m.id for m in client.models.list()]
    completion = client.chat.completions.create(
        model="alice", messages=HELLO, max_tokens=8, temperature=0.0
    )
    assert completion.model == "alice"
    assert completion.choices and completion.choices[0].message.role == "assistant"

    stream = client.chat.completions.create(
        model="alice", messages=HELLO, max_tokens=8, temperature=0.0, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == completion.choices[0].message.content

    with pytest.raises(openai.NotFoundError, match="nobody"):
        client.chat.completions.create(model="nobody", messages=HELLO, max_tokens=8)


# --- client errors ----------------------------------------------------------------------------


def test_unknown_agent_is_404(gateway):
    for stream in (False, True):
        resp = chat(gateway, model="nobody", stream=stream)
        assert resp.status_code == 404
        error = error_of(resp)
        assert "nobody" in error["message"] and "alice" in error["message"]
        assert error["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("content", "status", "needle"),
    [
        (b"{not json", 400, "JSON"),
        (b"[1, 2]", 422, "JSON object"),
        (json.dumps({"model": "alice"}).encode(), 422, "messages"),
        (json.dumps({"model": "alice", "messages": "hi"}).encode(), 422, "messages"),
        (json.dumps({"messages": HELLO}).encode(), 422, "model"),
        (
            json.dumps({"model": "alice", "messages": HELLO, "stream": "yes"}).encode(),
            422,
            "stream",
        ),
        (json.dumps({"model": "alice", "messages": HELLO, "n": 1000}).encode(), 422, "'n'"),
        (json.dumps({"model": "alice", "messages": HELLO, "n": "2"}).encode(), 422, "'n'"),
    ],
)
def test_bad_body_is_4xx_json(gateway, content, status, needle):
    resp = httpx.post(
        f"{gateway}/v1/chat/completions",
        content=content,
        headers={"content-type": "application/json"},
        timeout=TIMEOUT,
    )
    assert resp.status_code == status
    assert needle in error_of(resp)["message"]


def test_upstream_4xx_keeps_status_and_message(gateway):
    """vLLM rejects max_tokens beyond max_model_len with a 400 naming the parameter."""
    resp = chat(gateway, max_tokens=100_000)
    assert resp.status_code == 400
    assert "max_tokens" in error_of(resp)["message"]


def test_agent_without_loaded_adapter_is_404(gateway):
    """vLLM's own 404 (its message lists only base names) keeps its status, and says which
    agent is missing from its policy server."""
    for stream in (False, True):
        resp = chat(gateway, model="dave", stream=stream)
        assert resp.status_code == 404
        error = error_of(resp)
        assert "dave" in error["message"] and "not loaded" in error["message"]


def test_oversize_body_is_413(gateway):
    big = {"model": "alice", "messages": [{"role": "user", "content": "x" * (1024 * 1024)}]}
    resp = httpx.post(f"{gateway}/v1/chat/completions", json=big, timeout=TIMEOUT)
    assert resp.status_code == 413
    assert error_of(resp)["code"] == "request_too_large"


def test_oversize_chunked_body_is_413(gateway):
    """No Content-Length to trust: the limit is enforced while reading."""

    def chunks() -> Iterator[bytes]:
        yield b'{"model": "alice", "messages": [{"role": "user", "content": "'
        for _ in range(20):
            yield b"x" * 65536
        yield b'"}]}'

    resp = httpx.post(f"{gateway}/v1/chat/completions", content=chunks(), timeout=TIMEOUT,
                      headers={"content-type": "application/json"})
    assert resp.status_code == 413


def test_unknown_route_is_openai_shaped_404(gateway):
    resp = httpx.get(f"{gateway}/v1/nothing", timeout=TIMEOUT)
    assert resp.status_code == 404
    error_of(resp)


# --- upstream failures ------------------------------------------------------------------------


def test_unreachable_policy_server_is_502(gateway):
    for stream in (False, True):
        resp = chat(gateway, model="bob", stream=stream)
        assert resp.status_code == 502
        error = error_of(resp)
        assert "unreachable" in error["message"]
        assert error["code"] == "upstream_unavailable"


def test_hanging_policy_server_is_504(config_path, logs_dir):
    """A second gateway with a 1 s read budget; carol's server accepts but never answers."""
    svc, url = start_gateway(
        config_path, logs_dir / "gateway-timeout.log", AGORA_GATEWAY_TIMEOUT_S="1"
    )
    try:
        for stream in (False, True):
            resp = chat(url, model="carol", stream=stream)
            assert resp.status_code == 504
            assert error_of(resp)["code"] == "upstream_timeout"
    finally:
        svc.stop()


# --- operations -------------------------------------------------------------------------------


def test_metrics(gateway):
    chat(gateway, model="nobody")
    resp = httpx.get(f"{gateway}/metrics", timeout=TIMEOUT)
    assert resp.status_code == 200
    lines = [
        line
        for line in resp.text.splitlines()
        if line.startswith("agora_http_requests_total{") and 'service="gateway"' in line
    ]
    assert any('route="/v1/chat/completions"' in line for line in lines), lines


def test_start_without_config_fails_clearly(tmp_path, monkeypatch):
    """The module imports without AGORA_CONFIG; serving it refuses with a message naming it."""
    monkeypatch.delenv("AGORA_CONFIG", raising=False)
    import services.gateway.app as gateway_module

    assert callable(gateway_module.create_app)
    port = free_port()
    svc = uvicorn_service("gateway", "services.gateway.app:app", port, tmp_path / "gw.log")
    svc.start()
    try:
        assert svc.process is not None
        code = svc.process.wait(timeout=60)
    finally:
        svc.stop()
    assert code != 0
    assert "AGORA_CONFIG" in (tmp_path / "gw.log").read_text()
