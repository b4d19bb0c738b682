"""Reward service: verifiers behind HTTP. This slice verifies game outcomes; math, NLI and code
verifiers arrive with the next issues behind the same ``/v1/verify``."""

from __future__ import annotations

from typing import Literal

from fastapi import FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from agora.envs import ENVS
from agora.metrics import instrument
from agora.verifiers.game import GameVerdict, InvalidEpisode, RewardScheme, verify_game

MAX_ACTIONS = 512
MAX_ACTION_CHARS = 4096


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: Literal["game_outcome"] = "game_outcome"
    env: str = Field(..., description=f"one of {sorted(ENVS)}")
    actions: list[str] = Field(..., max_length=MAX_ACTIONS, description="action texts in order")
    seed: int = 0
    rewards: RewardScheme = Field(default_factory=RewardScheme)


app = FastAPI(title="agora reward service", version="0.1.0")
instrument(app, "reward")


@app.exception_handler(RequestValidationError)
async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's own 422, minus the echoed inputs: a NaN among them cannot be written as JSON,
    which turned the 422 into a 500 (and echoing a 2 MB body back helps no one)."""
    errors = [{k: v for k, v in err.items() if k != "input"} for err in exc.errors()]
    return JSONResponse(status_code=422, content={"detail": jsonable_encoder(errors)})


@app.get("/health")
def health() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/v1/verify", response_model=GameVerdict)
def verify(req: VerifyRequest) -> GameVerdict:
    if req.env not in ENVS:
        raise HTTPException(422, f"unknown env '{req.env}'; known: {sorted(ENVS)}")
    too_long = [i for i, a in enumerate(req.actions) if len(a) > MAX_ACTION_CHARS]
    if too_long:
        raise HTTPException(422, f"actions {too_long[:5]} exceed {MAX_ACTION_CHARS} characters")
    try:
        return verify_game(req.env, req.actions, req.rewards, req.seed)
    except InvalidEpisode as err:
        raise HTTPException(422, str(err)) from None
