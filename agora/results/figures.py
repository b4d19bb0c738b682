"""An experiment's figures, read from the files its commands wrote.

Every figure is a before/after pair of estimates with their 95% intervals, whatever command
made it: ``demo``'s eval.json (win/draw/loss counts per opponent, or a cooperative game's mean
score), ``compare``'s compare.json (held-out accuracy per arm), ``eval``'s eval.json (each
agent's env metrics and the judge's preference) and ``reflect all``'s report (the paper's
reflection metrics). Nothing is recomputed from transcripts: the numbers are the commands' own.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from agora.evaluation.stats import rate, wilson


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float | None = None  # 95% interval; None where the command gives none
    hi: float | None = None
    n: int | None = None

    @classmethod
    def of(cls, raw: object) -> Estimate | None:
        """From eval.json's shapes: ``{rate, n, ci95}``, ``{mean, n, ci95}`` or a bare number."""
        if raw is None:
            return None
        if isinstance(raw, dict):
            value = raw.get("rate", raw.get("mean"))
            if value is None:
                return None
            ci = raw.get("ci95")
            lo, hi = (ci if ci else (None, None))
            return cls(float(value), lo, hi, raw.get("n"))
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return cls(float(raw))
        return None

    @classmethod
    def proportion(cls, successes: int, n: int) -> Estimate:
        lo, hi = wilson(successes, n)
        return cls(successes / n if n else 0.0, lo, hi, n)

    def text(self, share: bool) -> str:
        fmt = (lambda v: f"{v:.1%}") if share else (lambda v: f"{v:.2f}")
        if self.lo is None or self.hi is None:
            return fmt(self.value)
        return f"{fmt(self.value)} [{fmt(self.lo)}, {fmt(self.hi)}]"


@dataclass(frozen=True)
class Figure:
    name: str
    before: Estimate | None
    after: Estimate
    share: bool = True  # a 0..1 rate, printed as a percentage

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "share": self.share,
                "before": asdict(self.before) if self.before else None,
                "after": asdict(self.after)}

    @classmethod
    def from_dict(cls, data: dict) -> Figure:
        before = Estimate(**data["before"]) if data.get("before") else None
        return cls(data["name"], before, Estimate(**data["after"]), bool(data["share"]))


def _read(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"the command wrote no {path}")
    return json.loads(path.read_text())


def demo_figures(eval_json: Path) -> list[Figure]:
    """``agora demo``'s rows: per opponent, wins/draws/losses and legal moves, or the score."""
    rows = _read(eval_json)
    before, after = rows["before (v0)"], rows["after"]
    figures = []
    for opponent, row in after.items():
        old = before.get(opponent)
        if "score" in row:
            figures.append(Figure(f"score with {opponent}", _score(old), _score(row),
                                  share=False))
            continue
        for key, label in (("win", "wins"), ("draw", "draws"), ("loss", "losses")):
            figures.append(Figure(f"{label} vs {opponent}", _counted(old, key),
                                  _counted(row, key)))
        figures.append(Figure(f"legal moves vs {opponent}",
                              Estimate(old["legal_rate"]) if old else None,
                              Estimate(row["legal_rate"])))
    return figures


def _counted(row: dict | None, key: str) -> Estimate | None:
    if row is None:
        return None
    games = int(row["games"])
    return Estimate.proportion(round(row[key] * games), games)


def _score(row: dict | None) -> Estimate | None:
    if row is None:
        return None
    ci = row.get("score_ci95") or (None, None)
    return Estimate(float(row["score"]), ci[0], ci[1], int(row["games"]))


def compare_figures(compare_json: Path) -> list[Figure]:
    """``agora compare``'s arms: for a discussion, held-out accuracy at turn 1 and at the last
    turn, base model (before) and trained (after; the single-agent arm answers once, so its two
    are one); for other envs, each of the learner's metrics, v0 (before) and latest (after)."""
    arms = _read(compare_json)
    figures = []
    for arm, result in arms.items():
        if result.get("evaluation") == "episodes":
            figures += metric_figures(result["before"], result["after"], f"{arm}: ")
            figures.append(Figure(f"{arm}: updates", None, Estimate(float(result["updates"])),
                                  share=False))
            continue
        rounds = [("last turn", "last")]
        if len(result["after"].get("accuracy_by_round", [])) > 1:
            rounds.insert(0, ("turn 1", "turn1"))
        for label, key in rounds:
            figures.append(Figure(f"{arm}: {label}", _accuracy(result["before"], key),
                                  _accuracy(result["after"], key)))
        figures.append(Figure(f"{arm}: updates", None, Estimate(float(result["updates"])),
                              share=False))
    return figures


def _accuracy(result: dict, key: str) -> Estimate:
    ci = result.get(f"{key}_ci95") or (None, None)
    return Estimate(float(result[key]), ci[0], ci[1], result.get("answers"))


def metric_figures(before: dict, after: dict, prefix: str = "") -> list[Figure]:
    """One figure per metric of ``agora eval``'s per-agent metrics (before = v0, after =
    latest); ``success`` is left out, it repeats the env's success metric."""
    figures = []
    for key, raw in after.items():
        estimate = Estimate.of(raw)
        if estimate is None or key == "success":
            continue
        share = key != "reward" and (estimate.hi is None or estimate.hi <= 1.0)
        figures.append(Figure(f"{prefix}{key}", Estimate.of(before.get(key)), estimate, share))
    return figures


def over_tasks(metrics: dict, paired: dict, side: str) -> dict:
    """``metrics`` with each 0/1 metric that was paired by task (its seeds repeat tasks) read
    as its rate over tasks, whose interval counts tasks: the Wilson interval over seeds takes
    a task's repeats for independent outcomes and would call noise a gain."""
    return {**metrics, **{key: diff[side] for key, diff in paired.items()
                          if diff.get("unit") == "task" and key in metrics}}


def train_eval_figures(eval_json: Path) -> list[Figure]:
    """``agora eval``'s episodes section: each agent's metrics, latest vs v0, and the judge's
    preference for the latest (after; 0.5 is no preference); for a discussion, its held-out
    accuracy instead."""
    sections = _read(eval_json)["sections"]
    if "discussion" in sections:
        return discussion_figures(sections["discussion"])
    section = sections["episodes"]
    evaluated = section["policies"]["evaluated"]["agents"]
    baseline = section["policies"]["baseline"]["agents"]
    several = len(evaluated) > 1
    figures = []
    for agent, metrics in evaluated.items():
        prefix = f"{agent}: " if several else ""
        paired = section.get("paired", {}).get(agent, {})
        figures += metric_figures(over_tasks(baseline.get(agent, {}), paired, "baseline"),
                                  over_tasks(metrics, paired, "evaluated"), prefix)
        figures += [paired_figure(f"{prefix}{key}{PAIRED_BY}{diff.get('unit', 'seed')}", diff)
                    for key, diff in paired.items()]
    if "preference" in section:
        preference = section["preference"]
        # Over tasks where the seeds repeat them (agora.evaluation.context_envs).
        figures.append(Figure("judge preference (latest vs v0)", Estimate(0.5), Estimate.of(
            preference.get("preference_by_task", preference["preference"]))))
        figures += judge_quality_figures(preference)
    return figures


def discussion_figures(section: dict) -> list[Figure]:
    """A discussion's held-out accuracy (pass@1 over every seat's answers) after turn 1 and
    after the last turn, v0 (before) and latest (after); then the same gains paired by task."""
    before, after = section["policies"]["baseline"], section["policies"]["evaluated"]
    turns = (("turn 1", "turn1"), ("last turn", "last"))
    figures = [Figure(f"{label} accuracy", Estimate.of(before[key].get("pass@1")),
                      Estimate.of(after[key].get("pass@1")))
               for label, key in turns]
    paired = section.get("paired", {})
    return figures + [paired_figure(f"{label} accuracy{PAIRED_BY}task",
                                    paired[key])
                      for label, key in turns if key in paired]


# A paired figure's name is the metric's, then this, then its unit (seed or task):
# results.runner.check finds a target's paired difference by it.
PAIRED_BY = ": latest - v0, paired by "


def paired_figure(name: str, diff: dict) -> Figure:
    """A paired difference (agora.evaluation.stats.paired_difference / paired_mean_difference)
    as a figure against a zero "before": its change reads ``up`` only when the difference's
    own interval lies above zero, which happens long before the two rates' intervals part
    when most seeds or tasks go the same way for both versions."""
    ci = diff.get("ci95")
    lo, hi = ci if ci else (None, None)
    return Figure(name, Estimate(0.0, 0.0, 0.0),
                  Estimate(float(diff["difference"]), lo, hi, diff.get("n")))


def judge_quality_figures(preference: dict) -> list[Figure]:
    """How much of a judge model's preference is noise: the share of its comparisons whose two
    orders disagreed (position bias) or said nothing parseable (malformed). Shown only when
    there were any: the rubric backend has neither by construction."""
    n = int(preference.get("comparisons", 0))
    counts = {"judge verdicts position-biased": int(preference.get("position_bias", 0)),
              "judge verdicts malformed": int(preference.get("malformed", 0))}
    if not n or not any(counts.values()):
        return []
    return [Figure(name, None, Estimate.of(rate(count, n))) for name, count in counts.items()]


def reflect_figures(eval_dir: Path) -> list[Figure]:
    """``agora reflect all``'s evaluations (``eval/<stage>.json``): the base model (before)
    and the DPO stage (after)."""
    before, after = _read(eval_dir / "base.json"), _read(eval_dir / "dpo.json")
    figures = []
    for key in ("pass1@turn1", f"maj1@turn{after['turns']}", f"pass1@turn{after['turns']}"):
        figures.append(Figure(key, _reflect(before, key), _reflect(after, key)))
    for key, label in (("wrong_to_right", "wrong->right"), ("right_to_wrong", "right->wrong")):
        figures.append(Figure(label, Estimate(float(before[key])), Estimate(float(after[key])),
                              share=False))
    if "critic" in after:  # evaluations written before critic_effects have none
        earlier = _critic_estimates(before.get("critic") or {})
        for name, later in _critic_estimates(after["critic"]).items():
            if later is not None:
                figures.append(Figure(name, earlier[name], later))
    return figures


def _critic_estimates(critic: dict) -> dict[str, Estimate | None]:
    """What the critic said and what the actor did with it (agora/reflection/critic_effects.py);
    None where the stage gave no such critique."""
    def share(count: int, of: int) -> Estimate | None:
        return Estimate.proportion(count, of) if of else None

    changed = critic.get("actor_changed_after", {})
    out = {"critic verdicts right": share(critic.get("verdicts_right", 0),
                                          critic.get("verdicts", 0))}
    for verdict in ("correct", "wrong"):
        given = changed.get(verdict, {})
        out[f"actor changed after '{verdict}'"] = share(given.get("changed", 0),
                                                        given.get("critiques", 0))
    return out


def _reflect(stage: dict, key: str) -> Estimate:
    lo, hi = stage["ci95"][key]
    return Estimate(float(stage[key]), lo, hi, int(stage["problems"]))
