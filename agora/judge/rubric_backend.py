"""The deterministic judge: scores from simple text features, no model.

Why it exists: tests and CPU demos need a judge that runs in microseconds and gives the same
answer every time, and a run that should not depend on a judge model's whims (or availability)
can still shape rewards with it. Pairwise = compare the two overall scores; each candidate is
scored on its own, so the order cannot matter and position bias is zero by construction.

Features (each in [0, 1]; text is lower-cased and split into words, letters/digits with inner
apostrophes, before any of them is computed; an empty response scores 0 on every feature):

- ``length``: 1 when the word count n is within [min_words, max_words], else n/min_words below
  the range and max_words/n above it.
- ``keywords``: the fraction of ``terms`` that occur (a term is matched as a whole word sequence).
- ``must_mention``: 1 if every term occurs, else 0 (a hard requirement).
- ``forbidden``: 1 minus the fraction of ``terms`` that occur.
- ``repetition``: 1 minus the share of repeated word trigrams (1 below three words).
- ``distinct_words``: distinct words / words.
- ``relevance``: the fraction of the context's distinct content words (4+ letters, not a stop
  word) that occur in the response; 1 when the context has none.
- ``grounding``: the other way round, the fraction of the response's distinct content words
  that occur in the context (what a faithful answer to retrieved pages is made of); 1 when the
  response has none.

A criterion's score is ``scale_min + feature * (scale_max - scale_min)``; the overall score is
the weighted mean over criteria. Scores are rounded to 3 decimals so that float noise cannot
flip a comparison between two runs.
"""

from __future__ import annotations

import re

from agora.judge.schemas import Criterion, OrderVerdict, Rubric
from agora.judge.verdicts import slot_to_candidate

PRECISION = 3
VERSION = "rubric-v1"
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
STOP_WORDS = frozenset(
    {
        "about", "above", "after", "again", "against", "also", "been", "before", "being", "below",
        "between", "both", "could", "does", "doing", "down", "during", "each", "from", "further",
        "have", "having", "here", "hers", "herself", "himself", "into", "itself", "just", "more",
        "most", "myself", "only", "other", "ought", "ours", "ourselves", "over", "same", "shall",
        "should", "some", "such", "than", "that", "their", "theirs", "them", "themselves", "then",
        "there", "these", "they", "this", "those", "through", "under", "until", "very", "want",
        "were", "what", "when", "where", "which", "while", "whom", "with", "would", "your",
        "yours", "yourself", "yourselves", "please", "tell", "give", "write", "explain", "answer",
        "question",
    }
)


class RubricNotScorable(ValueError):
    """The rubric has criteria without a ``check``: only a judge model can score those."""


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _occurs(term: str, tokens: list[str]) -> bool:
    needle = words(term)
    if not needle:
        return False
    n = len(needle)
    return any(tokens[i : i + n] == needle for i in range(len(tokens) - n + 1))


def feature(criterion: Criterion, context: str, response: str) -> float:
    """The criterion's feature value in [0, 1] (see the module docstring)."""
    tokens = words(response)
    if not tokens:
        return 0.0
    check = criterion.check
    if check == "length":
        n = len(tokens)
        low = criterion.min_words or 0
        high = criterion.max_words if criterion.max_words is not None else n
        if n < low:
            return n / low
        return high / n if n > high else 1.0
    if check in ("keywords", "must_mention", "forbidden"):
        found = sum(_occurs(t, tokens) for t in criterion.terms)
        share = found / len(criterion.terms)
        if check == "keywords":
            return share
        if check == "must_mention":
            return 1.0 if found == len(criterion.terms) else 0.0
        return 1.0 - share
    if check == "repetition":
        trigrams = [tuple(tokens[i : i + 3]) for i in range(len(tokens) - 2)]
        if not trigrams:
            return 1.0
        return len(set(trigrams)) / len(trigrams)
    if check == "distinct_words":
        return len(set(tokens)) / len(tokens)
    if check == "relevance":
        wanted = {w for w in words(context) if len(w) >= 4 and w not in STOP_WORDS}
        if not wanted:
            return 1.0
        return len(wanted & set(tokens)) / len(wanted)
    if check == "grounding":
        said = {w for w in tokens if len(w) >= 4 and w not in STOP_WORDS}
        if not said:
            return 1.0
        return len(said & set(words(context))) / len(said)
    raise RubricNotScorable(f"criterion '{criterion.name}' has no check")


def require_checks(rubric: Rubric) -> None:
    missing = [c.name for c in rubric.criteria if c.check is None]
    if missing:
        raise RubricNotScorable(
            f"criteria {missing} of rubric '{rubric.name}' have no 'check': the rubric backend "
            "scores only text features (length, keywords, must_mention, forbidden, repetition, "
            "distinct_words, relevance, grounding); give each criterion a check or use the llm "
            "backend"
        )


def weighted_overall(rubric: Rubric, scores: dict[str, float | None]) -> float | None:
    """Weighted mean over the criteria that have a score (None if none has)."""
    parts = [(c.weight, scores.get(c.name)) for c in rubric.criteria]
    parts = [(w, s) for w, s in parts if s is not None]
    if not parts:
        return None
    return round(sum(w * s for w, s in parts) / sum(w for w, _ in parts), PRECISION)


def score_lines(scores: dict[str, float | None]) -> str:
    return "\n".join(f"SCORE {name}: {value}" for name, value in scores.items())


class RubricBackend:
    """Stateless; async methods only so both backends share one interface."""

    name = "rubric"
    model: str | None = None

    def identity(self) -> dict:
        return {"backend": self.name, "version": VERSION}

    def check_rubric(self, rubric: Rubric) -> None:
        require_checks(rubric)

    def scores(self, context: str, response: str, rubric: Rubric) -> dict[str, float | None]:
        span = rubric.scale_max - rubric.scale_min
        return {
            c.name: round(rubric.scale_min + feature(c, context, response) * span, PRECISION)
            for c in rubric.criteria
        }

    async def score(
        self, context: str, response: str, rubric: Rubric
    ) -> tuple[str, dict[str, float | None]]:
        scores = self.scores(context, response, rubric)
        return score_lines(scores), scores

    async def judge_order(
        self, context: str, first: str, second: str, rubric: Rubric, order: str
    ) -> OrderVerdict:
        """Slot A = ``first``. The preference is linear in the score difference:
        ``0.5 + 0.5 * (overall_A - overall_B) / (scale_max - scale_min)``."""
        overall_a = weighted_overall(rubric, self.scores(context, first, rubric)) or 0.0
        overall_b = weighted_overall(rubric, self.scores(context, second, rubric)) or 0.0
        diff = overall_a - overall_b
        slot = "A" if diff > 0 else "B" if diff < 0 else "TIE"
        prob = 0.5 + 0.5 * diff / (rubric.scale_max - rubric.scale_min)
        raw = f"overall A: {overall_a}\noverall B: {overall_b}\nVERDICT: {slot}"
        return OrderVerdict(
            order=order,
            raw=raw,
            verdict=slot,
            preferred=slot_to_candidate(slot, order),
            prob_first=round(min(1.0, max(0.0, prob)), PRECISION),
        )

