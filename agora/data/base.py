"""The task record every dataset turns into, and the NLI label vocabulary.

A task is what an environment shows agents (``question``) plus what a verifier needs to check an
answer later (``answer``, ``source``, ``metadata``). The verifier part is split out as
``TaskRef`` because the reward service receives only that over HTTP: it must be able to verify a
response without the question text or the dataset it came from.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["math", "nli"]
NLILabel = Literal["entailment", "neutral", "contradiction"]
NLI_LABELS: tuple[NLILabel, ...] = ("entailment", "neutral", "contradiction")
# The dataset encodings of gold labels: ANLI/SNLI/MNLI on the Hub use 0/1/2, the original ANLI
# jsonl files use e/n/c.
_GOLD_NLI = {
    "0": "entailment", "e": "entailment", "entailment": "entailment",
    "1": "neutral", "n": "neutral", "neutral": "neutral",
    "2": "contradiction", "c": "contradiction", "contradiction": "contradiction",
}
# -1 means "annotators did not agree" in SNLI/MNLI; such rows have no ground truth.
NO_GOLD_LABEL = -1


class TaskError(ValueError):
    """A dataset, spec or task that cannot be used; the message names the field or line."""


class TaskRef(BaseModel):
    """What a verifier needs: the ground truth and where it came from."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    answer: str = Field(..., description="ground truth as a string ('42', 'entailment')")
    source: str = Field("", description="e.g. 'reasoning_gym:basic_arithmetic', 'jsonl:gsm8k'")
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description="for reasoning-gym: {'rg_entry': entry metadata, 'rg_config': knobs}",
    )
    question: str = ""


class Task(TaskRef):
    """One task as agents see it and as verifiers check it."""

    task_id: str
    kind: Kind
    question: str
    difficulty: str | int | None = None

    def ref(self) -> TaskRef:
        """The part the reward service needs (no question text to ship)."""
        return TaskRef(answer=self.answer, source=self.source, metadata=self.metadata)


def gold_nli_label(value: object) -> NLILabel:
    """A dataset's gold label (0/1/2, 'e'/'n'/'c' or the name) as its name."""
    if isinstance(value, bool):  # bool is an int subclass: True must not mean "neutral"
        raise ValueError(f"label {value!r} is not one of 0/1/2 or {list(NLI_LABELS)}")
    key = str(value).strip().lower() if isinstance(value, int | str) else None
    if key is None or key not in _GOLD_NLI:
        raise ValueError(f"label {value!r} is not one of 0/1/2 or {list(NLI_LABELS)}")
    return _GOLD_NLI[key]  # type: ignore[return-value]


def jsonable(value: Any) -> Any:
    """Deep-copy ``value`` into plain JSON types, as it will look after an HTTP round trip.

    Reasoning-gym metadata holds tuples (and may hold sets); storing the round-tripped form
    means a scorer sees the same thing in-process as it does in the reward service.
    """
    return json.loads(json.dumps(value, default=_fallback))


def _fallback(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return str(value)
