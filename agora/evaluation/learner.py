"""What the learner saw over a run: its metrics.jsonl boiled down to the first and the last
quarter of the updates, per agent.

Issue 16 asks, for each recipe, why it did or did not learn. The answer is usually in these
numbers: turn rewards that never differ (``reward_std`` 0, ``adv_zero`` near 1), a critic that
explains nothing (``explained_var`` <= 0), a policy that stopped exploring (``entropy`` near 0),
or steps so large that PPO clips most tokens (``clipfrac``) or leaves the reference (``kl``).
"""

from __future__ import annotations

import statistics
from pathlib import Path

from agora.evaluation.curves import read_metrics

# In the order a reader checks them: is there signal, does it reach the policy, does it move.
SIGNALS: dict[str, str] = {
    "reward_mean": "mean turn reward",
    "reward_std": "turn reward spread",
    "reward_nonzero": "turns with a reward",
    "adv_abs": "mean |advantage| per token",
    "adv_zero": "turns with zero advantage (groups)",
    "filtered_turns": "turns left out: groups alike (filter_groups)",
    "explained_var": "critic's explained variance",
    "entropy": "entropy per token",
    "kl": "KL to the reference per token",
    "ratio": "mean ratio",
    "clipfrac": "clipped tokens",
    "grad_norm": "gradient norm",
    "legal_rate": "legal turns",
}


def learner_summary(metrics_path: Path) -> dict[str, dict[str, dict[str, float]]]:
    """``{agent: {signal: {"first": mean, "last": mean}}}`` over the first and last quarter of
    the updates (at least one update each); signals a run never logged are left out."""
    if not metrics_path.is_file():
        return {}
    rows, _bad = read_metrics(metrics_path)
    if not rows:
        return {}
    quarter = max(1, len(rows) // 4)
    head, tail = rows[:quarter], rows[-quarter:]
    agents = sorted({a for row in rows for a in row["agents"]})
    out: dict[str, dict[str, dict[str, float]]] = {}
    for agent in agents:
        signals = {}
        for key in SIGNALS:
            first = [r["agents"][agent][key] for r in head if key in r["agents"].get(agent, {})]
            last = [r["agents"][agent][key] for r in tail if key in r["agents"].get(agent, {})]
            if first and last:
                signals[key] = {"first": statistics.fmean(first),
                                "last": statistics.fmean(last)}
        out[agent] = signals
    return out
