"""Reasoning-gym: generate tasks from its procedural datasets and score answers with their own
scorers.

Generation: reasoning-gym derives item ``i`` of a dataset with seed ``s`` from ``Random(s + i)``,
so two splits are disjoint only if their ranges ``[s, s + size)`` do not overlap. Each spec seed
owns a 2**32-wide block of generator seeds; train starts at the block's start and test half-way
in, so splits (and different spec seeds) never share an item seed. Test also drops any question
that appears verbatim in train, which small difficulty settings (2 one-digit terms) would
otherwise produce.

Scoring: a task carries the entry's metadata and the knobs it was generated with, so the reward
service can rebuild the entry and call that dataset's ``score_answer`` without the generator.
The module is imported lazily because ``import reasoning_gym`` takes ~5 s (it loads every
dataset), which the game-only reward service and plain config validation should not pay.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from agora.tasks.base import Task, TaskError, TaskRef, jsonable

if TYPE_CHECKING:
    from reasoning_gym.dataset import ProceduralDataset

    from agora.tasks.specs import ReasoningGymSpec

PREFIX = "reasoning_gym:"
_BLOCK = 2**32
_RESERVED = ("seed", "size")


def dataset_seed(spec_seed: int, split: str) -> int:
    """The generator seed of a split: disjoint item-seed ranges for train and test."""
    return spec_seed * _BLOCK + (0 if split == "train" else _BLOCK // 2)


def create(name: str, config: dict[str, Any], size: int, seed: int) -> ProceduralDataset:
    """``reasoning_gym.create_dataset`` with errors that say which dataset and knob is wrong."""
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        raise TaskError(f"unknown reasoning-gym dataset {name!r} (e.g. 'basic_arithmetic', "
                        f"'gsm_symbolic'; {len(DATASETS)} are registered)")
    reserved = [key for key in _RESERVED if key in config]
    if reserved:
        raise TaskError(f"reasoning_gym {name} config: {reserved} are set by the spec's "
                        "'seed'/'size' fields, not in 'config'")
    try:
        return reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except Exception as err:  # knobs are checked by asserts, TypeErrors and the generators
        raise TaskError(f"reasoning_gym {name} config {config}: "
                        f"{type(err).__name__}: {err}") from err


def generate(spec: ReasoningGymSpec, split: str, limit: int | None = None) -> list[Task]:
    """The first ``limit`` tasks of one split ("train" or "test"), in generation order; a
    limit takes a prefix, so it never changes which tasks come first."""
    train_size = spec.size
    if split == "train":
        count = train_size if limit is None else min(limit, train_size)
        entries = _entries(spec, "train", train_size, count)
        return [_task(spec, "train", index, entry) for index, entry in entries]
    wanted = spec.test_size or spec.size
    if limit is not None:
        wanted = min(wanted, limit)
    seen = {entry["question"] for _, entry in _entries(spec, "train", train_size, train_size)}
    tasks: list[Task] = []
    # Duplicates of train questions are skipped; twice the candidates (+100) is plenty unless
    # the dataset's question space is tiny, in which case the test split comes out smaller.
    candidates = 2 * (spec.test_size or spec.size) + 100
    for index, entry in _entries(spec, "test", candidates, candidates):
        if len(tasks) == wanted:
            break
        if entry["question"] in seen:
            continue
        seen.add(entry["question"])
        tasks.append(_task(spec, "test", index, entry))
    return tasks


def train_task_at(spec: ReasoningGymSpec, index: int) -> Task:
    """Train item ``index % spec.size`` alone, without generating the split before it: what a
    curriculum needs to draw one task with a level's knobs (agora/curriculum/ladders.py)."""
    knobs = json.dumps(jsonable(spec.config), sort_keys=True)
    index %= spec.size
    dataset = _dataset(spec.name, knobs, spec.size, dataset_seed(spec.seed, "train"))
    return _task(spec, "train", index, dataset[index])


@lru_cache(maxsize=32)
def _dataset(name: str, knobs_json: str, size: int, seed: int) -> ProceduralDataset:
    return create(name, json.loads(knobs_json), size, seed)


def _entries(
    spec: ReasoningGymSpec, split: str, size: int, count: int
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Items are generated on demand: a small limit does not pay for the whole split."""
    dataset = create(spec.name, spec.config, size, dataset_seed(spec.seed, split))
    for index in range(count):
        yield index, dataset[index]


def _task(spec: ReasoningGymSpec, split: str, index: int, entry: dict[str, Any]) -> Task:
    knobs = ""
    if spec.config:
        digest = hashlib.sha1(json.dumps(jsonable(spec.config), sort_keys=True).encode())
        knobs = "@" + digest.hexdigest()[:8]
    return Task(
        task_id=f"rg:{spec.name}{knobs}:{split}:{spec.seed}:{index}",
        kind="math",
        question=entry["question"],
        answer=str(entry["answer"]),
        source=PREFIX + spec.name,
        difficulty=spec.difficulty,
        metadata={"rg_entry": jsonable(entry.get("metadata", {})),
                  "rg_config": jsonable(spec.config)},
    )


def is_reasoning_gym(task: TaskRef) -> bool:
    return task.source.startswith(PREFIX)


def score(answer: str, task: TaskRef) -> float:
    """The dataset's own score (1.0 = right) of ``answer``; ``TaskError`` if the task itself
    is unusable (unknown dataset, bad knobs, metadata its scorer cannot read)."""
    dataset = _scorer(task.source[len(PREFIX):], _knobs_key(task))
    entry = {"question": task.question, "answer": task.answer,
             "metadata": task.metadata.get("rg_entry", {})}
    return float(dataset.score_answer(answer, entry))


def check_gold(task: TaskRef) -> None:
    """Raise ``TaskError`` unless the scorer accepts the task's own answer: this is what tells
    a broken task (missing metadata) apart from a wrong response."""
    try:
        gold = score(task.answer, task)
    except TaskError:
        raise
    except Exception as err:
        raise TaskError(f"{task.source}: its scorer cannot score this task "
                        f"({type(err).__name__}: {err}); is 'metadata' the task's?") from err
    if gold < 1.0:
        raise TaskError(f"{task.source}: its scorer gives the task's own answer "
                        f"{task.answer!r} {gold}, not 1.0; is 'metadata' the task's?")


def _knobs_key(task: TaskRef) -> str:
    knobs = task.metadata.get("rg_config", {})
    if not isinstance(knobs, dict):
        raise TaskError(f"{task.source}: metadata 'rg_config' must be an object")
    return json.dumps(knobs, sort_keys=True)


@lru_cache(maxsize=256)
def _scorer(name: str, knobs_json: str) -> ProceduralDataset:
    """One dataset object per (dataset, knobs): scoring needs the instance, not its items.

    lru_cache is thread-safe; two threads may both build a missing entry, which is harmless.
    """
    return create(name, json.loads(knobs_json), size=1, seed=0)
