"""``agora results``: every learning experiment of a plan, then one table (agora/results/)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from agora.config.base import ConfigError

console = Console()


def results(
    plan: Path = typer.Argument(Path("configs/results.yaml"), help="the experiments to run"),
    out: Path = typer.Option(Path("results"), help="folder for results.md, results.json, "
                             "curves.png, the runs and their logs"),
    only: list[str] = typer.Option(None, help="run only this experiment (repeat for more)"),
    rerun: bool = typer.Option(False, help="run again experiments already done in --out "
                               "(warm starts included)"),
    reread: bool = typer.Option(False, help="read the figures of experiments done before "
                                "again from their runs' files (runs nothing for them)"),
) -> None:
    """Run the plan's experiments (hours for configs/results.yaml), each as the commands a
    user would type, and write results.md: before/after figures with 95% intervals, the
    targets met, what each learner saw; and curves.png. Done experiments are kept: a rerun
    continues an interrupted plan (a finished warm start too), and the table holds every
    experiment done so far."""
    from agora.results.commands import check_configs
    from agora.results.plan import load_plan
    from agora.results.report import write_results
    from agora.results.runner import run_plan

    try:
        parsed = load_plan(plan)
        selected = parsed.select(list(only or []))
        check_configs(selected)
        chosen = {e.name for e in selected}
    except ConfigError as err:
        console.print(f"[bold red]plan error[/]: {escape(str(err))}")
        raise typer.Exit(2) from None
    outcomes = run_plan(parsed.experiments, out, rerun, log=lambda line: console.print(
        f"[cyan]>[/] {escape(line)}", soft_wrap=True), chosen=chosen, reread=reread)
    written = write_results(outcomes, out, plan)
    console.print(written["markdown"].read_text(), markup=False, highlight=False)
    console.print("[green]written[/] " + ", ".join(str(p) for p in written.values()))
    failed = [o["name"] for o in outcomes if o["status"] != "done"]
    if failed:
        console.print(f"[bold red]failed[/]: {failed} (their logs are in {out}/logs)")
        raise typer.Exit(1)
