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

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agora.judge.cache import VerdictCache
from agora.judge.core import Backend, Judge
from agora.judge.errors import JudgeError
from agora.judge.llm import LLMBackend
from agora.judge.rubric_backend import RubricBackend
from agora.judge.schemas import PairwiseRequest, PairwiseResponse, ScoreRequest, ScoreResponse
from agora.judge.settings import JudgeSettings
from agora.ops.http import BodyLimit, add_validation_handler, app_on_first_access, instrument
from agora.ops.service_key import guard

MAX_BODY_BYTES = 256 * 1024
CONNECT_TIMEOUT_S = 5.0


def add_error_handlers(app: FastAPI) -> None:
    add_validation_handler(app)

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
                    constrained=settings.constrained,
                    logprobs=settings.logprobs,
                )
            app.state.judge = Judge(backends, settings.backend, cache)
            try:
                yield
            finally:
                await cache.close()

    app = FastAPI(title="agora judge service", version="0.1.0", lifespan=lifespan)
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes)
    guard(app)  # the service key on /v1 (agora/ops/service_key.py), before any body is read
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


__getattr__ = app_on_first_access(globals(), create_app)
