"""``training_curves.png``: the trainer's ``metrics.jsonl``, one line per agent per panel.

Panels (x = update index): mean turn reward; the env's success-like rates (legal-move rate,
win rate vs random, discussion accuracy, Hanabi score / 25, code pass rate, deal rate...);
KL to the reference; the policy and value losses. A metric the run never logged is left out;
a panel with nothing to show says so instead of staying blank.
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on servers and CI
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

FIGSIZE_IN = (12.0, 8.0)
DPI = 100  # -> 1200 x 800 pixels
PANELS: list[tuple[str, list[str]]] = [
    ("mean turn reward", ["reward_mean"]),
    ("rates", ["legal_rate", "win_rate", "accuracy_first", "accuracy_last", "deal_rate",
               "pass_rate", "solved", "judge_score", "preference", "hanabi_score"]),
    ("KL(behaviour || reference) per token", ["kl"]),
    ("losses", ["pg_loss", "vf_loss"]),
]
SCALE = {"hanabi_score": 1 / 25}  # shown on the rates panel as a share of the maximum


def read_metrics(path: Path) -> tuple[list[dict], int]:
    """The rows of a metrics.jsonl, and how many lines were unreadable (a trainer killed
    mid-write leaves a cut last line; that must not lose the whole curve)."""
    rows, bad = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            bad += 1
            continue
        if isinstance(row, dict) and isinstance(row.get("agents"), dict) and "update" in row:
            rows.append(row)
        else:
            bad += 1
    return rows, bad


def plot_training_curves(metrics_path: Path, out: Path, title: str) -> dict[str, object]:
    """Write the PNG; returns what was plotted (series per panel) for eval.json."""
    rows, bad = read_metrics(metrics_path)
    agents = sorted({a for row in rows for a in row["agents"]})
    fig, axes = plt.subplots(2, 2, figsize=FIGSIZE_IN, dpi=DPI)
    plotted: dict[str, list[str]] = {}
    for ax, (panel, keys) in zip(axes.flat, PANELS, strict=True):
        series = []
        for agent in agents:
            for key in keys:
                points = [(row["update"], row["agents"][agent][key] * SCALE.get(key, 1.0))
                          for row in rows if key in row["agents"].get(agent, {})]
                if not points:
                    continue
                xs, ys = zip(*points, strict=True)
                name = key + (" / 25" if key in SCALE else "")
                ax.plot(xs, ys, marker="." if len(xs) < 30 else None,
                        label=f"{agent}: {name}" if len(agents) > 1 else name)
                series.append(f"{agent}:{key}")
        ax.set_title(panel)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "not logged by this run", ha="center", va="center",
                    transform=ax.transAxes, color="grey")
        plotted[panel] = series
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return {"path": str(out), "updates": len(rows), "unreadable_lines": bad, "agents": agents,
            "panels": plotted, "size_px": [int(FIGSIZE_IN[0] * DPI), int(FIGSIZE_IN[1] * DPI)]}
