"""``agora reflect ...``: the reflection pipeline, one command per stage.

    agora reflect oracle configs/reflection_math.yaml   # actor answers, oracle critiques
    agora reflect oracle ... --stage sft                # again on the SFT actor's answers
    agora reflect sft    configs/reflection_math.yaml   # SFT actor + critic adapters
    agora reflect pairs  configs/reflection_math.yaml   # preference pairs, no inference
    agora reflect dpo    configs/reflection_math.yaml   # DPO both, from SFT
    agora reflect eval   configs/reflection_math.yaml --stage base|sft|dpo
    agora reflect eval   ... --stage dpo --critic-stage sft   # whose training moved the figures
    agora reflect probe  configs/reflection_math.yaml --stage dpo   # heeds / gives true verdicts?
    agora reflect all    configs/reflection_math.yaml   # every stage, then the three evals

Every mistake a user can make (bad config field, missing stage output, unreachable server)
ends in a one-paragraph message and exit code 2 (1 when a server fails), never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agora.config.base import ConfigError
from agora.reflection.config import STAGES, ReflectionConfig, load_reflection_config

reflect_app = typer.Typer(
    add_completion=False, no_args_is_help=True,
    help="Multi-agent reflection (actor + critic): oracle data, SFT, pairs, DPO, evaluation.",
)
console = Console()
CONFIG_ARG = typer.Argument(..., help="reflection config YAML")
SET_OPTION = typer.Option(None, "--set",
                          help="override a config field, KEY.PATH=VALUE (YAML value; repeatable)")


def _log(message: str) -> None:
    console.print(escape(message), soft_wrap=True)


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """Turn the errors a user can cause into a message and an exit code."""
    from agora.data import TaskError
    from agora.reflection.records import DataError
    from agora.reflection.server import ServerError
    from agora.serving.client import PolicyServerError, PolicyUnavailable

    try:
        yield
    except ConfigError as err:
        console.print(f"[bold red]config error[/]: {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except (DataError, TaskError, ValueError) as err:
        console.print(f"[bold red]error[/]: {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except (ServerError, PolicyServerError, PolicyUnavailable) as err:
        console.print(f"[bold red]server error[/]: {escape(str(err))}", soft_wrap=True)
        raise typer.Exit(1) from None


def _config(path: Path, overrides: list[str] | None = None) -> ReflectionConfig:
    with _failures():
        return load_reflection_config(path, overrides or ())


def _with_server(cfg: ReflectionConfig, job: Callable[[str], object]) -> object:
    from agora.reflection.server import policy_server

    with policy_server(cfg, log=_log) as url:
        return job(url)


def _require_stage(option: str, stage: str, allowed: tuple[str, ...] = STAGES) -> None:
    """A clear CLI error for a stage name not in ``allowed`` (before any server starts)."""
    if stage not in allowed:
        console.print("[bold red]error[/]: " + escape(f"{option} must be one of "
                                                      f"{list(allowed)}, not {stage!r}"),
                      soft_wrap=True)
        raise typer.Exit(2)


def _save_report(cfg: ReflectionConfig, name: str, report: dict) -> Path:
    path = cfg.run_dir / "reports" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


@reflect_app.command("oracle")
def oracle_cmd(
    config: Path = CONFIG_ARG,
    stage: str = typer.Option("base", help="whose first answers: base (no adapter) or sft (the "
                              "SFT actor's, for dpo.data_from: sft)"),
    overrides: list[str] = SET_OPTION,
) -> None:
    """(a) Oracle data: actor answers, oracle critiques and refines -> <run>/oracle.jsonl.

    Every answer and refinement is checked against the ground truth here, once. With --stage
    sft the SFT actor answers instead -> <run>/oracle-sft.jsonl."""
    from agora.reflection.clients import oracle_api_key
    from agora.reflection.oracle import ORACLE_ROUNDS, collect_oracle_data, oracle_path
    from agora.reflection.server import require_adapters

    cfg = _config(config, overrides)
    _require_stage("--stage", stage, tuple(ORACLE_ROUNDS))
    with _failures():
        oracle_api_key(cfg.oracle.api_key_env)  # before a server starts, not after
        require_adapters(cfg, stage)
        started = time.monotonic()
        report = _with_server(cfg, lambda url: collect_oracle_data(cfg, url, _log, stage))
        report["seconds"] = round(time.monotonic() - started, 1)
    _save_report(cfg, "oracle" if stage == "base" else f"oracle-{stage}", report)
    console.print(f"{report['answers']} first answers ({report['initial_accuracy']:.1%} right), "
                  f"{report['critiques']} critiques (refinements {report['refined_accuracy']:.1%}"
                  f" right, verdicts {report['verdict_accuracy']:.1%} right) in "
                  f"{report['seconds']:.0f} s -> {oracle_path(cfg, stage)}")


def _training_table(title: str, report: dict) -> Table:
    table = Table(title=title)
    for column in ("role", "examples", "steps", "seconds", "last loss"):
        table.add_column(column, justify="right")
    for role, r in report.items():
        loss = r.get("final_loss")
        table.add_row(role, str(r.get("examples", r.get("pairs", 0))), str(r.get("steps", "-")),
                      str(r.get("seconds", "-")),
                      "kept SFT" if r.get("kept") else ("-" if loss is None else f"{loss:.4f}"))
    return table


@reflect_app.command("sft")
def sft_cmd(config: Path = CONFIG_ARG, overrides: list[str] = SET_OPTION) -> None:
    """(b) SFT of the actor and critic LoRA adapters -> <run>/sft/{actor,critic}.

    TRL's SFTTrainer, on the oracle texts the ground truth vouches for."""
    from agora.reflection.sft import train_sft

    cfg = _config(config, overrides)
    with _failures():
        report = train_sft(cfg, _log)
    _save_report(cfg, "sft", report)
    console.print(_training_table(f"SFT -> {cfg.run_dir / 'sft'}", report))


@reflect_app.command("pairs")
def pairs_cmd(config: Path = CONFIG_ARG, overrides: list[str] = SET_OPTION) -> None:
    """(c) Preference pairs, no inference -> <run>/pairs/{actor,critic}.jsonl.

    First and refined answers compared with the ground truth (rules: agora/reflection/pairs.py)."""
    from agora.reflection.pairs import write_pairs

    cfg = _config(config, overrides)
    with _failures():
        counts = write_pairs(cfg)
    _save_report(cfg, "pairs", counts)
    table = Table(title=f"preference pairs -> {cfg.run_dir / 'pairs'}")
    table.add_column("role")
    table.add_column("rule")
    table.add_column("pairs", justify="right")
    for role, by_rule in counts.items():
        for rule, n in by_rule.items():
            table.add_row(role, rule, str(n))
        table.add_row(f"[bold]{role}", "[bold]total", f"[bold]{sum(by_rule.values())}")
    console.print(table)


@reflect_app.command("dpo")
def dpo_cmd(config: Path = CONFIG_ARG, overrides: list[str] = SET_OPTION) -> None:
    """(d) DPO of both adapters from SFT -> <run>/dpo/{actor,critic}.

    TRL's DPOTrainer; the reference policy is the SFT adapter."""
    from agora.reflection.dpo import train_dpo

    cfg = _config(config, overrides)
    with _failures():
        report = train_dpo(cfg, _log)
    _save_report(cfg, "dpo", report)
    console.print(_training_table(f"DPO -> {cfg.run_dir / 'dpo'}", report))


def metrics_table(results: list[dict]) -> Table:
    turns = results[0]["turns"]
    names = ["pass1@turn1", f"maj1@turn{turns}", f"pass1@turn{turns}"]
    table = Table(title=f"held-out problems: {results[0]['problems']}, {turns} turns")
    for column in ("stage", *names, "right->wrong", "wrong->right", "seconds"):
        table.add_column(column, justify="right")
    for r in results:
        table.add_row(r["stage"], *(f"{r[n]:.1%}" for n in names), str(r["right_to_wrong"]),
                      str(r["wrong_to_right"]), f"{r['seconds']:.0f}")
    return table


def metrics_line(r: dict) -> str:
    """The three numbers on one line (a narrow terminal may cut the table's headers)."""
    k = r["turns"]
    return (f"{r['stage']}: pass1@turn1 {r['pass1@turn1']:.1%}  maj1@turn{k} "
            f"{r[f'maj1@turn{k}']:.1%}  pass1@turn{k} {r[f'pass1@turn{k}']:.1%}")


@reflect_app.command("eval")
def eval_cmd(
    config: Path = CONFIG_ARG,
    stage: str = typer.Option("dpo", help="base (no adapters), sft or dpo"),
    critic_stage: str = typer.Option(None, "--critic-stage", help="the critic plays this "
                                     "stage's adapter instead (an ablation: e.g. --stage dpo "
                                     "--critic-stage sft -> eval/dpo-critic-sft.json)"),
    overrides: list[str] = SET_OPTION,
) -> None:
    """(e) Evaluate: pass1@turn1, maj1@turn5, pass1@turn5 -> <run>/eval/<stage>.json.

    On the held-out split the actor answers, the critic reviews, the actor refines (eval.turns
    answers per problem); definitions in agora/reflection/scores.py."""
    from agora.reflection.evaluate import evaluate_stage
    from agora.reflection.server import evaluation_name, require_adapters

    cfg = _config(config, overrides)
    _require_stage("--stage", stage)
    _require_stage("--critic-stage", critic_stage or stage)
    with _failures():
        require_adapters(cfg, stage, critic_stage)
        result = _with_server(cfg, lambda url: evaluate_stage(cfg, url, stage, _log,
                                                              critic_stage))
    name = evaluation_name(stage, critic_stage)
    console.print(metrics_table([result]))
    console.print(metrics_line(result) + f" -> {cfg.run_dir / 'eval' / name}.json",
                  soft_wrap=True)


@reflect_app.command("probe")
def probe_cmd(
    config: Path = CONFIG_ARG,
    stage: str = typer.Option("dpo", help="whose actor: base (no adapter), sft or dpo"),
    overrides: list[str] = SET_OPTION,
) -> None:
    """Does the actor follow the verdict? Each held-out first answer refined after "correct"
    and after "wrong". Does the critic judge? The right result and one off, each judged.
    -> <run>/eval/<stage>.verdicts.json (agora/reflection/verdict_probe.py)."""
    from agora.reflection.server import require_adapters
    from agora.reflection.verdict_probe import probe_verdicts

    cfg = _config(config, overrides)
    _require_stage("--stage", stage)
    with _failures():
        require_adapters(cfg, stage)
        result = _with_server(cfg, lambda url: probe_verdicts(cfg, url, stage, _log))
    table = Table(title=f"{stage}: the same first answer after each verdict")
    for column in ("first answer", "verdict", "answers", "changed", "right after"):
        table.add_column(column, justify="right")
    for name, cell in result["cells"].items():
        first, verdict = name.split("+")
        n = cell["n"]
        table.add_row(first.removesuffix("_answer"), verdict, str(n),
                      f"{cell['changed'] / n:.0%}" if n else "-",
                      f"{cell['now_right'] / n:.0%}" if n else "-")
    console.print(table)
    judged = Table(title=f"{stage}: the critic on the right result and on one off")
    for column in ("answer", "judged", '"correct"', '"wrong"', "no verdict"):
        judged.add_column(column, justify="right")
    for name, cell in result["critic"].items():
        n = cell["n"]
        judged.add_row(name.removesuffix("_answer"), str(n),
                       *(f"{cell[v] / n:.0%}" if n else "-" for v in ("correct", "wrong", "none")))
    console.print(judged)
    console.print(f"{result['no_final_answer']} of {result['problems']} first answers had no "
                  f"final answer (left out) -> {cfg.run_dir / 'eval' / stage}.verdicts.json",
                  soft_wrap=True)


@reflect_app.command("all")
def all_cmd(config: Path = CONFIG_ARG, overrides: list[str] = SET_OPTION) -> None:
    """Every stage (eval base, oracle, sft, [oracle sft], pairs, dpo, eval sft, eval dpo), one
    server (the second oracle round when dpo.data_from is sft).

    Prints the metrics of the three stages and the wall time of each step."""
    from agora.reflection.dpo import train_dpo
    from agora.reflection.evaluate import evaluate_stage
    from agora.reflection.oracle import collect_oracle_data
    from agora.reflection.pairs import write_pairs
    from agora.reflection.sft import train_sft

    cfg = _config(config, overrides)
    walls: dict[str, float] = {}

    def timed(name: str, job: Callable[[], object]) -> object:
        started = time.monotonic()
        out = job()
        walls[name] = round(time.monotonic() - started, 1)
        _log(f"{name}: {walls[name]:.0f} s")
        return out

    def pipeline(url: str) -> list[dict]:
        results = [timed("eval base", lambda: evaluate_stage(cfg, url, "base", _log))]
        _save_report(cfg, "oracle", timed("oracle", lambda: collect_oracle_data(cfg, url, _log)))
        _save_report(cfg, "sft", timed("sft", lambda: train_sft(cfg, _log)))
        if cfg.dpo.data_from == "sft":
            _save_report(cfg, "oracle-sft", timed("oracle sft", lambda: collect_oracle_data(
                cfg, url, _log, "sft")))
        _save_report(cfg, "pairs", timed("pairs", lambda: write_pairs(cfg)))
        _save_report(cfg, "dpo", timed("dpo", lambda: train_dpo(cfg, _log)))
        for stage in ("sft", "dpo"):
            results.append(timed(f"eval {stage}",
                                 lambda stage=stage: evaluate_stage(cfg, url, stage, _log)))
        return results

    with _failures():
        results = _with_server(cfg, pipeline)
    _save_report(cfg, "all", {"results": results, "wall_seconds": walls})
    console.print(metrics_table(results))
    for r in results:
        console.print(metrics_line(r), soft_wrap=True)
    console.print("wall times: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in walls.items()))
