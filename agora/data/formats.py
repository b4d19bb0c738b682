"""Row formats shared by the JSONL and Hugging Face loaders: one dict in, one ``Task`` out.

Each format is a benchmark's own Hugging Face schema, so a user's local copy (a JSONL export, a
parquet file through the ``hf`` source's builders) and the Hub dataset load alike:

- ``gsm8k`` (openai/gsm8k): ``question``, ``answer`` ending in ``#### <number>``.
- ``anli`` (facebook/anli, splits ``train_r1`` ... ``test_r3``): ``premise``, ``hypothesis``,
  ``label`` 0/1/2 (entailment/neutral/contradiction), ``uid``.
- ``math`` (HuggingFaceH4/MATH-500, and Hendrycks MATH): ``problem``, ``answer`` in LaTeX (or,
  as in the original MATH, none: then the last ``\\boxed{}`` of ``solution``), ``level``,
  ``subject`` / ``type``, ``unique_id``.

Each parser raises ``ValueError`` with a message about the row alone ("missing 'hypothesis'");
the loader prefixes where the row came from ("anli_sample.jsonl line 3: ..."), so the same
parsers give useful errors for files and Hub datasets alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from agora.data.base import NLI_LABELS, NO_GOLD_LABEL, Task, gold_nli_label

Format = Literal["gsm8k", "anli", "math"]

NLI_PROMPT = (
    "Premise: {premise}\n"
    "Hypothesis: {hypothesis}\n"
    "Does the premise entail the hypothesis, contradict it, or neither? "
    "Answer with one word: " + ", ".join(NLI_LABELS) + "."
)

_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_LEVEL = re.compile(r"^(?:level\s*)?([1-9])$", re.IGNORECASE)


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


def math_task(row: dict[str, Any], task_id: str, source: str) -> Task:
    """A MATH-500 row (or an original MATH row, whose answer is boxed in its solution)."""
    problem = _text_field(row, "problem")
    solution = row.get("solution")
    if "answer" in row:
        answer = row["answer"]
        if isinstance(answer, bool) or not isinstance(answer, str | int | float):
            raise ValueError(f"'answer' must be a string, got {type(answer).__name__}")
        answer = str(answer).strip()
        if not answer:
            raise ValueError("'answer' is empty")
    elif isinstance(solution, str):
        answer = (last_boxed(solution) or "").strip()
        if not answer:
            raise ValueError(f"no 'answer', and 'solution' has no \\boxed{{}} answer: "
                             f"{_tail(solution)!r}")
    else:
        raise ValueError("missing 'answer' (or a 'solution' with a \\boxed{} answer)")
    metadata = {key: row[key] for key in ("solution", "subject", "type")
                if isinstance(row.get(key), str)}
    return Task(task_id=_row_id(row, task_id), kind="math", question=problem, answer=answer,
                source=source, difficulty=_math_level(row), metadata=metadata)


def last_boxed(text: str) -> str | None:
    """The content of the last complete ``\\boxed{...}`` (braces balanced; a box cut off by
    the token limit is skipped for the one before it). One pass pairs every brace, so a
    response of thousands of unclosed boxes costs linear time, not quadratic."""
    closing: dict[int, int] = {}
    stack: list[int] = []
    for index, char in enumerate(text):
        if char == "{":
            stack.append(index)
        elif char == "}" and stack:
            closing[stack.pop()] = index
    for match in reversed(list(_BOXED.finditer(text))):
        opening = match.end() - 1
        if opening in closing:
            return text[match.end():closing[opening]]
    return None


PARSERS: dict[str, Callable[[dict[str, Any], str, str], Task]] = {
    "gsm8k": gsm8k_task,
    "anli": anli_task,
    "math": math_task,
}


def _text_field(row: dict[str, Any], name: str) -> str:
    if name not in row:
        raise ValueError(f"missing '{name}'")
    value = row[name]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"'{name}' must be a non-empty string, got {value!r}")
    return value.strip()


def _row_id(row: dict[str, Any], default: str) -> str:
    """The dataset's own id when it has one (ANLI has 'uid', MATH-500 'unique_id'), so ids
    survive re-ordering."""
    for key in ("id", "uid", "unique_id"):
        value = row.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return default


def _difficulty(row: dict[str, Any]) -> str | int | None:
    value = row.get("difficulty")
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def _math_level(row: dict[str, Any]) -> str | int | None:
    """MATH's difficulty: ``level`` 1-5 (MATH-500 writes 3, the original MATH "Level 3"; its
    few "Level ?" rows get none)."""
    level = row.get("level")
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    match = _LEVEL.match(level.strip()) if isinstance(level, str) else None
    return int(match.group(1)) if match else _difficulty(row)


def _tail(text: str, chars: int = 40) -> str:
    return text if len(text) <= chars else "..." + text[-chars:]
