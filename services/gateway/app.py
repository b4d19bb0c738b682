"""Gateway: the public, OpenAI-compatible door to the run's agents.

``/v1/models`` lists the agents of the run config and ``/v1/chat/completions`` takes an agent name
as ``model``. The request is forwarded unchanged (apart from ``model``) to the vLLM policy server
of the agent's base model, asking for the agent's LoRA adapter by name. The trainer hot-swaps that
adapter in place (``load_inplace``), so the name always serves the agent's latest weights and the
gateway needs no version bookkeeping for "latest".

Why a proxy and not our own generation code: vLLM already implements the whole OpenAI chat API
(sampling params, logprobs, tools, streaming); the gateway adds only what vLLM cannot know about:
agent names, size limits, and errors in one shape (OpenAI's ``{"error": {...}}``) whether they come
from us or from upstream, so the official ``openai`` client raises its usual exceptions.

Configuration: ``create_app(cfg)`` builds an app for a given RunConfig (tests, the launcher).
``uvicorn services.gateway.app:app`` needs a module attribute, which is built on first access
from the YAML file named by ``AGORA_CONFIG`` (PEP 562 module ``__getattr__``). Why lazily: the
module stays importable without a config (tests, tooling, ``create_app`` users), while a server
started without one still fails at once, before binding its port, with a message naming the
variable. ``AGORA_GATEWAY_TIMEOUT_S`` (default 120) bounds each upstream read.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException as StarletteHTTPException

from agora.config import AgentConfig, ConfigError, RunConfig, load_config
from agora.metrics import instrument

CONFIG_ENV = "AGORA_CONFIG"
TIMEOUT_ENV = "AGORA_GATEWAY_TIMEOUT_S"
MAX_BODY_BYTES = 1024 * 1024
DEFAULT_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 5.0
INVALID = "invalid_request_error"


class GatewayError(Exception):
    """An error answered to the client in OpenAI's error shape."""

    def __init__(
        self, status: int, message: str, code: str, type_: str = INVALID, param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param

    def body(self) -> dict:
        error = {"message": self.message, "type": self.type, "param": self.param}
        return {"error": {**error, "code": self.code}}


def adapter_name(agent: AgentConfig) -> str:
    """The LoRA adapter name the policy server knows this agent by (DESIGN: the agent's name).

    Streamed chunks are passed through byte for byte, which is only correct while this equals
    the agent name; if pinned versions ever get their own adapter names, rewrite the chunks too.
    """
    return agent.name


# --- request parsing ------------------------------------------------------------------------


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """Read at most ``limit`` bytes. Content-Length is checked first so an honest oversize
    request is refused unread; chunked bodies are counted as they arrive so none is buffered
    past the limit."""
    too_large = GatewayError(413, f"request body exceeds {limit} bytes", "request_too_large")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > limit:
            raise too_large
    return bytes(body)


def parse_chat_body(raw: bytes) -> dict:
    """The minimal checks we own; everything else (roles, sampling params) is vLLM's to judge,
    so its precise 400 messages reach the client unchanged."""
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise GatewayError(400, f"request body is not valid JSON: {err}", "invalid_json") from None
    if not isinstance(body, dict):
        raise GatewayError(422, "request body must be a JSON object", "invalid_body")
    if not isinstance(body.get("model"), str):
        message = "'model' is required and must be an agent name (a string)"
        raise GatewayError(422, message, "invalid_model", param="model")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        message = "'messages' is required and must be a non-empty list"
        raise GatewayError(422, message, "invalid_messages", param="messages")
    if not isinstance(body.get("stream", False), bool):
        raise GatewayError(422, "'stream' must be a boolean", "invalid_stream", param="stream")
    return body


def find_agent(cfg: RunConfig, name: str) -> AgentConfig:
    try:
        return cfg.agent(name)
    except KeyError:
        known = [a.name for a in cfg.agents]
        message = f"The model '{name}' does not exist; agents: {known}"
        raise GatewayError(404, message, "model_not_found", param="model") from None


# --- upstream ---------------------------------------------------------------------------------


def upstream_detail(resp: httpx.Response) -> tuple[str, str | None]:
    """(message, param) of an upstream error, whichever shape vLLM used (``{"error": {...}}``,
    or the older flat ``{"object": "error", "message": ...}``), else the raw text."""
    try:
        data = resp.json()
    except ValueError:
        return (resp.text[:1000] or resp.reason_phrase), None
    if isinstance(data, dict):
        inner = data["error"] if isinstance(data.get("error"), dict) else data
        if isinstance(inner.get("message"), str):
            param = inner.get("param")
            return inner["message"], param if isinstance(param, str) else None
    return resp.text[:1000], None


def upstream_error(resp: httpx.Response, url: str, agent: str) -> GatewayError:
    """4xx keep their status and vLLM's message (the client's fault, e.g. max_tokens too large);
    vLLM's own ``type`` is its exception class name, so the OpenAI type is set here. A 404 means
    the agent's adapter is not loaded (vLLM lists only base names), which the message says.
    5xx become 502 because the failure is the policy server's, not the gateway's."""
    message, param = upstream_detail(resp)
    status = resp.status_code
    if status == 404:
        message = f"agent '{agent}' is not loaded on its policy server: {message}"
        return GatewayError(404, message, "model_not_found", param=param)
    if status < 500:
        return GatewayError(status, message, "upstream_error", param=param)
    message = f"policy server {url} failed with HTTP {status}: {message}"
    return GatewayError(502, message, "upstream_error", "upstream_error")


def transport_error(err: httpx.HTTPError, url: str) -> GatewayError:
    if isinstance(err, httpx.TimeoutException) and not isinstance(err, httpx.ConnectTimeout):
        message = f"policy server {url} did not answer in time ({type(err).__name__})"
        return GatewayError(504, message, "upstream_timeout", "upstream_timeout")
    message = f"policy server {url} is unreachable: {type(err).__name__}: {err}"
    return GatewayError(502, message, "upstream_unavailable", "upstream_unavailable")


async def forward(http: httpx.AsyncClient, url: str, body: dict, agent: str) -> Response:
    try:
        resp = await http.post(url, json=body)
    except httpx.HTTPError as err:
        raise transport_error(err, url) from None
    if resp.status_code != 200:
        raise upstream_error(resp, url, agent)
    try:
        data = resp.json()
    except ValueError:
        message = f"policy server {url} answered 200 with a body that is not JSON"
        raise GatewayError(502, message, "upstream_error", "upstream_error") from None
    data["model"] = agent
    return JSONResponse(data)


async def forward_stream(http: httpx.AsyncClient, url: str, body: dict, agent: str) -> Response:
    """Open the upstream stream first so a refused request still gets a proper status code; once
    bytes flow the status is sent, so a later failure becomes a final SSE error event (which the
    ``openai`` client raises as an APIError) instead of a silently truncated stream."""
    try:
        resp = await http.send(http.build_request("POST", url, json=body), stream=True)
    except httpx.HTTPError as err:
        raise transport_error(err, url) from None
    if resp.status_code != 200:
        await resp.aread()
        await resp.aclose()
        raise upstream_error(resp, url, agent)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in resp.aiter_raw():
                yield chunk
        except httpx.HTTPError as err:
            gerr = transport_error(err, url)
            yield f"data: {json.dumps(gerr.body())}\n\n".encode()
        finally:
            # Also on client disconnect (the background task may then never run): closing the
            # upstream response returns its connection to the pool and makes vLLM abort.
            await resp.aclose()

    return StreamingResponse(
        relay(),
        media_type=resp.headers.get("content-type", "text/event-stream"),
        background=BackgroundTask(resp.aclose),
    )


# --- app ----------------------------------------------------------------------------------------


def model_entry(agent: AgentConfig, created: int) -> dict:
    return {
        "id": agent.name,
        "object": "model",
        "created": created,
        "owned_by": "agora",
        "base": agent.base,
        "trainable": agent.trainable,
    }


def add_error_handlers(app: FastAPI) -> None:
    """Every error leaves in OpenAI's shape, including Starlette's own 404/405."""

    @app.exception_handler(GatewayError)
    async def _gateway_error(_: Request, err: GatewayError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> JSONResponse:
        gerr = GatewayError(err.status_code, str(err.detail), f"http_{err.status_code}")
        return JSONResponse(gerr.body(), status_code=err.status_code, headers=err.headers)


def create_app(cfg: RunConfig, timeout_s: float = DEFAULT_TIMEOUT_S) -> FastAPI:
    """The gateway for one run config. ``timeout_s`` bounds each upstream read (a generation
    longer than this answers 504); connecting gets a short budget so a dead server is a fast 502.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        timeout = httpx.Timeout(timeout_s, connect=CONNECT_TIMEOUT_S)
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
            app.state.http = http
            yield

    app = FastAPI(title="agora gateway", version="0.1.0", lifespan=lifespan)
    app.state.cfg = cfg
    instrument(app, "gateway")
    add_error_handlers(app)
    created = int(time.time())

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    def list_models() -> dict:
        return {"object": "list", "data": [model_entry(a, created) for a in cfg.agents]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        body = parse_chat_body(await read_body(request))
        agent = find_agent(cfg, body["model"])
        body["model"] = adapter_name(agent)
        url = cfg.policy_url(agent.name) + "/v1/chat/completions"
        http: httpx.AsyncClient = request.app.state.http
        if body.get("stream"):
            return await forward_stream(http, url, body, agent.name)
        return await forward(http, url, body, agent.name)

    return app


def app_from_env() -> FastAPI:
    path = os.environ.get(CONFIG_ENV)
    if not path:
        raise ConfigError(
            f"{CONFIG_ENV} is not set: point it at the run config YAML, e.g. "
            f"{CONFIG_ENV}=configs/tictactoe_selfplay.yaml uvicorn services.gateway.app:app"
        )
    timeout_s = float(os.environ.get(TIMEOUT_ENV, DEFAULT_TIMEOUT_S))
    return create_app(load_config(path), timeout_s=timeout_s)


def __getattr__(name: str) -> FastAPI:
    """Build ``app`` on first access (see the module docstring) and keep it."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = app_from_env()
    globals()["app"] = built
    return built
