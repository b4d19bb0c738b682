"""``agora data ...``: task files a run can load.

    agora data math-style --out data/math_style.jsonl   # MATH-500 rows of reasoning-gym's
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from agora.data.math_style import SUBJECTS, write_math_style

data_app = typer.Typer(add_completion=False, no_args_is_help=True,
                       help="Task files in benchmark formats.")
console = Console()


@data_app.command("math-style")
def math_style_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="JSON-lines file to write"),
    per_subject: int = typer.Option(150, min=1, max=10_000, help="distinct problems per subject"),
    seed: int = typer.Option(0, min=0, help="reasoning-gym's generator seed"),
) -> None:
    """Reasoning-gym problems as MATH-500 rows (problem, solution with a boxed answer, answer,
    subject, level, unique_id); load them with `task: {source: jsonl, format: math}`."""
    written = write_math_style(out, per_subject, seed)
    subjects = ", ".join(f"{s.subject} (level {s.level}: {s.dataset})" for s in SUBJECTS)
    console.print(f"{out}: {written} problems; {subjects}")
