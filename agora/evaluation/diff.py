"""Two evaluations of the same held-out seeds, paired by seed: which recipe's agent is better.

Why: ``agora eval`` pairs a run's latest version with its own v0, which answers "did PPO help
this run". Two recipes (two warm starts, a reward change) are two runs, each evaluated on the
same held-out seeds (``agora/evaluation/seeds.py``: episode i plays seed 1e9 + i, and meets the
same partner strategy), so their outcomes pair seed by seed as a run's two versions do:
``agora eval-diff A B`` reads both eval.json files and writes A minus B per metric, with the
same statistics (``context_envs.paired_outcomes``) and table (``report``) as eval.md.

Either side may be a run's ``evaluated`` policy (its latest version, the default) or its
``baseline`` (its v0). Only the episode evaluations (negotiation, story, code debugging,
support, research) keep per-seed outcomes; games and discussions are refused with a message.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from agora.evaluation.context_envs import paired_outcomes
from agora.evaluation.definitions import BINARY_METRICS
from agora.evaluation.report import paired_counts, points, table

Policy = Literal["evaluated", "baseline"]


class EvalDiffError(ValueError):
    """Two evaluations that cannot be paired; the message names the file and what differs."""


def load_side(path: Path, policy: Policy) -> tuple[list[dict], dict[str, str], Path]:
    """``policy``'s per-seed outcome rows of the episode evaluation at ``path`` (an eval.json,
    or a folder holding one: an eval folder, a run folder with eval/), its agent labels, and
    the file read."""
    candidates = [path, path / "eval.json", path / "eval" / "eval.json"]
    found = next((p for p in candidates if p.is_file()), None)
    if found is None:
        raise EvalDiffError(f"{path}: no eval.json there (give an eval.json, its folder, or a "
                            "run folder that `agora eval` wrote eval/ into)")
    try:
        report = json.loads(found.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise EvalDiffError(f"{found}: not a readable eval.json ({err})") from None
    section = (report.get("sections") or {}).get("episodes") if isinstance(report, dict) else None
    if not isinstance(section, dict) or "outcomes" not in section:
        raise EvalDiffError(f"{found}: no per-seed episode outcomes (only episode evaluations, "
                            "negotiation, story, code_debug, support, research, keep them)")
    rows = section["outcomes"].get(policy)
    if not rows:
        raise EvalDiffError(f"{found}: no '{policy}' outcomes")
    labels = dict(section["policies"][policy]["labels"])
    return rows, labels, found


def _check_same_episodes(a: list[dict], b: list[dict], a_file: Path, b_file: Path) -> None:
    """Row i of both played the same seed and partner, or pairing them means nothing."""
    if len(a) != len(b):
        raise EvalDiffError(f"{a_file} has {len(a)} episodes and {b_file} {len(b)}: evaluate "
                            "both with the same --games and --seed")
    for index, (row_a, row_b) in enumerate(zip(a, b, strict=True)):
        for key in ("seed", "partner", "task"):
            if row_a.get(key) != row_b.get(key):
                raise EvalDiffError(f"episode {index} differs in its {key}: "
                                    f"{row_a.get(key)!r} in {a_file}, {row_b.get(key)!r} in "
                                    f"{b_file} (the same config's partners and --seed pair)")


def eval_diff(a_path: Path, b_path: Path, agent: str | None = None,
              a_policy: Policy = "evaluated", b_policy: Policy = "evaluated") -> dict:
    """A minus B per metric of ``agent`` (default: the one agent both evaluated), paired by
    seed: ``{"a": label, "b": label, "agent", "episodes", "paired": {metric: difference}}``."""
    a_rows, a_labels, a_file = load_side(a_path, a_policy)
    b_rows, b_labels, b_file = load_side(b_path, b_policy)
    _check_same_episodes(a_rows, b_rows, a_file, b_file)
    shared = sorted(set(a_labels) & set(b_labels))
    if agent is None:
        if len(shared) != 1:
            raise EvalDiffError(f"--agent: name one of {shared} (agents both evaluations "
                                "scored)" if shared else f"no agent in both: {sorted(a_labels)}"
                                f" in {a_file}, {sorted(b_labels)} in {b_file}")
        agent = shared[0]
    elif agent not in shared:
        raise EvalDiffError(f"--agent: '{agent}' is not scored in both ({shared})")
    return {"a": f"{a_file} {a_policy} ({a_labels[agent]})",
            "b": f"{b_file} {b_policy} ({b_labels[agent]})", "agent": agent,
            "episodes": len(a_rows), "paired": paired_outcomes(a_rows, b_rows, agent)}


def eval_diff_markdown(diff: dict) -> str:
    """The paired table of eval.md, for A minus B."""
    out = [f"## {diff['agent']}: A minus B over the same {diff['episodes']} held-out episodes",
           "", f"- A: {diff['a']}", f"- B: {diff['b']}", ""]
    rows = [[metric, points(d), *paired_counts(d, metric in BINARY_METRICS)]
            for metric, d in diff["paired"].items()]
    out += table(["metric", "A - B [95%] (points)", "A better", "B better", "paired over",
                  "mean over the unit (A / B)"], rows)
    return "\n".join(out)
