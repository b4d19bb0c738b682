"""``load_tasks``: any spec (reasoning-gym, a JSONL file, a Hugging Face dataset) to tasks.

Splits are deterministic so a run's test set never leaks into its training set between restarts:
reasoning-gym uses disjoint generator seeds (see ``agora.data.rgym``); files and Hub splits are
shuffled by index with ``Random(seed)`` and the first ``round(n * test_fraction)`` go to test.
Each split keeps the source's order. Every row is validated before splitting, so a bad row is
reported whichever split is asked for.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import TypeAdapter, ValidationError

from agora.data import rgym
from agora.data.base import Task, TaskError
from agora.data.formats import PARSERS, SkipRow
from agora.data.jsonl import read_jsonl
from agora.data.specs import HFSpec, JsonlSpec, ReasoningGymSpec, Split, TaskSpec

_SPEC = TypeAdapter(TaskSpec)
_SPLITS = ("train", "test", "all")


def parse_spec(spec: TaskSpec | dict[str, Any]) -> ReasoningGymSpec | JsonlSpec | HFSpec:
    """Validate a spec given as a dict (from YAML/JSON); errors name the dotted field."""
    if isinstance(spec, ReasoningGymSpec | JsonlSpec | HFSpec):
        return spec
    try:
        return _SPEC.validate_python(spec)
    except ValidationError as err:
        lines = [
            f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in err.errors()
        ]
        raise TaskError("bad task spec: " + "; ".join(lines)) from None


def load_tasks(
    spec: TaskSpec | dict[str, Any],
    split: Split = "train",
    limit: int | None = None,
    seed: int | None = None,
) -> list[Task]:
    """The tasks of ``split`` ("train", "test" or "all" = train then test), at most ``limit``.

    ``seed`` overrides the spec's seed (same split for the same seed and source).
    """
    spec = parse_spec(spec)
    if split not in _SPLITS:
        raise TaskError(f"split must be one of {list(_SPLITS)}, got {split!r}")
    if limit is not None and limit < 0:
        raise TaskError(f"limit must be >= 0, got {limit}")
    if seed is not None:
        spec = spec.model_copy(update={"seed": seed})
    if isinstance(spec, ReasoningGymSpec):
        tasks = []
        for part in ("train", "test") if split == "all" else (split,):
            left = None if limit is None else limit - len(tasks)
            tasks += rgym.generate(spec, part, left)
    elif isinstance(spec, JsonlSpec):
        tasks = split_tasks(_jsonl_tasks(spec), split, spec.test_fraction, spec.seed)
    else:
        tasks = _hf_tasks(spec, split)
    if spec.difficulty is not None:
        tasks = [t.model_copy(update={"difficulty": spec.difficulty}) for t in tasks]
    return tasks if limit is None else tasks[:limit]


def split_tasks(tasks: list[Task], split: Split, test_fraction: float, seed: int) -> list[Task]:
    """A seeded, exact-size holdout: the same rows go to test for the same seed and file."""
    if split == "all":
        return list(tasks)
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    test = set(order[: round(len(tasks) * test_fraction)])
    return [t for i, t in enumerate(tasks) if (i in test) == (split == "test")]


def _jsonl_tasks(spec: JsonlSpec) -> list[Task]:
    path = spec.path
    rows = list(read_jsonl(path, TaskError, label=path.name))
    return _parse_rows(rows, spec.format, source=f"jsonl:{path.name}",
                       where=lambda n: f"{path.name} line {n}",
                       default_id=lambda n: f"{path.stem}:{n}")


def _hf_tasks(spec: HFSpec, split: Split) -> list[Task]:
    if spec.split is not None:
        parts = [spec.split] if isinstance(spec.split, str) else spec.split
        tasks = []
        for part in parts:
            tasks += _parse_hf(spec, part, _hf_rows(spec, part))
        _refuse_duplicate_ids(tasks, spec.name, parts)
        return split_tasks(tasks, split, spec.test_fraction, spec.seed)
    tasks = []
    for part in ("train", "test") if split == "all" else (split,):
        tasks += _parse_hf(spec, part, _hf_rows(spec, part))
    return tasks


def _refuse_duplicate_ids(tasks: list[Task], name: str, parts: list[str]) -> None:
    """Splits joined into one pool must not repeat a row (the same split named twice)."""
    seen: set[str] = set()
    for task in tasks:
        if task.task_id in seen:
            raise TaskError(f"Hugging Face dataset {name!r} splits {parts}: the id "
                            f"{task.task_id!r} is in more than one (a split named twice?)")
        seen.add(task.task_id)


def _hf_rows(spec: HFSpec, hf_split: str) -> list[tuple[int, Any]]:
    import datasets  # ~4 s to import; only Hub specs pay it

    try:
        data = datasets.load_dataset(spec.name, spec.subset, split=hf_split,
                                     data_files=spec.data_files, cache_dir=spec.cache_dir)
    except Exception as err:  # the Hub, the cache and each builder raise their own types
        raise TaskError(f"Hugging Face dataset {spec.name!r} split {hf_split!r}: "
                        f"{type(err).__name__}: {err}") from err
    return list(enumerate(data))


def _parse_hf(spec: HFSpec, hf_split: str, rows: list[tuple[int, Any]]) -> list[Task]:
    return _parse_rows(rows, spec.format, source=f"hf:{spec.name}",
                       where=lambda n: f"{spec.name}[{hf_split}] row {n}",
                       default_id=lambda n: f"{spec.name}:{hf_split}:{n}")


def _parse_rows(
    rows: Iterable[tuple[int, Any]],
    fmt: str,
    *,
    source: str,
    where: Callable[[int], str],
    default_id: Callable[[int], str],
) -> list[Task]:
    parser = PARSERS[fmt]
    tasks: list[Task] = []
    first_seen: dict[str, int] = {}
    for number, row in rows:
        if not isinstance(row, dict):
            raise TaskError(f"{where(number)}: expected a JSON object, got {type(row).__name__}")
        try:
            task = parser(row, default_id(number), source)
        except SkipRow:
            continue
        except ValueError as err:
            raise TaskError(f"{where(number)}: {err}") from None
        if task.task_id in first_seen:
            raise TaskError(f"{where(number)}: duplicate id {task.task_id!r} "
                            f"(first at {where(first_seen[task.task_id])})")
        first_seen[task.task_id] = number
        tasks.append(task)
    return tasks
