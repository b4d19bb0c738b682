"""Request bodies in, vLLM's answers out: size limits, chat-body checks and forwarding.

Why a proxy and not our own generation code: vLLM already implements the whole OpenAI chat API
(sampling params, logprobs, tools, streaming); the gateway adds only what vLLM cannot know about
(agent names and versions, keys, limits) and turns every upstream failure into one error shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from agora.gateway.errors import GatewayError


async def read_body(request: Request, limit: int) -> bytes:
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


MAX_CHOICES = 8  # choices per chat request through the public gateway


def parse_json_object(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    # ValueError covers bad UTF-8, bad JSON and integers longer than Python's 4300-digit
    # conversion limit; RecursionError, arrays nested ~1000 deep (both were 500s, found by
    # tests/integration/test_hostile_api.py).
    except (ValueError, RecursionError) as err:
        raise GatewayError(400, f"request body is not valid JSON: {err}", "invalid_json") from None
    if not isinstance(body, dict):
        raise GatewayError(422, "request body must be a JSON object", "invalid_body")
    return body


def parse_chat_body(raw: bytes) -> dict:
    """The minimal checks we own; everything else (roles, sampling params) is vLLM's to judge,
    so its precise 400 messages reach the client unchanged."""
    body = parse_json_object(raw)
    if not isinstance(body.get("model"), str):
        message = "'model' is required and must be an agent name (a string)"
        raise GatewayError(422, message, "invalid_model", param="model")
    if not isinstance(body.get("messages"), list) or not body["messages"]:
        message = "'messages' is required and must be a non-empty list"
        raise GatewayError(422, message, "invalid_messages", param="messages")
    if not isinstance(body.get("stream", False), bool):
        raise GatewayError(422, "'stream' must be a boolean", "invalid_stream", param="stream")
    for field in ("n", "best_of"):
        # vLLM accepts up to 16384 choices per request: one public request could hold the
        # policy server until the gateway's timeout (found by
        # tests/integration/test_hostile_api.py).
        value = body.get(field, 1)
        if value is not None and not (type(value) is int and 1 <= value <= MAX_CHOICES):
            raise GatewayError(422, f"'{field}' must be an integer from 1 to {MAX_CHOICES}",
                               f"invalid_{field}", param=field)
    return body


# --- upstream errors --------------------------------------------------------------------------


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


# --- forwarding -------------------------------------------------------------------------------


async def post_json(http: httpx.AsyncClient, url: str, body: dict, agent: str) -> dict:
    """POST to vLLM and return its JSON, or raise the matching GatewayError."""
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
    return data


async def forward(http: httpx.AsyncClient, url: str, body: dict, model: str,
                  headers: dict[str, str] | None = None) -> Response:
    data = await post_json(http, url, body, model)
    data["model"] = model
    return JSONResponse(data, headers=headers)


async def forward_stream(http: httpx.AsyncClient, url: str, body: dict, model: str,
                         headers: dict[str, str] | None = None) -> Response:
    """Open the upstream stream first so a refused request still gets a proper status code; once
    bytes flow the status is sent, so a later failure becomes a final SSE error event (which the
    ``openai`` client raises as an APIError) instead of a silently truncated stream.

    Chunks pass through byte for byte, so they name the served LoRA name (``body["model"]``):
    the agent for its latest version, ``agent@v12`` for a pinned one."""
    try:
        resp = await http.send(http.build_request("POST", url, json=body), stream=True)
    except httpx.HTTPError as err:
        raise transport_error(err, url) from None
    if resp.status_code != 200:
        await resp.aread()
        await resp.aclose()
        raise upstream_error(resp, url, model)

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
        headers=headers,
        background=BackgroundTask(resp.aclose),
    )
