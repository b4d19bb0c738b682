"""Reward service: the verifiers of ``agora.rewards`` behind HTTP.

``/v1/verify`` replays a game, checks math or NLI answers, or runs programs against hidden tests
(request shapes: agora/rewards/schemas.py); ``/v1/score`` is the learned verifier. The logic
lives in ``agora.rewards.service`` (usable in-process); this module owns only HTTP: routes,
error shapes (``{"detail": ...}`` like the judge's), ``/health`` and ``/metrics``.

Configuration is the environment (agora/rewards/settings.py). ``create_app(settings)`` builds an
app for given settings (tests, the launcher); ``uvicorn services.reward.app:app`` builds it from
the environment on first access (PEP 562 module ``__getattr__``, as in the judge), so the module
imports without side effects and a bad variable fails before the port is bound.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Body, FastAPI, Request
from fastapi.responses import JSONResponse

from agora.ops.http import add_validation_handler, app_on_first_access, instrument
from agora.ops.service_key import guard
from agora.rewards.schemas import (
    AnyVerifyRequest,
    CodeVerifyResponse,
    MathVerifyResponse,
    NLIVerifyResponse,
    SandboxRunRequest,
    SandboxRunResponse,
    ScoreRequest,
    ScoreResponse,
)
from agora.rewards.service import RewardError, RewardService
from agora.rewards.settings import RewardSettings
from agora.rewards.verifiers.game import GameVerdict
from agora.sandbox.remote import ENV_VAR as SANDBOX_URL_VAR


def create_app(settings: RewardSettings | None = None) -> FastAPI:
    """The reward service for ``settings`` (default: from the environment)."""
    service = RewardService(settings or RewardSettings.from_env())
    # This service *is* the sandbox: a sandbox URL inherited from a shared environment would
    # make it post code to itself (agora/sandbox/remote.py).
    os.environ.pop(SANDBOX_URL_VAR, None)

    # Nothing else is warmed up at start: a game-only run should not pay reasoning-gym's ~5 s
    # import or a math-verify worker process. The first math request pays them (~2-6 s).
    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        service.warm()
        yield

    app = FastAPI(title="agora reward service", version="0.3.0", lifespan=lifespan)
    guard(app)  # the service key on /v1 (agora/ops/service_key.py): the sandbox is behind it
    instrument(app, "reward")
    add_validation_handler(app)

    @app.exception_handler(RewardError)
    async def _refused(_: Request, err: RewardError) -> JSONResponse:
        return JSONResponse(status_code=err.status, content={"detail": err.message})

    @app.get("/health", response_model=None)
    def health() -> dict[str, str] | JSONResponse:
        """503 while the sandbox cannot reach its isolation (AGORA_SANDBOX_ISOLATION): the
        stack must not start on a service that would score every program as failing."""
        if service.sandbox_problem is not None:
            return JSONResponse(status_code=503, content={"status": "unhealthy",
                                                          "detail": service.sandbox_problem})
        return {"status": "ok", **({"sandbox_run_limits": service.sandbox_run_limits}
                                   if service.sandbox_run_limits else {})}

    @app.post("/v1/sandbox/run", response_model=SandboxRunResponse)
    def sandbox_run(req: SandboxRunRequest) -> SandboxRunResponse:
        """Run one untrusted program (a rollout worker's tool call) in this service's sandbox:
        model-written code runs nowhere else (agora/sandbox/remote.py)."""
        return service.run_sandbox(req)

    @app.post("/v1/verify", response_model=GameVerdict | MathVerifyResponse | NLIVerifyResponse
              | CodeVerifyResponse)
    def verify(req: Annotated[AnyVerifyRequest, Body()]
               ) -> GameVerdict | MathVerifyResponse | NLIVerifyResponse | CodeVerifyResponse:
        return service.verify(req)

    @app.post("/v1/score", response_model=ScoreResponse)
    def score(req: ScoreRequest) -> ScoreResponse:
        """The learned verifier's score of each answer to the question (422 without a model)."""
        return service.score(req)

    return app


__getattr__ = app_on_first_access(globals(), create_app)
