"""eval.json and eval.md: the same numbers, as data and as markdown tables.

Only presentation lives here; every number was computed by the section modules. The markdown
opens with the definitions of the metrics it shows (``definitions``).
"""

from __future__ import annotations

import json
from pathlib import Path

from agora.evaluation.definitions import BINARY_METRICS, DEFINITIONS, INTERVALS


def pct(value: object) -> str:
    """A rate dict ``{rate, n, ci95}`` (or a bare share) as ``61.5% [55.0%, 67.6%]``."""
    if value is None:
        return "-"
    if isinstance(value, dict):
        lo, hi = value["ci95"]
        return f"{value['rate']:.1%} [{lo:.1%}, {hi:.1%}]"
    return f"{float(value):.1%}"


def mean_pct(value: dict) -> str:
    """A mean of 0/1 outcomes ``{mean, n, ci95}`` (a rate over tasks) written as a rate."""
    if value["ci95"] is None:
        return f"{value['mean']:.1%}"
    return pct({"rate": value["mean"], "ci95": value["ci95"]})


def points(value: dict) -> str:
    """A paired difference ``{difference, ci95}`` of rates, in percentage points:
    ``+4.0 [+0.9, +7.1]``."""
    text = f"{100 * value['difference']:+.1f}"
    if value.get("ci95") is not None:
        lo, hi = value["ci95"]
        text += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
    return text


def paired_counts(diff: dict, rates: bool = True) -> list[str]:
    """A paired difference's units where each version did better, what it was paired over,
    and (paired by task, or a mean paired by seed) each version's mean over those units:
    as rates (``rates``: a 0/1 metric) or as means like the episodes table's."""

    def means() -> str:
        show = mean_pct if rates else mean
        return " / ".join(show(diff[side]) for side in ("evaluated", "baseline"))

    if diff.get("unit") == "task":
        return [f"{diff['better']} tasks", f"{diff['worse']} tasks",
                f"{diff['n']} tasks ({diff['seeds']} seeds)", means()]
    if "better" in diff:  # a 0..1 mean (utility, a judge score) paired by seed
        return [f"{diff['better']} seeds", f"{diff['worse']} seeds", f"{diff['n']} seeds",
                means()]
    return [f"{diff['evaluated_only']} seeds", f"{diff['baseline_only']} seeds",
            f"{diff['n']} seeds", "-"]


def mean(value: object, digits: int = 2) -> str:
    """A mean dict ``{mean, n, ci95}`` as ``12.30 [11.10, 13.50]``."""
    if value is None:
        return "-"
    if isinstance(value, dict) and "rate" in value:
        return pct(value)
    if isinstance(value, dict):
        text = f"{value['mean']:.{digits}f}"
        if value["ci95"] is not None:
            lo, hi = value["ci95"]
            text += f" [{lo:.{digits}f}, {hi:.{digits}f}]"
        return text
    return f"{float(value):.{digits}f}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines + [""]


def ratings_md(rows: list[dict]) -> list[str]:
    return table(["rank", "player", "mu - 3 sigma", "mu", "sigma", "rated games", "score"], [
        [str(i + 1), r["player"], f"{r['conservative']:.2f}", f"{r['mu']:.2f}",
         f"{r['sigma']:.2f}", str(r["games"]), pct(r["score"])]
        for i, r in enumerate(rows)])


def round_robin_md(section: dict, evaluated: str) -> list[str]:
    out = [f"## Games: {evaluated} against every player", ""]
    rows = [r for r in section["head_to_head"] if r["player"] == evaluated]
    out += table(["opponent", "games", "win", "draw", "loss", "forfeits", "legal moves"], [
        [r["opponent"], str(r["games"]), pct(r["win"]), pct(r["draw"]), pct(r["loss"]),
         str(r["forfeits"]), pct(r["legal_rate"])] for r in rows])
    players = section["players"]
    out += ["## Round robin: score of the row player against the column player", ""]
    out += table(["", *players], [
        [a, *("-" if a == b else pct(section["score_matrix"][a][b]) for b in players)]
        for a in players])
    out += ["## Ratings (TrueSkill, round robin)", ""] + ratings_md(section["ratings"])
    return out


def hanabi_md(section: dict) -> list[str]:
    out = ["## Hanabi: mean team score by partner", ""]
    out += table(["player", "partner", "games", "score (0-25)", "forfeit", "legal moves"], [
        [r["player"], r["partner"], str(r["games"]), mean(r["score"]), pct(r["forfeit"]),
         pct(r["legal_rate"])] for r in section["scores"]])
    out += ["## Ratings (TrueSkill, duplicate deals)", ""] + ratings_md(section["ratings"])
    return out


def discussion_md(section: dict) -> list[str]:
    k = section["k"]
    out = [f"## Discussion: {section['tasks']} held-out tasks, k = {k} samples each", ""]
    rows = []
    for policy, result in section["policies"].items():
        for turn, label in (("turn1", "turn 1"), ("last", "last turn")):
            m = result[turn]
            rows.append([f"{policy} ({result['label']})", label, pct(m["pass@1"]),
                         pct(m["pass@k"]), pct(m["maj@k"])])
    out += table(["policy", "round", "pass@1", f"pass@{k}", f"maj@{k}"], rows)
    if section.get("paired"):
        out += ["### Evaluated minus baseline, paired by task (percentage points)", ""]
        out += table(["round", "difference [95%]", "tasks better / worse / level"], [
            [label, points(d),
             f"{d['better']} / {d['worse']} / {d['n'] - d['better'] - d['worse']}"]
            for turn, label in (("turn1", "turn 1"), ("last", "last turn"))
            if (d := section["paired"].get(turn))])
    return out


def context_md(section: dict) -> list[str]:
    out = [f"## Episodes: {section['episodes']} seeds per policy", ""]
    keys: list[str] = []
    for result in section["policies"].values():
        for metrics in result["agents"].values():
            keys += [k for k in metrics if k not in keys]
    rows = []
    for policy, result in section["policies"].items():
        for agent, metrics in result["agents"].items():
            rows.append([f"{policy} ({result['labels'][agent]})", agent,
                         *(mean(metrics.get(k)) if k != "legal_rate" else pct(metrics.get(k))
                           for k in keys)])
    out += table(["policy", "agent", *keys], rows)
    if any("by_partner" in result for result in section["policies"].values()):
        out += ["### By partner strategy", ""]
        rows = []
        for policy, result in section["policies"].items():
            for partner, agents in result.get("by_partner", {}).items():
                for agent, metrics in agents.items():
                    rows.append([partner, f"{policy} ({result['labels'][agent]})", agent,
                                 *(mean(metrics.get(k)) if k != "legal_rate"
                                   else pct(metrics.get(k)) for k in keys)])
        out += table(["partner", "policy", "agent", *keys], sorted(rows, key=lambda r: r[0]))
    paired_rows = [[agent, metric, points(d), *paired_counts(d, metric in BINARY_METRICS)]
                   for agent, metrics in section.get("paired", {}).items()
                   for metric, d in metrics.items()]
    if paired_rows:
        out += ["### Evaluated minus baseline, paired (points: a 0..1 metric x 100)", ""]
        out += table(["agent", "metric", "difference [95%]", "evaluated better",
                      "baseline better", "paired over",
                      "mean over the unit (evaluated / baseline)"],
                     paired_rows)
        tasks = {d["n"] for metrics in section["paired"].values() for d in metrics.values()
                 if d.get("unit") == "task"}
        if tasks:
            out += [f"The {section['episodes']} seeds pose {max(tasks)} distinct tasks (a "
                    "problem or question and the partner's strategy), each several times: the "
                    "intervals of the tables above count seeds and are too narrow; the rates "
                    "over tasks here are the ones to read.", ""]
    pref = section.get("preference")
    if pref:
        out += ["## Judge preference: evaluated vs baseline", ""]
        out += table(["a (evaluated)", "b (baseline)", "comparisons", "preference for a",
                      "a wins / ties / b wins", "position-biased", "malformed"], [[
                          pref["a"], pref["b"], str(pref["comparisons"]), pct(pref["preference"]),
                          f"{pref['wins']} / {pref['ties']} / {pref['losses']}",
                          str(pref["position_bias"]), str(pref["malformed"])]])
        if by_task := pref.get("preference_by_task"):
            out += [f"The {by_task['seeds']} comparisons pose {by_task['n']} distinct tasks: "
                    f"over tasks the preference for a is {mean_pct(by_task)} (the interval above "
                    "counts comparisons and is too narrow).", ""]
    return out


def training_pool_md(pool: dict) -> list[str]:
    out = ["## Training opponent pool (Elo)", ""]
    if pool.get("error"):
        return [*out, f"`{pool['path']}`: {pool['error']}.", ""]
    rows = [[p["name"] + ("" if p["snapshot"] else " (learner)"), f"{p['rating']:.0f}",
             str(p["games"])] for p in pool["players"]]
    return [*out, *table(["player", "Elo", "games"], rows), ""]


def render_markdown(report: dict) -> str:
    target = report["target"]
    lines = [f"# Evaluation: {target['source']}", "",
             f"{target['kind']} of `{target['config_name']}` (env `{target['env']}`); "
             f"{report['seconds']:.0f} s; {report['created']}.", ""]
    temperature = report["options"].get("temperature")
    if temperature is not None:
        lines += [f"Every evaluated agent sampled at temperature {temperature:g}"
                  + (" (greedy)" if temperature == 0 else "")
                  + ", not its training temperature.", ""]
    lines += ["### Metric definitions", "", INTERVALS, ""]
    lines += [DEFINITIONS[key] + "\n" for key in report["defined"]]
    for name, section in report["sections"].items():
        if name == "games" and section["kind"] == "round_robin":
            lines += round_robin_md(section, section["evaluated"])
        elif name == "games":
            lines += hanabi_md(section)
        elif name == "discussion":
            lines += discussion_md(section)
        elif name == "episodes":
            lines += context_md(section)
    if report.get("training_pool"):
        lines += training_pool_md(report["training_pool"])
    curves = report.get("training_curves")
    lines += ["## Training curves", ""]
    if curves and curves.get("path"):
        lines += [f"![training curves]({Path(curves['path']).name})", "",
                  f"{curves['updates']} updates from metrics.jsonl"
                  + (f" ({curves['unreadable_lines']} unreadable lines skipped)"
                     if curves["unreadable_lines"] else "") + ".", ""]
    else:
        lines += [f"Not drawn: {curves.get('skipped') if curves else 'no metrics.jsonl'}.", ""]
    return "\n".join(lines)


def write_report(report: dict, out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "eval.json", out_dir / "eval.md"
    json_path.write_text(json.dumps(report, indent=2))
    md_path.write_text(render_markdown(report))
    return json_path, md_path
