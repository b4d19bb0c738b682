"""Reward service: verifiers behind HTTP. ``/v1/verify`` takes one of four request shapes,
told apart by ``kind``: "game" (the default, so the original game requests without ``kind``
still work) replays a game; "math" and "nli" check a list of responses (e.g. one per agent per
discussion turn) against one task's ground truth; "code" runs programs against hidden tests in
the sandbox.

The learned verifier (a classifier trained by ``agora verifier train``) is served by
``/v1/score`` and can replace or be blended with the rule reward of math/nli requests
(``mode``). Environment:

- ``AGORA_REWARD_MODEL``: the classifier's folder; loaded once, in the background at start-up
  (so ``/health`` is up at once; the first scoring request waits for it). Unset: ``/v1/score``
  and non-rule modes answer 422 naming the variable (503 if the model is set but failed to load).
- ``AGORA_REWARD_BLEND``: default weight of the rule reward in mode "blend" (0.5).
- ``AGORA_SANDBOX_CONCURRENCY``: code runs at the same time, over all requests (CPU count).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from agora.data import NLILabel, TaskError, TaskRef
from agora.envs import ENVS
from agora.ops.metrics import LEARNED_SCORES, VERIFICATIONS, instrument
from agora.rewards.verifiers.code import CodeVerdict, expected_test_names, extract_code, verify_code
from agora.rewards.verifiers.game import GameVerdict, InvalidEpisode, RewardScheme, verify_game
from agora.rewards.verifiers.learned import LazyVerifier, VerifierUnavailable, probability
from agora.rewards.verifiers.math import verify_math
from agora.rewards.verifiers.nli import verify_nli
from agora.sandbox.runner import SandboxLimits

MAX_ACTIONS = 512
MAX_ACTION_CHARS = 4096
MAX_RESPONSES = 256
MAX_RESPONSE_CHARS = 32768
# A code response costs a sandboxed process for up to its wall-clock limit: far fewer per call.
MAX_CODE_RESPONSES = 32
MAX_TESTS_CHARS = 65536


def _env_blend() -> float:
    """AGORA_REWARD_BLEND, checked at import: a bad value must stop the service, not turn
    every blended reward into NaN."""
    raw = os.environ.get("AGORA_REWARD_BLEND", "0.5")
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"AGORA_REWARD_BLEND must be a number in [0, 1], got {raw!r}")
    return value


DEFAULT_BLEND = _env_blend()
LEARNED = LazyVerifier(os.environ.get("AGORA_REWARD_MODEL"))
SANDBOX_SLOTS = threading.BoundedSemaphore(
    max(1, int(os.environ.get("AGORA_SANDBOX_CONCURRENCY", os.cpu_count() or 1)))
)


class VerifyRequest(BaseModel):
    """A game to replay (``kind`` may be left out: that is how the first clients send it)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["game"] = "game"
    task: Literal["game_outcome"] = "game_outcome"
    env: str = Field(..., description=f"one of {sorted(ENVS)}")
    actions: list[str] = Field(..., max_length=MAX_ACTIONS, description="action texts in order")
    seed: int = 0
    num_seats: int | None = Field(None, ge=1, le=8, description="players, for games with a "
                                  "variable count (hanabi); default: the game's default")
    rewards: RewardScheme = Field(default_factory=RewardScheme)
    opening: list[str] = Field(default_factory=list, max_length=MAX_ACTIONS, description=
                               "moves pre-played before 'actions' (a curriculum's opening); "
                               "they are nobody's turns and get no reward")


class TaskRewards(BaseModel):
    # Same reasons as RewardScheme: typos must fail, NaN must not become a null reward.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    correct: float = 1.0
    wrong: float = 0.0
    unparsable: float | None = Field(
        None, description="reward of a response with no answer in it; default: 'wrong'"
    )


class _TaskVerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    task: TaskRef
    responses: list[Annotated[str, Field(max_length=MAX_RESPONSE_CHARS)]] = Field(
        ..., min_length=1, max_length=MAX_RESPONSES, description="free-text answers to check"
    )
    rewards: TaskRewards = Field(default_factory=TaskRewards)
    mode: Literal["rule", "learned", "blend"] = Field(
        "rule", description="the reward: the rule verifier's, the learned verifier's, or a mix"
    )
    blend_weight: float | None = Field(
        None, ge=0.0, le=1.0,
        description="mode 'blend': reward = w * rule + (1 - w) * learned; "
                    "default AGORA_REWARD_BLEND (0.5)",
    )

    @model_validator(mode="after")
    def _mode_needs(self) -> _TaskVerifyRequest:
        if self.blend_weight is not None and self.mode != "blend":
            raise ValueError(f"blend_weight applies to mode 'blend' only, not '{self.mode}'")
        if self.mode != "rule" and not self.task.question.strip():
            raise ValueError(f"mode '{self.mode}' needs task.question: the learned verifier "
                             "reads the question with each answer")
        return self


class MathVerifyRequest(_TaskVerifyRequest):
    kind: Literal["math"]


class NLIVerifyRequest(_TaskVerifyRequest):
    kind: Literal["nli"]


class CodeLimits(BaseModel):
    """Sandbox limits a client may choose, within what the service is willing to spend."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    cpu_seconds: int = Field(5, ge=1, le=30)
    wall_seconds: float = Field(10.0, gt=0.0, le=60.0)
    memory_mb: int = Field(512, ge=64, le=2048)
    max_output_bytes: int = Field(64 * 1024, ge=1024, le=1024 * 1024)

    def sandbox(self) -> SandboxLimits:
        return SandboxLimits(cpu_seconds=self.cpu_seconds, wall_seconds=self.wall_seconds,
                             memory_mb=self.memory_mb, max_output_bytes=self.max_output_bytes)


class CodeRewards(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    partial: bool = Field(True, description="reward the pass rate; false: all tests or nothing")
    passed: float = Field(1.0, description="reward of a clean pass of every test")
    failed: float = Field(0.0, description="reward of no test passed")


class CodeVerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    kind: Literal["code"]
    code: str | None = Field(None, max_length=MAX_RESPONSE_CHARS, description="a program, run "
                             "as is (give this or 'responses')")
    responses: list[Annotated[str, Field(max_length=MAX_RESPONSE_CHARS)]] | None = Field(
        None, min_length=1, max_length=MAX_CODE_RESPONSES,
        description="model answers; each one's program is its last ```python block",
    )
    tests: str = Field(..., min_length=1, max_length=MAX_TESTS_CHARS,
                       description="hidden tests: top-level def test_*() or plain asserts")
    limits: CodeLimits = Field(default_factory=CodeLimits)
    rewards: CodeRewards = Field(default_factory=CodeRewards)

    @model_validator(mode="after")
    def _one_source(self) -> CodeVerifyRequest:
        if (self.code is None) == (self.responses is None):
            raise ValueError("give exactly one of 'code' (a program) or 'responses' (answers)")
        return self

    def programs(self) -> list[str]:
        if self.code is not None:
            return [self.code]
        return [extract_code(text) for text in self.responses or []]


def _kind_of(body: Any) -> str:
    """The request's ``kind``; none means a game. Non-objects are sent to the game shape so
    the error stays pydantic's plain "Input should be a valid dictionary"."""
    kind = body.get("kind", "game") if isinstance(body, dict) else getattr(body, "kind", "game")
    return kind if isinstance(kind, str) else repr(kind)  # a list must not reach a dict lookup


AnyVerifyRequest = Annotated[
    Annotated[VerifyRequest, Tag("game")]
    | Annotated[MathVerifyRequest, Tag("math")]
    | Annotated[NLIVerifyRequest, Tag("nli")]
    | Annotated[CodeVerifyRequest, Tag("code")],
    Discriminator(_kind_of),
]


class _Rewarded(BaseModel):
    reward: float = Field(..., description="the final reward, by the request's mode")
    rule_reward: float = Field(..., description="the rule verifier's reward")
    learned_reward: float | None = Field(
        None, description="modes learned/blend: wrong + (correct - wrong) * learned_prob "
                          "(= learned_prob with the default rewards)")
    learned_prob: float | None = Field(None, description="sigmoid(learned_score): P(right)")
    learned_score: float | None = Field(None, description="the classifier's raw logit")


class MathResult(_Rewarded):
    correct: bool
    parsable: bool
    extracted: str | None = Field(None, description="the final answer found in the response")
    method: str = Field("", description="the scorer: 'reasoning_gym:<name>' or 'math_verify'")
    score: float = Field(0.0, description="the scorer's own score (reasoning-gym gives partial)")


class NLIResult(_Rewarded):
    correct: bool
    parsable: bool
    predicted: NLILabel | None = None


class _TaskVerifyResponse(BaseModel):
    accuracy: float = Field(..., description="by the rule verifier, whatever the mode")
    mode: str = "rule"
    blend_weight: float | None = None


class MathVerifyResponse(_TaskVerifyResponse):
    kind: Literal["math"] = "math"
    results: list[MathResult]


class NLIVerifyResponse(_TaskVerifyResponse):
    kind: Literal["nli"] = "nli"
    results: list[NLIResult]


class CodeResult(CodeVerdict):
    reward: float


class CodeVerifyResponse(BaseModel):
    kind: Literal["code"] = "code"
    results: list[CodeResult]
    pass_rate: float = Field(..., description="share of programs that passed every test")


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(..., min_length=1, max_length=MAX_RESPONSE_CHARS)
    answers: list[Annotated[str, Field(max_length=MAX_RESPONSE_CHARS)]] = Field(
        ..., min_length=1, max_length=MAX_RESPONSES
    )


class ScoreResponse(BaseModel):
    scores: list[float] = Field(..., description="the classifier's logit per answer")
    probs: list[float] = Field(..., description="sigmoid(score): P(the answer is right)")


# Nothing is warmed up at start: a game-only run should not pay reasoning-gym's ~5 s import
# or a math-verify worker process. The first math request pays them instead (~2-6 s).
@asynccontextmanager
async def _lifespan(_app: FastAPI) -> AsyncIterator[None]:
    if LEARNED.configured:  # load in the background: /health must not wait for torch
        threading.Thread(target=LEARNED.warm, name="learned-verifier-load", daemon=True).start()
    yield


app = FastAPI(title="agora reward service", version="0.3.0", lifespan=_lifespan)
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


@app.post("/v1/verify", response_model=GameVerdict | MathVerifyResponse | NLIVerifyResponse
          | CodeVerifyResponse)
def verify(
    req: Annotated[AnyVerifyRequest, Body()],
) -> GameVerdict | MathVerifyResponse | NLIVerifyResponse | CodeVerifyResponse:
    # A sync endpoint: FastAPI runs it in its thread pool, which is why the verifiers must not
    # rely on signals (see agora/rewards/verifiers/math.py), and why a code run may block.
    if isinstance(req, MathVerifyRequest):
        return _verify_math(req)
    if isinstance(req, NLIVerifyRequest):
        return _verify_nli(req)
    if isinstance(req, CodeVerifyRequest):
        return _verify_code(req)
    return _verify_game(req)


@app.post("/v1/score", response_model=ScoreResponse)
def score(req: ScoreRequest) -> ScoreResponse:
    """The learned verifier's score of each answer to the question (422 without a model)."""
    scores = _learned_scores(req.question, req.answers, "/v1/score")
    return ScoreResponse(scores=scores, probs=[probability(x) for x in scores])


def _learned_scores(question: str, answers: list[str], route: str) -> list[float]:
    try:
        verifier = LEARNED.get()
    except VerifierUnavailable as err:
        # Not configured: no retry can succeed against this deployment, so the request is
        # refused (422, like the judge's unconfigured backend) and workers do not retry it.
        # Configured but failed to load: the service's fault, 503.
        raise HTTPException(503 if LEARNED.configured else 422, str(err)) from None
    scores = verifier.score(question, answers)
    if not all(math.isfinite(x) for x in scores):  # JSON cannot carry NaN: say why instead
        raise HTTPException(503, f"the learned verifier at {LEARNED.path} gave a non-finite "
                                 "score: its weights are broken (retrain it)")
    LEARNED_SCORES.labels(route).inc(len(answers))
    return scores


def _verify_game(req: VerifyRequest) -> GameVerdict:
    if req.env not in ENVS:
        raise HTTPException(422, f"unknown env '{req.env}'; known: {sorted(ENVS)}")
    too_long = [i for i, a in enumerate(req.actions) if len(a) > MAX_ACTION_CHARS]
    if too_long:
        raise HTTPException(422, f"actions {too_long[:5]} exceed {MAX_ACTION_CHARS} characters")
    if any(len(a) > MAX_ACTION_CHARS for a in req.opening):
        raise HTTPException(422, f"an opening move exceeds {MAX_ACTION_CHARS} characters")
    try:
        verdict = verify_game(req.env, req.actions, req.rewards, req.seed, req.num_seats,
                              opening=req.opening)
    except (InvalidEpisode, ValueError) as err:  # ValueError: a seat count the game lacks
        raise HTTPException(422, str(err)) from None
    VERIFICATIONS.labels("game", "finished" if verdict.finished else "unfinished").inc()
    return verdict


def _verify_math(req: MathVerifyRequest) -> MathVerifyResponse:
    try:
        verdicts = [verify_math(response, req.task) for response in req.responses]
    except TaskError as err:
        raise HTTPException(422, f"task: {err}") from None
    rule = [_reward(req.rewards, v.correct, v.extracted is not None) for v in verdicts]
    mixed = _mix(req, rule)
    results = [
        MathResult(correct=v.correct, parsable=v.extracted is not None, extracted=v.extracted,
                   method=v.method, score=v.score, **parts)
        for v, parts in zip(verdicts, mixed, strict=True)
    ]
    _count("math", results)
    return MathVerifyResponse(results=results, accuracy=_accuracy(results), mode=req.mode,
                              blend_weight=_weight(req))


def _verify_nli(req: NLIVerifyRequest) -> NLIVerifyResponse:
    try:
        verdicts = [verify_nli(response, req.task) for response in req.responses]
    except TaskError as err:
        raise HTTPException(422, f"task: {err}") from None
    rule = [_reward(req.rewards, v.correct, v.parsable) for v in verdicts]
    mixed = _mix(req, rule)
    results = [
        NLIResult(correct=v.correct, parsable=v.parsable, predicted=v.predicted, **parts)
        for v, parts in zip(verdicts, mixed, strict=True)
    ]
    _count("nli", results)
    return NLIVerifyResponse(results=results, accuracy=_accuracy(results), mode=req.mode,
                             blend_weight=_weight(req))


def _weight(req: _TaskVerifyRequest) -> float | None:
    if req.mode != "blend":
        return None
    return DEFAULT_BLEND if req.blend_weight is None else req.blend_weight


def _mix(req: _TaskVerifyRequest, rule: list[float]) -> list[dict[str, float | None]]:
    """Per response: the rule reward, the learned one (modes learned/blend) and the final.

    The learned probability is mapped onto the request's reward scale (wrong..correct), so a
    blend of the two never mixes a 0..1 probability with, say, a -1..1 rule reward."""
    if req.mode == "rule":
        return [{"reward": r, "rule_reward": r} for r in rule]
    scores = _learned_scores(req.task.question, req.responses, "/v1/verify")
    low, high = req.rewards.wrong, req.rewards.correct
    weight = _weight(req)
    out: list[dict[str, float | None]] = []
    for r, s in zip(rule, scores, strict=True):
        prob = probability(s)
        learned = low + (high - low) * prob
        final = learned if weight is None else weight * r + (1.0 - weight) * learned
        out.append({"reward": final, "rule_reward": r, "learned_reward": learned,
                    "learned_prob": prob, "learned_score": s})
    return out


def _verify_code(req: CodeVerifyRequest) -> CodeVerifyResponse:
    try:
        expected_test_names(req.tests)
    except ValueError as err:
        raise HTTPException(422, f"tests: {err}") from None
    programs = req.programs()
    limits = req.limits.sandbox()

    def run(program: str) -> CodeVerdict:
        with SANDBOX_SLOTS:  # the wall clock starts inside run_python, after the wait
            return verify_code(program, req.tests, limits)

    with ThreadPoolExecutor(max_workers=min(len(programs), 8)) as pool:
        verdicts = list(pool.map(run, programs))
    results = [CodeResult(**v.model_dump(), reward=_code_reward(req.rewards, v))
               for v in verdicts]
    for r in results:
        VERIFICATIONS.labels("code", "passed" if r.passed else
                             "failed" if r.status == "ok" else r.status).inc()
    return CodeVerifyResponse(results=results,
                              pass_rate=sum(r.passed for r in results) / len(results))


def _code_reward(scheme: CodeRewards, verdict: CodeVerdict) -> float:
    """failed + (passed - failed) x rate. Only a clean pass earns the full reward: a run whose
    tests all reported success but that then hung, crashed or was tampered with counts its
    last test as failed."""
    total = max(1, verdict.tests_total)
    if scheme.partial:
        rate = verdict.tests_passed / total
        if not verdict.passed:
            rate = min(rate, (total - 1) / total)
    else:
        rate = 1.0 if verdict.passed else 0.0
    return scheme.failed + (scheme.passed - scheme.failed) * rate


def _reward(scheme: TaskRewards, correct: bool, parsable: bool) -> float:
    if correct:
        return scheme.correct
    if not parsable and scheme.unparsable is not None:
        return scheme.unparsable
    return scheme.wrong


def _count(kind: str, results: list[MathResult] | list[NLIResult]) -> None:
    for r in results:
        VERIFICATIONS.labels(kind, "correct" if r.correct else
                             "wrong" if r.parsable else "unparsable").inc()


def _accuracy(results: list[MathResult] | list[NLIResult]) -> float:
    return sum(r.correct for r in results) / len(results)
