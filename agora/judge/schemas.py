"""Request and response shapes of the judge, shared by the HTTP service and in-process callers.

Why one ``Rubric`` type for both backends: a run config names a rubric once and may switch the
judge between the deterministic backend (tests, CPU demos) and a judge model without rewriting
it. Each criterion therefore carries both a description (what the LLM reads) and, optionally, a
``check``: the documented text feature the rubric backend computes for it (see
``agora.judge.rubric_backend``). A criterion without a check can only be judged by the LLM.

Size limits live here so that the service and in-process callers refuse the same inputs; the
service additionally caps the whole request body (413) before any of this is parsed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)

MAX_CONTEXT_CHARS = 32_000
MAX_CANDIDATE_CHARS = 32_000
MAX_CRITERIA = 16
MAX_TERMS = 32
MAX_TERM_CHARS = 100
MAX_DESCRIPTION_CHARS = 1_000
MAX_INSTRUCTIONS_CHARS = 4_000
MAX_SCALE = 100

Backend = Literal["rubric", "llm"]
Winner = Literal["a", "b", "tie"]
Slot = Literal["A", "B", "TIE"]
Check = Literal[
    "length", "keywords", "must_mention", "forbidden", "repetition", "distinct_words", "relevance",
    "grounding",
]
TERM_CHECKS = ("keywords", "must_mention", "forbidden")


class Criterion(BaseModel):
    """One thing the rubric asks about. ``name`` is what the judge model writes after ``SCORE``,
    so it is restricted to an identifier: a name with spaces or colons would make the verdict
    format ambiguous."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=r"^[A-Za-z][A-Za-z0-9_]{0,39}$")
    description: str = Field("", max_length=MAX_DESCRIPTION_CHARS)
    weight: float = Field(1.0, gt=0, le=100)
    check: Check | None = Field(None, description="text feature for the rubric backend")
    min_words: int | None = Field(None, ge=0, le=100_000, description="for check=length")
    max_words: int | None = Field(None, ge=1, le=100_000, description="for check=length")
    terms: list[str] = Field(
        default_factory=list,
        max_length=MAX_TERMS,
        description="for check=keywords|must_mention|forbidden",
    )

    @model_validator(mode="after")
    def _check_parameters(self) -> Criterion:
        if self.check == "length":
            if self.min_words is None and self.max_words is None:
                raise ValueError(f"criterion '{self.name}': check=length needs min_words/max_words")
            if (self.min_words or 0) > (self.max_words if self.max_words is not None else 10**9):
                raise ValueError(f"criterion '{self.name}': min_words > max_words")
        if self.check in TERM_CHECKS:
            if not self.terms:
                raise ValueError(f"criterion '{self.name}': check={self.check} needs terms")
            bad = [t for t in self.terms if not t.strip() or len(t) > MAX_TERM_CHARS]
            if bad:
                raise ValueError(
                    f"criterion '{self.name}': terms must be non-empty and at most "
                    f"{MAX_TERM_CHARS} characters"
                )
        return self


class Rubric(BaseModel):
    """Criteria scored on an integer scale ``scale_min..scale_max``; the overall score is the
    weighted mean of the criteria."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("custom", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    instructions: str = Field("", max_length=MAX_INSTRUCTIONS_CHARS)
    criteria: list[Criterion] = Field(..., min_length=1, max_length=MAX_CRITERIA)
    scale_min: int = Field(1, ge=0, le=MAX_SCALE)
    scale_max: int = Field(10, ge=1, le=MAX_SCALE)

    @model_validator(mode="after")
    def _check_rubric(self) -> Rubric:
        if self.scale_min >= self.scale_max:
            raise ValueError("scale_min must be below scale_max")
        names = [c.name.lower() for c in self.criteria]
        if len(set(names)) != len(names):
            raise ValueError("criterion names must be unique (case-insensitive)")
        return self


def _rubric_kind(value: object) -> str | None:
    if isinstance(value, str):
        return "name"
    if isinstance(value, dict | Rubric):
        return "object"
    return None


# A tagged union, not a plain one: a bad rubric object then reports only what is wrong with it
# (under ``rubric.object...``), not also "Input should be a valid string" from the name branch.
RubricRef = Annotated[
    Annotated[Rubric, Tag("object")] | Annotated[str, Tag("name")],
    Discriminator(
        _rubric_kind,
        custom_error_type="rubric_type",
        custom_error_message="rubric must be a rubric object or the name of a built-in rubric",
    ),
]


def _context_field():
    return Field(
        "",
        max_length=MAX_CONTEXT_CHARS,
        validation_alias=AliasChoices("context", "prompt"),
        description="the prompt or conversation the candidates answer (alias: prompt)",
    )


def _rubric_field():
    return Field("helpfulness", description="a Rubric, or the name of a built-in rubric")


def _backend_field():
    return Field(None, description="override the service's default backend")


class PairwiseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    context: str = _context_field()
    a: str = Field(..., max_length=MAX_CANDIDATE_CHARS)
    b: str = Field(..., max_length=MAX_CANDIDATE_CHARS)
    rubric: RubricRef = _rubric_field()
    backend: Backend | None = _backend_field()


class OrderVerdict(BaseModel):
    """What the judge said for one presentation order. ``order="ab"`` showed ``a`` in slot A;
    ``"ba"`` showed ``b`` there. ``verdict`` is the slot as written by the judge (None when its
    output had no parseable verdict); ``preferred`` maps it back to the request's a/b."""

    model_config = ConfigDict(extra="forbid")

    order: Literal["ab", "ba"]
    raw: str
    verdict: Slot | None
    preferred: Winner | None
    prob_first: float | None = Field(None, description="preference for slot A, in [0, 1]")


class PairwiseResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    winner: Winner
    prob_a: float = Field(..., ge=0.0, le=1.0, description="preference for a over b")
    position_bias: bool = Field(..., description="both orders parsed and they disagreed")
    parsed_ok: bool = Field(..., description="both orders gave a parseable verdict")
    orders: list[OrderVerdict]
    backend: Backend
    model: str | None
    rubric: str
    cache_key: str
    cached: bool = False


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    context: str = _context_field()
    response: str = Field(..., max_length=MAX_CANDIDATE_CHARS)
    rubric: RubricRef = _rubric_field()
    backend: Backend | None = _backend_field()


class ScoreResponse(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scores: dict[str, float | None] = Field(..., description="per criterion; None if unparsed")
    overall: float | None = Field(..., description="weighted mean of the parsed scores")
    parsed_ok: bool = Field(..., description="every criterion got a score")
    raw: str
    scale_min: int
    scale_max: int
    backend: Backend
    model: str | None
    rubric: str
    cache_key: str
    cached: bool = False
