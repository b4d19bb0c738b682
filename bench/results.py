"""bench/results.md: every bench script appends one dated section per run, so `make bench`
leaves all figures (and their history, before/after a fix) in one file.

Scripts run as ``python bench/<name>.py``, so this module is imported as a sibling
(``from results import append_section``): ``bench/`` is the script's own directory on sys.path.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# AGORA_BENCH_RESULTS: another file (tests/integration/test_bench_smoke.py runs the scripts on
# tiny-random and must not add to the real figures).
RESULTS = Path(os.environ.get("AGORA_BENCH_RESULTS", ROOT / "bench" / "results.md"))
TITLE = "# Benchmark results\n\nAppended by the `bench/` scripts (`make bench`), newest last.\n"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def append_section(script: str, body: str, path: Path = RESULTS) -> Path:
    """Append ``## <script>, <UTC time>`` and ``body``; the file gets its title when new."""
    if not path.exists():
        path.write_text(TITLE)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    with path.open("a") as handle:
        handle.write(f"\n## {script}, {stamp}\n\n{body.rstrip()}\n")
    return path
