"""The judge: pairwise preferences and rubric scores, from a judge model or deterministic rules.

Modules: ``schemas`` (request/response shapes, rubric), ``rubrics`` (built-in rubrics),
``rubric_backend`` (text-feature scoring, no model), ``llm`` (OpenAI-compatible judge model),
``prompts`` and ``verdicts`` (what the model is shown, how its answer is read, how judged text is
neutralised), ``cache`` (Redis), ``metrics``, ``settings`` (env), ``core`` (the ``Judge`` that
ties them together). The HTTP service is ``services/judge/app.py``.
"""

from agora.judge.core import Judge, combine
from agora.judge.errors import JudgeError, JudgeUpstreamError
from agora.judge.schemas import (
    Criterion,
    OrderVerdict,
    PairwiseRequest,
    PairwiseResponse,
    Rubric,
    ScoreRequest,
    ScoreResponse,
)
from agora.judge.settings import JudgeSettings

__all__ = [
    "Criterion",
    "Judge",
    "JudgeError",
    "JudgeSettings",
    "JudgeUpstreamError",
    "OrderVerdict",
    "PairwiseRequest",
    "PairwiseResponse",
    "Rubric",
    "ScoreRequest",
    "ScoreResponse",
    "combine",
]
