"""Reasoning-gym: generate tasks from its procedural datasets and score answers with their own
scorers.

Generation: reasoning-gym derives item ``i`` of a dataset with seed ``s`` from ``Random(s + i)``.
Each spec seed owns a 2**32-wide block of generator seeds; train draws from the block's start and
test from half-way in, so the two never replay the same draws.

Held-out questions: a question belongs to the test split iff a hash of its text falls in the
first ``test_fraction`` of the hash range. Train keeps the draws outside that share, test the
draws inside it. Why not "test = fresh draws minus any question train has": with a small
question space (two 1-2 digit terms) the common, easy questions (1-digit terms) nearly all turn
up in train, so that test split was mostly the rarer, harder 2-digit questions and held-out
accuracy came out far below training accuracy for the same policy (issue 3's first report).
A hash partition is blind to difficulty, so both splits follow the generator's distribution
and still never share a question. Train holds the first ``size`` train-share draws.

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

from agora.data.base import Task, TaskError, TaskRef, jsonable

if TYPE_CHECKING:
    from reasoning_gym.dataset import ProceduralDataset

    from agora.data.specs import ReasoningGymSpec

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


def in_test_share(question: str, test_fraction: float) -> bool:
    """Whether ``question`` belongs to the held-out share of the question space."""
    digest = hashlib.sha1(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < test_fraction


def train_draws(spec: ReasoningGymSpec) -> int:
    """Generator items the train split may draw from: enough for ``size`` train-share
    questions (about ``size / (1 - test_fraction)``) with a wide margin."""
    return int(2 * spec.size / (1 - spec.test_fraction)) + 100


def generate(spec: ReasoningGymSpec, split: str, limit: int | None = None) -> list[Task]:
    """The first ``limit`` tasks of one split ("train" or "test"), in generation order; a
    limit takes a prefix, so it never changes which tasks come first."""
    if split == "train":
        wanted, draws, keep = spec.size, train_draws(spec), False
    else:
        # About wanted / test_fraction draws give `wanted` test questions; twice that (+100) is
        # plenty unless the question space is tiny; then the test split comes out smaller.
        wanted = spec.test_size or spec.size
        draws, keep = int(2 * wanted / spec.test_fraction) + 100, True
    if limit is not None:
        wanted = min(wanted, limit)
    tasks: list[Task] = []
    for index, entry in _entries(spec, split, draws):
        if len(tasks) == wanted:
            break
        if in_test_share(entry["question"], spec.test_fraction) == keep:
            tasks.append(_task(spec, split, index, entry))
    return tasks


def train_task_at(spec: ReasoningGymSpec, index: int) -> Task:
    """A train task without generating the split before it: the first train-share item at or
    after draw ``index % spec.size``, which is always one of ``generate``'s ``size`` train
    tasks. What a curriculum needs to draw one task with a level's knobs
    (agora/train/curriculum/ladders.py)."""
    knobs = json.dumps(jsonable(spec.config), sort_keys=True)
    draws = train_draws(spec)
    dataset = _dataset(spec.name, knobs, draws, dataset_seed(spec.seed, "train"))
    for position in range(index % spec.size, draws):
        entry = dataset[position]
        if not in_test_share(entry["question"], spec.test_fraction):
            return _task(spec, "train", position, entry)
    raise TaskError(f"reasoning_gym {spec.name}: no train question among {draws} draws "
                    f"(test_fraction {spec.test_fraction} holds out nearly every question)")


@lru_cache(maxsize=32)
def _dataset(name: str, knobs_json: str, size: int, seed: int) -> ProceduralDataset:
    return create(name, json.loads(knobs_json), size, seed)


def _entries(
    spec: ReasoningGymSpec, split: str, draws: int
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Items are generated on demand: callers stop early, and pay only for what they read."""
    dataset = create(spec.name, spec.config, draws, dataset_seed(spec.seed, split))
    for index in range(draws):
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
