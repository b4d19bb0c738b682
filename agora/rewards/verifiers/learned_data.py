"""Data for the learned verifier: rows of (question, answer, label, difficulty) from finished
runs, balanced per difficulty, and turned into (right, wrong) pairs for RewardTrainer.

Why balance per difficulty: on a mixed set, hard questions are mostly answered wrong and easy
ones mostly right, so a classifier can score well by recognising *the question's difficulty*
and never reading the answer. With right == wrong inside every difficulty bucket, difficulty
alone predicts nothing.

Difficulty comes from the task (``Task.difficulty``, set by the task spec) when the run's config
gives one; otherwise from ``difficulty_proxy``: the digits in the question's numbers, bucketed.
That is what basic-arithmetic's knobs vary (terms x digits), and for word problems more and
larger numbers roughly means more steps. NLI questions mostly land in one bucket, which is fine:
there difficulty is not visible in the text anyway.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agora.data.jsonl import read_jsonl
from agora.rollout.records import EpisodeRecord

DifficultyMode = Literal["auto", "task", "proxy"]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# (upper bound on the question's digit count, bucket name); the last bound is open.
_DIGIT_BUCKETS = ((2, "0-2"), (4, "3-4"), (8, "5-8"), (16, "9-16"))


class DataError(ValueError):
    """Input the verifier commands cannot use; the message names the file and line."""


class VerifierRow(BaseModel):
    """One labelled answer. Extra fields (run_id, episode_id, seat) pass through untouched."""

    model_config = ConfigDict(extra="allow")

    question: str
    answer: str
    label: Literal[0, 1] = Field(..., description="1 = the rule verifier said right")
    difficulty: str | int
    task_id: str = ""
    round: int | None = None

    @property
    def bucket(self) -> str:
        return str(self.difficulty)


def difficulty_proxy(question: str) -> str:
    """The question's total digit count, bucketed (see the module docstring for why)."""
    digits = sum(sum(ch.isdigit() for ch in number) for number in _NUMBER.findall(question))
    for bound, name in _DIGIT_BUCKETS:
        if digits <= bound:
            return f"proxy:digits {name}"
    return f"proxy:digits {_DIGIT_BUCKETS[-1][0] + 1}+"


# --- reading ---------------------------------------------------------------------------------


def jsonl_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line; bad JSON names the line."""
    return read_jsonl(path, DataError)

def read_rows(path: Path) -> list[VerifierRow]:
    """A data file written by ``gen-data`` (or ``balance``); every row is validated."""
    rows = []
    for number, raw in jsonl_lines(path):
        try:
            rows.append(VerifierRow.model_validate(raw))
        except ValidationError as err:
            raise DataError(f"{path} line {number}: {_first_error(err)}") from None
    return rows


def write_rows(path: Path, rows: Iterable[VerifierRow]) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row.model_dump(mode="json"), ensure_ascii=False) + "\n")
            count += 1
    return count


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "row"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


# --- gen-data --------------------------------------------------------------------------------


@dataclass
class GenStats:
    episodes: int = 0
    discussions: int = 0
    answers: int = 0
    duplicates: int = 0
    by_label: Counter = field(default_factory=Counter)


class TaskIndex:
    """The tasks of a run config by id, loaded once per config (generation takes seconds)."""

    def __init__(self) -> None:
        self._cache: dict[Path, dict[str, Any]] = {}

    def tasks(self, config: Path) -> dict[str, Any]:
        config = config.resolve()
        if config not in self._cache:
            from agora.config.base import ConfigError
            from agora.config.run import load_config
            from agora.data import TaskError, load_tasks

            try:
                cfg = load_config(config)
                if cfg.environment.task is None:
                    raise DataError(f"{config}: environment.task is not set, so the questions "
                                    "of its episodes cannot be found")
                tasks = load_tasks(cfg.environment.task, split="all")
            except (ConfigError, TaskError) as err:
                raise DataError(f"{config}: {err}") from None
            self._cache[config] = {t.task_id: t for t in tasks}
        return self._cache[config]


def gen_data(
    run_dirs: Iterable[Path],
    config: Path | None = None,
    difficulty: DifficultyMode = "auto",
    stats: GenStats | None = None,
) -> list[VerifierRow]:
    """One row per discussion answer in the runs' ``episodes.jsonl``, first copy of each
    (question, answer) only. Questions come from the tasks of ``config`` (default: each run's
    ``config.yaml``) looked up by the record's task id, or from ``info["question"]``."""
    if config is not None and not config.is_file():
        raise DataError(f"{config}: no such config file")
    stats = stats if stats is not None else GenStats()
    index = TaskIndex()
    seen: set[tuple[str, str]] = set()
    rows: list[VerifierRow] = []
    for run_dir in run_dirs:
        episodes = run_dir / "episodes.jsonl"
        if not episodes.is_file():
            raise DataError(f"{run_dir}: no episodes.jsonl (is it a run folder?)")
        run_config = config or (run_dir / "config.yaml")
        for number, raw in jsonl_lines(episodes):
            where = f"{episodes} line {number}"
            try:
                record = EpisodeRecord.model_validate(raw)
            except ValidationError as err:
                raise DataError(f"{where}: not an episode record: {_first_error(err)}") from None
            stats.episodes += 1
            if record.env != "discussion":
                continue
            stats.discussions += 1
            for row in _episode_rows(record, where, run_config, index, difficulty):
                key = (row.question, row.answer)
                if key in seen:
                    stats.duplicates += 1
                    continue
                seen.add(key)
                stats.answers += 1
                stats.by_label[row.label] += 1
                rows.append(row)
    return rows


def _episode_rows(
    record: EpisodeRecord, where: str, config: Path, index: TaskIndex, mode: DifficultyMode
) -> list[VerifierRow]:
    scores = _scores(record, where)
    question, task_difficulty = _question(record, where, config, index)
    if mode == "task" and task_difficulty is None:
        raise DataError(f"{where}: task {record.task_id!r} has no difficulty (set the task "
                        "spec's 'difficulty', or use --difficulty proxy/auto)")
    level = (task_difficulty if mode != "proxy" and task_difficulty is not None
             else difficulty_proxy(question))
    seats = len(record.seats)
    rows = []
    for i, turn in enumerate(record.turns):
        rnd, seat = divmod(i, seats)
        rows.append(VerifierRow(
            question=question, answer=turn.text, label=scores[rnd][seat], difficulty=level,
            task_id=record.task_id, round=rnd, run_id=record.run_id,
            episode_id=record.episode_id, seat=seat,
        ))
    return rows


def _scores(record: EpisodeRecord, where: str) -> list[list[int]]:
    """info["scores"][round][seat] as 0/1, checked against the turns it labels."""
    scores = record.info.get("scores")
    if scores is None:
        raise DataError(f"{where}: discussion episode {record.episode_id!r} has no "
                        "info['scores'] (was it verified?)")
    seats = len(record.seats)
    if (not isinstance(scores, list) or not scores
            or not all(isinstance(r, list) and len(r) == seats for r in scores)):
        raise DataError(f"{where}: info['scores'] must be a list of rounds with one score per "
                        f"seat ({seats} seats)")
    if len(scores) * seats != len(record.turns):
        raise DataError(f"{where}: info['scores'] has {len(scores)} rounds x {seats} seats but "
                        f"the episode has {len(record.turns)} turns")
    labels = []
    for rnd, row in enumerate(scores):
        out = []
        for seat, value in enumerate(row):
            if isinstance(value, bool) or value not in (0, 1):
                raise DataError(f"{where}: info['scores'][{rnd}][{seat}] is {value!r}; "
                                "expected 1.0 (right) or 0.0 (wrong)")
            out.append(int(value))
        labels.append(out)
    return labels


def _question(
    record: EpisodeRecord, where: str, config: Path, index: TaskIndex
) -> tuple[str, str | int | None]:
    """The episode's question and its task's difficulty (None when the task has none)."""
    if record.task_id and config.is_file():
        task = index.tasks(config).get(record.task_id)
        if task is None:
            raise DataError(f"{where}: task {record.task_id!r} is not among the tasks of "
                            f"{config} (a different config than the run's?)")
        return task.question, task.difficulty
    question = record.info.get("question")
    if isinstance(question, str) and question:
        return question, None
    raise DataError(f"{where}: cannot find the question of task {record.task_id!r}: no "
                    f"{config} to reload it from and no info['question']; pass --config")


# --- balance ---------------------------------------------------------------------------------


@dataclass
class BucketCounts:
    bucket: str
    right: int
    wrong: int
    kept_right: int = 0
    kept_wrong: int = 0

    @property
    def dropped(self) -> bool:
        return self.kept_right == 0


def balance(rows: list[VerifierRow], seed: int = 0) -> tuple[list[VerifierRow], list[BucketCounts]]:
    """Downsample the majority label in every difficulty bucket to the minority's count; a
    bucket with one label only is dropped. Kept rows stay in their input order."""
    rng = random.Random(seed)
    buckets: dict[str, dict[int, list[int]]] = defaultdict(lambda: {0: [], 1: []})
    for i, row in enumerate(rows):
        buckets[row.bucket][row.label].append(i)
    keep: set[int] = set()
    counts = []
    for name in sorted(buckets, key=_bucket_order):
        right, wrong = buckets[name][1], buckets[name][0]
        entry = BucketCounts(name, len(right), len(wrong))
        n = min(len(right), len(wrong))
        if n:
            keep.update(rng.sample(right, n))
            keep.update(rng.sample(wrong, n))
            entry.kept_right = entry.kept_wrong = n
        counts.append(entry)
    return [row for i, row in enumerate(rows) if i in keep], counts


def _bucket_order(name: str) -> tuple[int, float, str]:
    """Numbers first, in numeric order, then labels (proxy buckets by their first number)."""
    match = re.search(r"-?\d+(?:\.\d+)?", name)
    try:
        return (0, float(name), "")
    except ValueError:
        return (1, float(match.group()) if match else 0.0, name)


# --- pairs -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pair:
    chosen: VerifierRow  # right
    rejected: VerifierRow  # wrong

    @property
    def same_question(self) -> bool:
        return self.chosen.question == self.rejected.question


def split_by_question(
    rows: list[VerifierRow], eval_fraction: float, seed: int = 0
) -> tuple[list[VerifierRow], list[VerifierRow]]:
    """Hold out whole questions, so evaluation measures answers to questions never trained on."""
    if not 0.0 <= eval_fraction < 1.0:
        raise DataError(f"eval fraction must be in [0, 1), got {eval_fraction}")
    questions = list(dict.fromkeys(row.question for row in rows))
    random.Random(seed).shuffle(questions)
    n_eval = round(len(questions) * eval_fraction)
    if eval_fraction > 0 and n_eval == 0 and len(questions) >= 2:
        n_eval = 1
    held_out = set(questions[:n_eval])
    train = [r for r in rows if r.question not in held_out]
    return train, [r for r in rows if r.question in held_out]


def build_pairs(rows: list[VerifierRow], seed: int = 0) -> tuple[list[Pair], int]:
    """(right, wrong) pairs and how many rows found no partner.

    A right and a wrong answer to the same question make the best pair: only the answer
    differs. A question answered only right (or only wrong) lends its rows to pairs across
    questions of the same difficulty bucket, which still never pits an easy right answer
    against a hard wrong one. Within a group the shorter side is cycled, so every row is used.
    """
    rng = random.Random(seed)
    by_question: dict[str, dict[int, list[VerifierRow]]] = defaultdict(lambda: {0: [], 1: []})
    for row in rows:
        by_question[row.question][row.label].append(row)
    pairs: list[Pair] = []
    leftovers: dict[str, dict[int, list[VerifierRow]]] = defaultdict(lambda: {0: [], 1: []})
    for group in by_question.values():
        if group[1] and group[0]:
            pairs += _cycle_pairs(group[1], group[0])
        else:
            for label in (0, 1):
                for row in group[label]:
                    leftovers[row.bucket][label].append(row)
    unpaired = 0
    for bucket in sorted(leftovers, key=_bucket_order):
        right, wrong = leftovers[bucket][1], leftovers[bucket][0]
        if right and wrong:
            rng.shuffle(right)
            rng.shuffle(wrong)
            pairs += _cycle_pairs(right, wrong)
        else:
            unpaired += len(right) + len(wrong)
    rng.shuffle(pairs)
    return pairs, unpaired


def _cycle_pairs(right: list[VerifierRow], wrong: list[VerifierRow]) -> list[Pair]:
    n = max(len(right), len(wrong))
    return [Pair(right[i % len(right)], wrong[i % len(wrong)]) for i in range(n)]
