"""results.md, results.json and curves.png from the experiments' outcomes.

Presentation only: every number comes from an outcome (``runner.run_experiment``). The
markdown opens with one table of the targets, then one section per experiment: the commands
that reproduce it, every figure before and after, and what its learner saw.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import textwrap
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

from agora.evaluation.learner import SIGNALS  # noqa: E402
from agora.results.figures import Estimate, Figure  # noqa: E402
from agora.results.machine_speed import describe  # noqa: E402

CURVE_SCALE = {"hanabi_score": 1 / 25}  # drawn as a share of the maximum, like the rates


def change(figure: Figure) -> str:
    """``up`` / ``down`` when the after interval lies wholly above / below the before one,
    ``within noise`` when they overlap, ``-`` without two intervals."""
    b, a = figure.before, figure.after
    if b is None or None in (a.lo, a.hi, b.lo, b.hi):
        return "-"
    if a.lo > b.hi:
        return "up"
    if a.hi < b.lo:
        return "down"
    return "within noise"


def _cell(estimate: Estimate | None, share: bool) -> str:
    return estimate.text(share) if estimate is not None else "-"


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _verdict(target: dict) -> str:
    if target["met"] is None:
        return f"no figure ({target.get('why', '')})"
    if not target["met"]:
        return "**no**"
    return "yes" if target.get("clear") is not False else "yes (within noise)"


def machine() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip() or "?"
    except OSError:
        rev = "?"
    return (f"{os.cpu_count()} cores, {platform.machine()}, Python "
            f"{platform.python_version()}, git {rev}")


def markdown(outcomes: list[dict], plan_path: Path, made_on: str) -> str:
    """``made_on``: the machine line (``machine()``), apart so the page is a pure function."""
    lines = [
        "# Learning results", "",
        f"`agora results {plan_path}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC ({made_on}).",
        "Intervals are 95% (Wilson for rates, normal for means). *change*: **up** / **down** "
        "when the after interval lies wholly above / below the before one. A target against "
        "`before` is met beyond noise when the paired difference's interval (the same seeds "
        "or tasks for both versions) excludes zero, where the evaluation paired them.", "",
        "## Targets", "",
        _row(["recipe", "figure", "before", "after", "target", "met"]),
        "|---|---|---|---|---|---|",
    ]
    for outcome in outcomes:
        figures = {f["name"]: Figure.from_dict(f) for f in outcome.get("figures", [])}
        if outcome["status"] != "done":
            lines.append(_row([outcome["recipe"], "-", "-", "-", "-",
                               f"**failed**: {outcome.get('error', '')}"]))
            continue
        for target in outcome["targets"]:
            figure = figures.get(target["figure"])
            lines.append(_row([
                outcome["recipe"], target["figure"],
                _cell(figure.before, figure.share) if figure else "-",
                _cell(figure.after, figure.share) if figure else "-",
                target["target"], _verdict(target)]))
    for outcome in outcomes:
        lines += ["", f"## {outcome['recipe']} (`{outcome['name']}`)", ""]
        lines += ["```", *outcome["commands"], "```", ""]
        lines.append(f"{outcome.get('wall_s', 0) / 60:.1f} min; log: `{outcome['log']}`.")
        lines += machine_lines(outcome.get("machine"))
        if outcome["status"] != "done":
            lines += ["", f"**Failed**: {outcome.get('error', '')}. Last lines of the log:", "",
                      "```", outcome.get("log_tail", ""), "```"]
            continue
        lines += ["", _row(["figure", "before", "after", "change"]), "|---|---|---|---|"]
        for data in outcome["figures"]:
            figure = Figure.from_dict(data)
            lines.append(_row([figure.name, _cell(figure.before, figure.share),
                               _cell(figure.after, figure.share), change(figure)]))
        if outcome.get("switching"):
            lines += switching_lines(outcome["switching"])
        for label, agents in outcome.get("learner", {}).items():
            for agent, signals in agents.items():
                if not signals:
                    continue
                lines += ["", f"What the learner `{agent}` saw ({label}), mean over the first "
                              "and the last quarter of its updates:", "",
                          _row(["signal", "first quarter", "last quarter"]), "|---|---|---|"]
                lines += [_row([SIGNALS[key], f"{v['first']:.4g}", f"{v['last']:.4g}"])
                          for key, v in signals.items()]
    return "\n".join(lines) + "\n"


def plot_curves(outcomes: list[dict], path: Path) -> Path | None:
    """One panel per experiment that trained: its training curve over updates; and one per
    run with a switching partner: the learner's reward per update, coloured by strategy."""
    panels = [(o, label, curve) for o in outcomes for label, curve in o.get("curves", {}).items()
              if curve]
    panels += [(o, "switching", o["switching"]) for o in outcomes if o.get("switching")]
    if not panels:
        return None
    columns = min(3, len(panels))
    rows = (len(panels) + columns - 1) // columns
    fig, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), dpi=100,
                             squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (outcome, label, curve) in zip(axes.flat, panels, strict=False):
        if label == "switching":
            _plot_switching(ax, outcome, curve)
            continue
        scale = CURVE_SCALE.get(curve["key"], 1.0)
        updates = [p[0] for p in curve["points"]]
        values = [p[2] * scale for p in curve["points"]]
        ax.plot(updates, values, marker="." if len(values) < 30 else None)
        ax.set_title(_title(outcome["recipe"], label), fontsize=9)
        ax.set_xlabel("update")
        ax.set_ylabel(curve["key"] + (" / 25" if scale != 1.0 else ""))
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _title(recipe: str, label: str) -> str:
    """A panel's title, wrapped to the panel's width (recipe names run long)."""
    return "\n".join([*textwrap.wrap(recipe, 60), label])


def _plot_switching(ax, outcome: dict, report: dict) -> None:
    strategies = sorted({strategy for _, strategy, _ in report["curve"]})
    colours = dict(zip(strategies, plt.rcParams["axes.prop_cycle"].by_key()["color"],
                       strict=False))
    for segment in report["segments"]:
        points = [(c, r) for c, s, r in report["curve"]
                  if segment["start"] <= c <= segment["end"]]
        ax.plot([c for c, _ in points], [r for _, r in points], marker=".",
                color=colours[segment["strategy"]])
        ax.axvline(segment["start"] - 0.5, color="grey", lw=0.5, ls="--")
    for strategy, colour in colours.items():
        ax.plot([], [], color=colour, label=strategy)
    ax.legend(fontsize=7)
    ax.set_title(_title(outcome["recipe"], f"{report['learner']}'s reward by partner strategy"),
                 fontsize=9)
    ax.set_xlabel("update (partner's clock)")
    ax.set_ylabel("mean episode reward")
    ax.grid(alpha=0.3)


def plot_switching(outcome: dict, path: Path) -> Path:
    """The switching curve of one run alone: the figure a README or a paper shows."""
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    _plot_switching(ax, outcome, outcome["switching"])
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def machine_lines(speed: dict | None) -> list[str]:
    """The probe taken before the experiment (agora/results/machine_speed.py): a reader
    comparing two runs' minutes-bound figures compares these first."""
    if not speed:
        return []
    noisy = " (**not quiet**)" if speed.get("quiet") is False else ""
    return ["", f"Machine before it: {describe(speed)}{noisy}."]


def switching_lines(report: dict) -> list[str]:
    """results.md's table of the returns to a strategy met before."""
    summary = report["summary"]
    lines = ["", f"Partner switches: {summary['switches']}; returns to a strategy met before: "
                 f"{summary['returns']}, recovered within the segment: {summary['recovered']}.",
             *_partner_effect_lines(summary),
             "", _row(["update", "strategy", "reward before (its last segment)", "first update",
                       "forgetting", "updates to recover"]), "|---|---|---|---|---|---|"]
    for r in report["returns"]:
        after = "-" if r["recovered_after"] is None else str(r["recovered_after"])
        lines.append(_row([str(r["start"]), r["strategy"], f"{r['before']:.3f}",
                           f"{r['first']:.3f}", f"{r['forgetting']:+.3f}", after]))
    return lines


def _partner_effect_lines(summary: dict) -> list[str]:
    by_strategy = summary.get("reward_by_strategy")
    if not by_strategy:
        return []
    means = ", ".join(f"{k} {v:.3f}" for k, v in by_strategy.items())
    return ["", f"The learner's mean reward by partner strategy: {means} (partner effect "
                f"{summary['partner_effect']:.3f}). Where the partner makes no difference to "
                "the reward, there is nothing to forget, and recovery says nothing."]


def write_results(outcomes: list[dict], out: Path, plan_path: Path) -> dict[str, Path]:
    """results.md, results.json, (when anything trained) curves.png and, for each run with a
    switching partner, switching-<name>.png in ``out``."""
    written = {"markdown": out / "results.md", "json": out / "results.json"}
    written["markdown"].write_text(markdown(outcomes, plan_path, machine()))
    written["json"].write_text(json.dumps(outcomes, indent=2) + "\n")
    png = plot_curves(outcomes, out / "curves.png")
    if png is not None:
        written["curves"] = png
    for outcome in outcomes:
        if outcome.get("switching"):
            name = f"switching-{outcome['name']}"
            written[name] = plot_switching(outcome, out / f"{name}.png")
    return written
