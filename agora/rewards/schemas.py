"""The reward service's request and response shapes (``/v1/verify``, ``/v1/score``).

``/v1/verify`` takes one of four shapes, told apart by ``kind``: "game" (the default, so the
original game requests without ``kind`` still work) replays a game; "math" and "nli" check a
list of responses (e.g. one per agent per discussion turn) against one task's ground truth;
"code" runs programs against hidden tests in the sandbox. The caps below bound what one request
may cost the service.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, model_validator

from agora.data import NLILabel, TaskRef
from agora.envs.registry import GAME_BOTS
from agora.rewards.verifiers.code import CodeVerdict, extract_code
from agora.rewards.verifiers.game import RewardScheme
from agora.sandbox.runner import SandboxLimits

MAX_ACTIONS = 512
MAX_ACTION_CHARS = 4096
MAX_RESPONSES = 256
MAX_RESPONSE_CHARS = 32768
# A code response costs a sandboxed process for up to its wall-clock limit: far fewer per call.
MAX_CODE_RESPONSES = 32
MAX_TESTS_CHARS = 65536


class VerifyRequest(BaseModel):
    """A game to replay (``kind`` may be left out: that is how the first clients send it)."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["game"] = "game"
    task: Literal["game_outcome"] = "game_outcome"
    env: str = Field(..., description=f"a game: one of {sorted(GAME_BOTS)}")
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


class TaskVerifyRequest(BaseModel):
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
    def _mode_needs(self) -> TaskVerifyRequest:
        if self.blend_weight is not None and self.mode != "blend":
            raise ValueError(f"blend_weight applies to mode 'blend' only, not '{self.mode}'")
        if self.mode != "rule" and not self.task.question.strip():
            raise ValueError(f"mode '{self.mode}' needs task.question: the learned verifier "
                             "reads the question with each answer")
        return self


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


class MathVerifyRequest(TaskVerifyRequest):
    kind: Literal["math"]
    answer: Literal["text", "program", "either"] = Field(
        "text", description="text: the written final answer. program: the response's last "
        "```python block runs in the sandbox and its last printed line is the answer. either: "
        "the program when there is one (agora/rewards/verifiers/program.py)")
    program_limits: CodeLimits = Field(default_factory=CodeLimits,
                                       description="the sandbox's limits for answer programs")


class NLIVerifyRequest(TaskVerifyRequest):
    kind: Literal["nli"]


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
    method: str = Field("", description="the scorer: 'reasoning_gym:<name>' or 'math_verify' "
                        "('program+...' for a program's printed answer)")
    score: float = Field(0.0, description="the scorer's own score (reasoning-gym gives partial)")
    program: str | None = Field(None, description="answer modes program/either: how the "
                                "response's program ran ('ok', 'error', 'timeout', 'no_output', "
                                "...); None when no program ran")
    printed: str | None = Field(None, description="the program's last printed line")


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
    answer: str = Field("text", description="the request's answer mode")
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


MAX_SANDBOX_FILES = 16


class SandboxRunLimits(CodeLimits):
    """What a ``/v1/sandbox/run`` client may choose (agora/sandbox/remote.py sends these);
    the isolation itself is the service's (``AGORA_SANDBOX_ISOLATION``)."""

    file_size_mb: int = Field(16, ge=1, le=256)
    disk_mb: int = Field(64, ge=1, le=512)
    max_processes: int = Field(32, ge=1, le=64)
    max_open_files: int = Field(64, ge=16, le=1024)

    def sandbox(self) -> SandboxLimits:
        return SandboxLimits(**self.model_dump())


class SandboxRunRequest(BaseModel):
    """One untrusted program for the sandbox: the rollout workers' tool calls (issue 18: model
    code runs nowhere else)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    code: str = Field(..., min_length=1, max_length=MAX_RESPONSE_CHARS)
    stdin: str = Field("", max_length=MAX_TESTS_CHARS)
    files: dict[Annotated[str, Field(min_length=1, max_length=200)],
                Annotated[str, Field(max_length=MAX_TESTS_CHARS)]] = Field(
        default_factory=dict, max_length=MAX_SANDBOX_FILES,
        description="relative paths placed beside the script")
    limits: SandboxRunLimits = Field(default_factory=SandboxRunLimits)

    @model_validator(mode="after")
    def _relative_names(self) -> SandboxRunRequest:
        for name in self.files:
            parts = name.split("/")
            if name.startswith("/") or ".." in parts or "" in parts or name == "main.py":
                raise ValueError(f"files: {name!r} must be a relative path inside the sandbox "
                                 "(no '..', not main.py)")
        return self


class SandboxRunResponse(BaseModel):
    """``SandboxResult`` (agora/sandbox/runner.py) as JSON."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    duration_s: float
    reason: str
    cpu_s: float | None
    isolation: list[str]
    level: str | None
