"""The rows the stages hand each other, as JSONL files in the run folder.

``oracle.jsonl`` holds one ``OracleRow`` per (training problem, first answer): the task with its
ground truth, the actor's answer and every critique + refinement the oracle wrote for it, each
already checked against the ground truth. That is everything SFT and pair building need, so
neither runs a model. Files are validated when read; a bad line names the file and line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agora.data import Task
from agora.data.jsonl import read_jsonl
from agora.envs.base import ChatMessage
from agora.reflection.prompts import Verdict


class DataError(ValueError):
    """A stage's input is missing or unusable; the message says which file and what to run."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Critique(_Row):
    """One oracle sample: feedback on the actor's answer, and the refinement written after it."""

    feedback: str
    verdict: Verdict | None  # what the feedback's last "Verdict:" line says
    refined: str
    refined_extracted: str | None
    refined_correct: bool


class OracleRow(_Row):
    task: Task
    sample: int  # which first answer of this task (0 .. actor_samples - 1)
    initial: str
    initial_extracted: str | None
    initial_correct: bool
    critiques: list[Critique]
    oracle_model: str
    actor_model: str = "base"  # the served model that wrote the first answer (base or SFT)

    def verdict_right(self, critique: Critique) -> bool:
        """Does the critique's verdict agree with the ground truth about the first answer?"""
        truth: Verdict = "correct" if self.initial_correct else "wrong"
        return critique.verdict == truth


Role = Literal["actor", "critic"]
PairKind = Literal["first_turn", "refine", "critique"]


class PreferencePair(_Row):
    """A DPO example in TRL's conversational format, with the rule that made it."""

    role: Role
    kind: PairKind
    rule: str
    task_id: str
    prompt: list[ChatMessage]
    chosen: list[ChatMessage]
    rejected: list[ChatMessage]


class SFTExample(_Row):
    """An SFT example in TRL's conversational prompt-completion format."""

    role: Role
    kind: PairKind
    task_id: str
    prompt: list[ChatMessage]
    completion: list[ChatMessage]


class Turn(_Row):
    """One actor answer in an evaluation episode, with the critique that led to it."""

    answer: str
    extracted: str | None
    correct: bool
    feedback: str | None = None  # None on turn 1
    verdict: Verdict | None = None
    carried: bool = False  # the critic approved the previous answer, which stands unchanged


class Transcript(_Row):
    task_id: str
    question: str
    reference: str
    turns: list[Turn]


R = TypeVar("R", bound=BaseModel)


def write_rows(path: Path, rows: Iterable[BaseModel]) -> int:
    """Write atomically (temp file + rename): a crash never leaves half a file that the next
    stage would trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    with tmp.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row.model_dump(mode="json"), ensure_ascii=False) + "\n")
            count += 1
    tmp.replace(path)
    return count


def read_rows(path: Path, model: type[R], made_by: str) -> list[R]:
    """Rows of ``model``; a missing file says which command makes it."""
    if not path.is_file():
        raise DataError(f"{path}: not found; run `{made_by}` first")
    rows = []
    for number, data in read_jsonl(path, DataError):
        try:
            rows.append(model.model_validate(data))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise DataError(f"{path} line {number}: {where}: {first['msg']}") from None
    return rows
