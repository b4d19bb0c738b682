"""HTTP pieces every agora service app shares: the request-body cap (413 before parsing), the
422 that does not echo inputs, and Prometheus instrumentation (``agora.ops.metrics.instrument``).

The gateway keeps its own error shapes (OpenAI's ``{"error": {...}}``, which its clients parse),
so it uses the body cap's idea in its proxy rather than this middleware.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agora.ops.metrics import instrument

__all__ = ["BodyLimit", "add_validation_handler", "app_on_first_access", "instrument"]


class BodyLimit:
    """Refuse request bodies over ``max_bytes`` with 413 before FastAPI parses them.

    A declared Content-Length is checked unread; a chunked body is counted as it arrives and
    buffered only up to the limit, then replayed to the app. Pure ASGI (not BaseHTTPMiddleware)
    because the body has to be intercepted before the route reads it.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await self._refuse(send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"detail": f"request body exceeds {self.max_bytes} bytes"}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def add_validation_handler(app: FastAPI) -> None:
    """FastAPI's 422, minus the echoed inputs: a NaN among them cannot be written as JSON (which
    turned the 422 into a 500), and echoing a 2 MB body back helps no one. ``ctx`` may hold the
    ValueError a validator raised: its message, not "{}"."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in err.items() if k != "input"} for err in exc.errors()]
        detail = jsonable_encoder(errors, custom_encoder={Exception: str})
        return JSONResponse(status_code=422, content={"detail": detail})


def app_on_first_access(module_globals: dict[str, Any],
                        build: Callable[[], FastAPI]) -> Callable[[str], FastAPI]:
    """A module ``__getattr__`` (PEP 562) that builds the service's ``app`` from the environment
    the first time ``uvicorn services.<name>.app:app`` asks for it, and keeps it: the module
    imports without side effects (tests call ``create_app(settings)``), and a bad variable
    fails before the port is bound."""

    def __getattr__(name: str) -> FastAPI:
        if name != "app":
            raise AttributeError(f"module {module_globals['__name__']!r} has no attribute {name!r}")
        built = build()
        module_globals["app"] = built
        return built

    return __getattr__
