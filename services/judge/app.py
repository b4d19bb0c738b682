"""Judge service: ``/v1/judge/pairwise`` and ``/v1/judge/score`` over ``agora.judge``.

The logic lives in ``agora.judge`` (usable in-process too); this module owns only HTTP: the body
size cap (413), error shapes (``{"detail": ...}`` like the reward service), the lifetimes of the
HTTP client and the Redis connection, and ``/health`` + ``/metrics``.

Configuration is the environment (see ``agora.judge.settings``). ``create_app(settings)`` builds
an app for given settings (tests, the launcher); ``uvicorn services.judge.app:app`` builds it
from the environment on first access (PEP 562 module ``__getattr__``, as in the gateway), so the
module imports without side effects and a bad variable fails before the port is bound.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agora.judge.cache import VerdictCache
from agora.judge.core import Backend, Judge
from agora.judge.errors import JudgeError
from agora.judge.llm import LLMBackend
from agora.judge.rubric_backend import RubricBackend
from agora.judge.schemas import PairwiseRequest, PairwiseResponse, ScoreRequest, ScoreResponse
from agora.judge.settings import JudgeSettings
from agora.ops.metrics import instrument

MAX_BODY_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 5.0


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


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        """FastAPI's 422 minus the echoed inputs (a 32 kB candidate echoed back helps no one)."""
        errors = [{k: v for k, v in err.items() if k != "input"} for err in exc.errors()]
        # ctx may hold the ValueError a validator raised: its message, not "{}".
        detail = jsonable_encoder(errors, custom_encoder={Exception: str})
        return JSONResponse(status_code=422, content={"detail": detail})

    @app.exception_handler(JudgeError)
    async def _judge_error(_: Request, err: JudgeError) -> JSONResponse:
        return JSONResponse(status_code=err.status, content={"detail": err.message})


def create_app(
    settings: JudgeSettings | None = None, max_body_bytes: int = MAX_BODY_BYTES
) -> FastAPI:
    """The judge service for ``settings`` (default: from the environment)."""
    settings = settings or JudgeSettings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        timeout = httpx.Timeout(settings.timeout_s, connect=CONNECT_TIMEOUT_S)
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
        cache = VerdictCache(settings.redis_url, settings.cache_ttl_s)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
            backends: dict[str, Backend] = {"rubric": RubricBackend()}
            if settings.base_url:
                backends["llm"] = LLMBackend(
                    settings.base_url,
                    settings.model,
                    api_key=settings.api_key,
                    http=http,
                    max_tokens=settings.max_tokens,
                    attempts=settings.attempts,
                )
            app.state.judge = Judge(backends, settings.backend, cache)
            try:
                yield
            finally:
                await cache.close()

    app = FastAPI(title="agora judge service", version="0.1.0", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    instrument(app, "judge")  # added after BodyLimit, so it is outermost and sees the 413s too
    add_error_handlers(app)

    @app.get("/health")
    async def health(request: Request) -> dict:
        judge: Judge = request.app.state.judge
        return {
            "status": "ok",
            "backend": settings.backend,
            "backends": sorted(judge.backends),
            "model": settings.model if settings.base_url else None,
            "cache": await judge.cache.status(),
        }

    @app.post("/v1/judge/pairwise", response_model=PairwiseResponse)
    async def pairwise(req: PairwiseRequest, request: Request) -> PairwiseResponse:
        """Which of a and b is better under the rubric, asked in both orders."""
        return await request.app.state.judge.pairwise(req)

    @app.post("/v1/judge/score", response_model=ScoreResponse)
    async def score(req: ScoreRequest, request: Request) -> ScoreResponse:
        """Rubric scores for one response."""
        return await request.app.state.judge.score(req)

    return app


def __getattr__(name: str) -> FastAPI:
    """Build ``app`` from the environment on first access (see the module docstring)."""
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    built = create_app()
    globals()["app"] = built
    return built
