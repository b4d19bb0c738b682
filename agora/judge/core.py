"""The judge: pick a backend, consult the cache, ask both orders, combine, count.

Usable in-process (a rollout worker can hold a ``Judge``) as well as behind the HTTP service,
which is a thin layer over this.

Combining the two orders of a pairwise judgment (A=a,B=b and A=b,B=a), and why: LLM judges favour
a slot (often the first); asking both orders turns that bias into a visible disagreement instead
of a silent preference.
- both orders parsed and prefer the same candidate -> that winner;
- both parsed but disagree -> ``position_bias=true``, winner "tie";
- either order malformed -> winner "tie", ``prob_a=0.5``, ``parsed_ok=false`` (one order alone
  cannot be checked for bias, so it is not trusted either).
``prob_a`` is the mean of the two orders' preference for a (a verdict A/B/TIE counts 1/0/0.5;
the rubric backend gives a graded preference from its score difference).

Verdicts read from the judge model's probabilities (``judge.logprobs``) are combined in log-odds
instead: if the judge's log-odds for slot A are a slot bias plus the quality difference of the
two candidates, then half the difference of the two orders' log-odds is that quality difference
with the bias cancelled, and ``prob_a`` = sigmoid of it. A judge that says "A" with 98% and 97%
in the two orders (the bias of SmolLM2-135M) then prefers a with 0.51, not the 0.5005 the mean
would give: the same order of preference, on a scale that a reward can feel.

Only verdicts with ``parsed_ok`` are cached: a malformed output is not a verdict, and the next
request should ask again rather than be served the failure for a week.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Protocol, TypeVar

from pydantic import BaseModel

from agora.judge.cache import VerdictCache, cache_key
from agora.judge.errors import JudgeError, JudgeUpstreamError
from agora.judge.rubric_backend import PRECISION, RubricNotScorable, weighted_overall
from agora.judge.rubrics import UnknownRubric, resolve_rubric
from agora.judge.schemas import (
    OrderVerdict,
    PairwiseRequest,
    PairwiseResponse,
    Rubric,
    RubricRef,
    ScoreRequest,
    ScoreResponse,
)
from agora.judge.verdicts import slot_probability
from agora.ops.metrics import (
    JUDGE_CACHE_HITS,
    JUDGE_CACHE_MISSES,
    JUDGE_LATENCY,
    JUDGE_MALFORMED,
    JUDGE_ORDER_CHECKS,
    JUDGE_POSITION_BIAS,
    JUDGE_REQUESTS,
    JUDGE_UPSTREAM_ERRORS,
    init_judge_backend,
)

R = TypeVar("R", bound=BaseModel)


class Backend(Protocol):
    name: str
    model: str | None

    def identity(self) -> dict: ...

    def check_rubric(self, rubric: Rubric) -> None: ...

    async def judge_order(
        self, context: str, first: str, second: str, rubric: Rubric, order: str
    ) -> OrderVerdict: ...

    async def score(
        self, context: str, response: str, rubric: Rubric
    ) -> tuple[str, dict[str, float | None]]: ...


@dataclass
class Combined:
    winner: str
    prob_a: float
    position_bias: bool
    parsed_ok: bool


def combine(ab: OrderVerdict, ba: OrderVerdict, in_log_odds: bool = False) -> Combined:
    """See the module docstring for the rules."""
    if ab.preferred is None or ba.preferred is None:
        return Combined("tie", 0.5, position_bias=False, parsed_ok=False)
    p_ab = ab.prob_first if ab.prob_first is not None else slot_probability(ab.verdict)
    p_ba = ba.prob_first if ba.prob_first is not None else slot_probability(ba.verdict)
    if in_log_odds:
        quality = (log_odds(p_ab) - log_odds(p_ba)) / 2.0
        prob_a = round(1.0 / (1.0 + math.exp(-quality)), PRECISION)
    else:
        prob_a = round((p_ab + (1.0 - p_ba)) / 2.0, PRECISION)
    if ab.preferred == ba.preferred:
        return Combined(ab.preferred, prob_a, position_bias=False, parsed_ok=True)
    return Combined("tie", prob_a, position_bias=True, parsed_ok=True)


def log_odds(p: float, eps: float = 1e-6) -> float:
    p = min(max(p, eps), 1.0 - eps)
    return math.log(p / (1.0 - p))


class Judge:
    def __init__(
        self,
        backends: dict[str, Backend],
        default_backend: str,
        cache: VerdictCache,
    ) -> None:
        if default_backend not in backends:
            raise ValueError(f"default backend '{default_backend}' is not configured")
        self.backends = backends
        self.default_backend = default_backend
        self.cache = cache
        for name in backends:
            init_judge_backend(name)

    def backend(self, override: str | None) -> Backend:
        name = override or self.default_backend
        if name not in self.backends:
            raise JudgeError(
                422,
                f"backend '{name}' is not configured on this judge (available: "
                f"{sorted(self.backends)}); the llm backend needs AGORA_JUDGE_BASE_URL",
            )
        return self.backends[name]

    @staticmethod
    def rubric(ref: RubricRef, backend: Backend) -> Rubric:
        try:
            rubric = resolve_rubric(ref)
            backend.check_rubric(rubric)
        except (UnknownRubric, RubricNotScorable) as err:
            raise JudgeError(422, str(err)) from None
        return rubric

    async def _cached(
        self, endpoint: str, model: type[R], digest: str, backend: Backend, started: float
    ) -> R | None:
        """The cached response (``cached=True``) or None; counts the hit or the miss."""
        hit = await self.cache.get(digest)
        resp = None
        if hit is not None:
            try:
                resp = model.model_validate({**hit, "cached": True})
            except ValueError:
                resp = None  # an entry written by an older schema: judge again, overwrite it
        if resp is None:
            JUDGE_CACHE_MISSES.labels(endpoint).inc()
            return None
        JUDGE_CACHE_HITS.labels(endpoint).inc()
        JUDGE_LATENCY.labels(endpoint, backend.name, "true").observe(time.perf_counter() - started)
        return resp

    async def pairwise(self, req: PairwiseRequest) -> PairwiseResponse:
        backend = self.backend(req.backend)
        rubric = self.rubric(req.rubric, backend)
        JUDGE_REQUESTS.labels("pairwise", backend.name).inc()
        started = time.perf_counter()
        payload = {"context": req.context, "a": req.a, "b": req.b, "rubric": rubric.model_dump()}
        digest = cache_key("pairwise", backend.identity(), payload)
        cached = await self._cached("pairwise", PairwiseResponse, digest, backend, started)
        if cached is not None:
            return cached

        ab, ba = await self._both_orders(backend, req, rubric)
        result = combine(ab, ba, in_log_odds=getattr(backend, "logprobs", False))
        malformed = sum(v.verdict is None for v in (ab, ba))
        if malformed:
            JUDGE_MALFORMED.labels("pairwise", backend.name).inc(malformed)
        if result.parsed_ok:
            JUDGE_ORDER_CHECKS.labels(backend.name).inc()
            if result.position_bias:
                JUDGE_POSITION_BIAS.labels(backend.name).inc()
        resp = PairwiseResponse(
            winner=result.winner,
            prob_a=result.prob_a,
            position_bias=result.position_bias,
            parsed_ok=result.parsed_ok,
            orders=[ab, ba],
            backend=backend.name,
            model=backend.model,
            rubric=rubric.name,
            cache_key=digest,
        )
        if resp.parsed_ok:
            await self.cache.set(digest, resp.model_dump(exclude={"cached"}))
        elapsed = time.perf_counter() - started
        JUDGE_LATENCY.labels("pairwise", backend.name, "false").observe(elapsed)
        return resp

    async def _both_orders(
        self, backend: Backend, req: PairwiseRequest, rubric: Rubric
    ) -> tuple[OrderVerdict, OrderVerdict]:
        """Both orders at once; every call runs to its end (no orphaned request left behind)."""
        results = await asyncio.gather(
            backend.judge_order(req.context, req.a, req.b, rubric, "ab"),
            backend.judge_order(req.context, req.b, req.a, rubric, "ba"),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                if isinstance(result, JudgeUpstreamError):
                    JUDGE_UPSTREAM_ERRORS.labels(str(result.status)).inc()
                raise result
        return results[0], results[1]

    async def score(self, req: ScoreRequest) -> ScoreResponse:
        backend = self.backend(req.backend)
        rubric = self.rubric(req.rubric, backend)
        JUDGE_REQUESTS.labels("score", backend.name).inc()
        started = time.perf_counter()
        payload = {"context": req.context, "response": req.response, "rubric": rubric.model_dump()}
        digest = cache_key("score", backend.identity(), payload)
        cached = await self._cached("score", ScoreResponse, digest, backend, started)
        if cached is not None:
            return cached

        try:
            raw, scores = await backend.score(req.context, req.response, rubric)
        except JudgeUpstreamError as err:
            JUDGE_UPSTREAM_ERRORS.labels(str(err.status)).inc()
            raise
        parsed_ok = all(v is not None for v in scores.values())
        if not parsed_ok:
            JUDGE_MALFORMED.labels("score", backend.name).inc()
        resp = ScoreResponse(
            scores=scores,
            overall=weighted_overall(rubric, scores),
            parsed_ok=parsed_ok,
            raw=raw,
            scale_min=rubric.scale_min,
            scale_max=rubric.scale_max,
            backend=backend.name,
            model=backend.model,
            rubric=rubric.name,
            cache_key=digest,
        )
        if parsed_ok:
            await self.cache.set(digest, resp.model_dump(exclude={"cached"}))
        JUDGE_LATENCY.labels("score", backend.name, "false").observe(time.perf_counter() - started)
        return resp
