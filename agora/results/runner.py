"""Run a plan's experiments one after another, each as the commands a user would type.

Each experiment's commands run as child processes (``python -m agora.cli ...``): the stack each
one starts is stopped by that command as usual, a crash in one experiment cannot take the others
with it, and its output goes to ``<results>/logs/<name>.log``. Its outcome (figures, targets,
what the learner saw, curves) is kept in ``<results>/<name>.json``: a rerun skips experiments
already done, so an interrupted multi-hour plan picks up where it stopped. Within an
experiment, a step that makes a folder for the next (a warm start's adapter: ~25 min for
Hanabi) is not run again when the folder holds the record of the same command, so a plan
stopped after its warm start goes on from the PPO run.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agora.config.run import load_config
from agora.evaluation.curves import read_metrics
from agora.evaluation.learner import learner_summary
from agora.evaluation.switching import switching_report
from agora.results.commands import Step, outputs, steps
from agora.results.figures import (
    PAIRED_BY,
    Estimate,
    Figure,
    compare_figures,
    demo_figures,
    reflect_figures,
    train_eval_figures,
)
from agora.results.machine_speed import probe
from agora.results.plan import Experiment, Target
from agora.stack.procs import Service

FIGURES: dict[str, Callable[[Path], list[Figure]]] = {
    "demo": demo_figures, "compare": compare_figures, "train_eval": train_eval_figures,
    "reflect": reflect_figures,
}
# The training curve drawn per run: the first of these the run logged (as the trainer's
# progress view does), over updates. hanabi_score is out of 25.
CURVE_KEYS = ("win_rate", "accuracy_last", "hanabi_score", "deal_rate", "pass_rate", "solved",
              "judge_score", "reward_mean")
LOG_TAIL_LINES = 30
# Written into a step's product folder once the step exits 0: the command that made it.
STEP_RECORD = "agora_results_step.json"


def outcome_path(out: Path, exp: Experiment) -> Path:
    return out / f"{exp.name}.json"


def run_experiment(exp: Experiment, out: Path, log: Callable[[str], None] = print,
                   reuse: bool = True, probe_machine: bool = True) -> dict:
    """Run ``exp``'s commands, read its figures, hold them to its targets; the outcome is
    written to ``<out>/<name>.json`` and returned (``status``: done or failed). ``reuse``: a
    step whose product folder was made by the same command before is not run again.
    ``probe_machine``: time a fixed workload first (~3 s), kept as the outcome's
    ``machine``, so figures bought with minutes can be read against the machine's speed."""
    runs = out / "runs"
    log_path = out / "logs" / f"{exp.name}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    plan = steps(exp, runs)
    outcome: dict = {"name": exp.name, "recipe": exp.recipe, "kind": exp.kind,
                     "commands": [s.shell() for s in plan], "log": str(log_path),
                     "targets": [], "figures": [], "learner": {}, "curves": {}}
    if probe_machine:
        outcome["machine"] = machine_before(exp, log)
    started = time.monotonic()
    log_path.write_text("")
    # Appending: each step's own output is appended to the same file by its process.
    with log_path.open("a") as handle:
        for step in plan:
            if reuse and made_before(step, runs):
                log(f"{exp.name}: {step.label}: made before by the same command, kept: "
                    f"{step.product}")
                handle.write(f"$ {step.shell()}\n(kept from before: {step.product})\n")
                continue
            log(f"{exp.name}: {step.label}: {step.shell()}")
            handle.write(f"$ {step.shell()}\n")
            handle.flush()
            if step.product is not None:  # a half-made product must not pass as made
                (step.product / STEP_RECORD).unlink(missing_ok=True)
            code = run_step(step, log_path, exp.name)
            if code != 0:
                outcome.update(status="failed", error=f"'{step.label}' exited {code}")
                break
            if step.product is not None and step.product.is_dir():
                record = {"command": plain_commands([step.shell()], runs)[0]}
                (step.product / STEP_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    outcome["wall_s"] = round(time.monotonic() - started, 1)
    if outcome.get("status") != "failed":
        read_outcome(exp, out, outcome)
    if outcome["status"] == "failed":
        lines = log_path.read_text(errors="replace").splitlines()
        outcome["log_tail"] = "\n".join(lines[-LOG_TAIL_LINES:])
    outcome_path(out, exp).write_text(json.dumps(outcome, indent=2) + "\n")
    return outcome


def machine_before(exp: Experiment, log: Callable[[str], None]) -> dict:
    """The machine's speed just before ``exp`` runs, logged, with a warning when other
    processes used the CPU meanwhile (a time budget then buys less than on a quiet machine)."""
    speed = probe()
    log(f"{exp.name}: machine: {speed.line()}")
    if speed.quiet is False:
        log(f"{exp.name}: warning: the machine is not quiet ({speed.others_share:.0%} of its "
            "CPU went to other processes while it was probed); figures bought with minutes "
            "are not comparable with a quiet run's")
    return speed.as_dict()


def read_outcome(exp: Experiment, out: Path, outcome: dict) -> dict:
    """Fill ``outcome`` with what the experiment's commands left in ``out``: its figures, the
    targets held against them, what the learner saw and its curves (status done), or why
    they could not be read (status failed)."""
    found = outputs(exp, out / "runs")
    try:
        figures = FIGURES[exp.kind](found.figures)
    except (OSError, KeyError, ValueError, TypeError) as err:
        outcome.update(status="failed", error=f"reading {found.figures}: {err!r}")
        return outcome
    if found.run is not None:  # a train_eval run: its partner switches, if any
        outcome["switching"] = switching(found.run)
        figures += switching_figures(outcome["switching"])
    outcome.update(status="done", figures=[f.as_dict() for f in figures],
                   targets=[check(t, figures) for t in exp.parsed_targets()],
                   learner={}, curves={})
    for label, metrics in found.metrics.items():
        outcome["learner"][label] = learner_summary(metrics)
        outcome["curves"][label] = training_curve(metrics)
    return outcome


def kept_outcome(exp: Experiment, out: Path) -> dict | None:
    """The outcome of ``exp`` done before in ``out`` with the same commands, else None."""
    path = outcome_path(out, exp)
    if not path.is_file():
        return None
    kept = json.loads(path.read_text())
    runs = out / "runs"
    same = plain_commands(list(kept.get("commands") or []), runs) == plain_commands(
        [s.shell() for s in steps(exp, runs)], runs)
    return kept if kept.get("status") == "done" and same else None


def run_step(step: Step, log_path: Path, name: str) -> int:
    """Run one step's `agora` command, its output appended to ``log_path``, tethered to this
    process (agora.stack.procs.Service): if `agora results` is killed, even by SIGKILL, the
    step (an `agora up` and the stack under it) goes with it rather than running on and
    clearing or rewriting a run folder nobody is watching."""
    service = Service(f"{name}: {step.label}", [sys.executable, "-m", "agora.cli", *step.args],
                      log_path).start()
    assert service.process is not None
    try:
        return service.process.wait()
    finally:
        service.stop()


def plain_commands(commands: list[str], runs: Path) -> list[str]:
    """``commands`` with the runs folder written ``<runs>``: the same folder spelt relative or
    absolute (--out results, --out /x/results) gives the same experiment."""
    for spelling in sorted({str(runs.resolve()), str(runs)}, key=len, reverse=True):
        commands = [c.replace(spelling, "<runs>") for c in commands]
    return commands


def made_before(step: Step, runs: Path) -> bool:
    """Whether ``step``'s product folder holds the record of this same command (written
    when it exited 0; removed before a run of it, so a half-made folder never counts)."""
    if step.product is None:
        return False
    try:
        record = json.loads((step.product / STEP_RECORD).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("command") == plain_commands(
        [step.shell()], runs)[0]


def switching(run: Path) -> dict:
    """The switching-partner analysis of a trained run ({} without a scheduled partner)."""
    cfg = load_config(run / "config.yaml")
    learner = cfg.learner or cfg.trainable_agents[0].name
    return switching_report(run / "episodes.jsonl", learner)


def switching_figures(report: dict) -> list[Figure]:
    """After-only figures of the partner switches: the share of returns to a strategy met
    before on which the learner got back to its earlier reward, and how fast."""
    summary = report.get("summary")
    if not summary or not summary["returns"]:
        return []
    figures = [Figure("returns recovered", None,
                      Estimate.proportion(summary["recovered"], summary["returns"]))]
    if summary["median_updates_to_recover"] is not None:
        figures.append(Figure("median updates to recover", None,
                              Estimate(float(summary["median_updates_to_recover"])), False))
    figures.append(Figure("mean forgetting (reward)", None,
                          Estimate(float(summary["mean_forgetting"])), False))
    if "partner_effect" in summary:
        figures.append(Figure("partner effect (reward)", None,
                              Estimate(float(summary["partner_effect"])), False))
    return figures


def check(target: Target, figures: list[Figure]) -> dict:
    """A target against the figure's after value; ``clear``: also beyond the 95% interval
    (the interval lies wholly on the target's side of the bound, or of the other figure's
    interval)."""
    by_name = {f.name: f for f in figures}
    result: dict = {"figure": target.figure, "target": target.describe(), "met": None,
                    "clear": None}
    figure = by_name.get(target.figure)
    if figure is None:
        result["why"] = f"no figure '{target.figure}' (figures: {sorted(by_name)})"
        return result
    # The bound: a number; the figure's own before (``"> before"``); another figure's after.
    reference = None
    if target.other == "before":
        reference = figure.before
    elif target.other is not None:
        reference = by_name[target.other].after if target.other in by_name else None
    if target.other is not None and reference is None:
        result["why"] = f"no figure '{target.other}' (figures: {sorted(by_name)})"
        return result
    after = figure.after
    bound = target.number if reference is None else reference.value
    result["value"] = after.value
    result["bound"] = bound
    result["met"] = target.holds(after.value, bound)
    # The bound's own interval: a number has none; an estimate has its 95% interval.
    lo = hi = bound
    if reference is not None:
        lo = reference.lo if reference.lo is not None else bound
        hi = reference.hi if reference.hi is not None else bound
    if after.lo is not None and after.hi is not None:
        result["clear"] = after.lo > hi if target.higher_is_better else after.hi < lo
    # Against its own before, where both versions played the same seeds or tasks, the paired
    # difference's interval says whether the change is beyond noise: the two intervals apart
    # ask for more than that (and where seeds repeat tasks they are intervals over tasks).
    paired = next((f for f in figures if target.other == "before"
                   and f.name.startswith(f"{target.figure}{PAIRED_BY}")), None)
    if paired is not None and paired.after.lo is not None and paired.after.hi is not None:
        result["clear"] = (paired.after.lo > 0 if target.higher_is_better
                           else paired.after.hi < 0)
        result["clear_by"] = paired.name
    return result


def training_curve(metrics_path: Path) -> dict:
    """``{"key": k, "points": [[update, minutes, value], ...]}`` for the first CURVE_KEYS
    metric the run logged, for the first agent that logged it."""
    if not metrics_path.is_file():
        return {}
    rows, _bad = read_metrics(metrics_path)
    for key in CURVE_KEYS:
        for agent in sorted({a for row in rows for a in row["agents"]}):
            points = [[row["update"], round(row["elapsed_s"] / 60, 2), row["agents"][agent][key]]
                      for row in rows if key in row["agents"].get(agent, {})]
            if points:
                return {"key": key, "agent": agent, "points": points}
    return {}


def run_plan(experiments: list[Experiment], out: Path, rerun: bool,
             log: Callable[[str], None] = print, chosen: set[str] | None = None,
             reread: bool = False, probe_machine: bool = True) -> list[dict]:
    """Every experiment's outcome, in plan order. ``chosen`` (default: all) run now unless
    done before (``rerun``: run anyway); the others appear only if done before, so a table
    made after ``--only X`` still holds every finished experiment. ``reread``: done
    experiments are read again from their runs' files (after a change to how figures are
    read), nothing is run for them. A failed one is retried on the next call."""
    out.mkdir(parents=True, exist_ok=True)
    outcomes = []
    for exp in experiments:
        picked = chosen is None or exp.name in chosen
        kept = None if rerun and picked else kept_outcome(exp, out)
        if kept is not None:
            if reread:
                log(f"{exp.name}: done before; reading its figures again")
                read_outcome(exp, out, kept)
                outcome_path(out, exp).write_text(json.dumps(kept, indent=2) + "\n")
            elif picked:
                log(f"{exp.name}: done before ({outcome_path(out, exp)}); --rerun to run it "
                    "again")
            outcomes.append(kept)
        elif picked and reread:
            # --reread never runs anything: an entry whose commands changed (its budget, its
            # --games) would otherwise start a fresh run, which clears the run's folder.
            log(f"{exp.name}: not done with these commands (never run, failed, or its plan "
                "entry changed since); --reread runs nothing, run it without --reread")
        elif picked:
            outcomes.append(run_experiment(exp, out, log, reuse=not rerun,
                                           probe_machine=probe_machine))
    return outcomes
