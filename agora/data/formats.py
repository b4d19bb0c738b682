"""Row formats shared by the JSONL and Hugging Face loaders: one dict in, one ``Task`` out.

Each parser raises ``ValueError`` with a message about the row alone ("missing 'hypothesis'");
the loader prefixes where the row came from ("anli_sample.jsonl line 3: ..."), so the same
parsers give useful errors for files and Hub datasets alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from agora.data.base import NLI_LABELS, NO_GOLD_LABEL, Task, gold_nli_label

Format = Literal["gsm8k", "anli"]

NLI_PROMPT = (
    "Premise: {premise}\n"
    "Hypothesis: {hypothesis}\n"
    "Does the premise entail the hypothesis, contradict it, or neither? "
    "Answer with one word: " + ", ".join(NLI_LABELS) + "."
)

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


class SkipRow(Exception):  # noqa: N818 - a signal, not an error
    """The row is valid but carries no ground truth (an NLI label of -1): leave it out."""


def gsm8k_final_answer(answer: object) -> str:
    """The number after the last ``####`` (GSM8K's convention), or a bare number.

    Thousands separators and a currency sign are dropped: GSM8K writes "#### 1,200" in places
    and the ground truth must be a plain number for every verifier.
    """
    if isinstance(answer, bool) or not isinstance(answer, str | int | float):
        raise ValueError(f"'answer' must be a string, got {type(answer).__name__}")
    text = str(answer)
    final = text.rsplit("####", 1)[1] if "####" in text else text
    final = final.strip().replace(",", "").lstrip("$").rstrip(".").strip()
    if not _NUMBER.match(final):
        raise ValueError(
            f"'answer' must end with '#### <number>' (or be a number), got {_tail(text)!r}"
        )
    return final


def gsm8k_task(row: dict[str, Any], task_id: str, source: str) -> Task:
    question = _text_field(row, "question")
    if "answer" not in row:
        raise ValueError("missing 'answer'")
    answer = gsm8k_final_answer(row["answer"])
    metadata = {"solution": row["answer"]} if isinstance(row["answer"], str) else {}
    return Task(task_id=_row_id(row, task_id), kind="math", question=question, answer=answer,
                source=source, difficulty=_difficulty(row), metadata=metadata)


def anli_task(row: dict[str, Any], task_id: str, source: str) -> Task:
    premise = _text_field(row, "premise")
    hypothesis = _text_field(row, "hypothesis")
    if "label" not in row:
        raise ValueError("missing 'label'")
    if not isinstance(row["label"], bool) and str(row["label"]).strip() == str(NO_GOLD_LABEL):
        raise SkipRow
    label = gold_nli_label(row["label"])
    return Task(
        task_id=_row_id(row, task_id), kind="nli",
        question=NLI_PROMPT.format(premise=premise, hypothesis=hypothesis),
        answer=label, source=source, difficulty=_difficulty(row),
        metadata={"premise": premise, "hypothesis": hypothesis},
    )


PARSERS: dict[str, Callable[[dict[str, Any], str, str], Task]] = {
    "gsm8k": gsm8k_task,
    "anli": anli_task,
}


def _text_field(row: dict[str, Any], name: str) -> str:
    if name not in row:
        raise ValueError(f"missing '{name}'")
    value = row[name]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'{name}' must be a non-empty string, got {value!r}")
    return value.strip()


def _row_id(row: dict[str, Any], default: str) -> str:
    """The dataset's own id when it has one (ANLI has 'uid'), so ids survive re-ordering."""
    for key in ("id", "uid"):
        value = row.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return default


def _difficulty(row: dict[str, Any]) -> str | int | None:
    value = row.get("difficulty")
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _tail(text: str, chars: int = 40) -> str:
    return text if len(text) <= chars else "..." + text[-chars:]
