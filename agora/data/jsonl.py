"""Read JSON-lines files with errors that name the file and line (tasks, verifier data)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_jsonl(path: Path, error: type[Exception] = ValueError,
               label: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line. A missing file or bad JSON raises
    ``error`` naming ``label`` (default: the path) and the line."""
    label = label or str(path)
    if not path.is_file():
        raise error(f"{path}: no such file")
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as err:
                raise error(f"{label} line {number}: invalid JSON ({err.msg})") from None
