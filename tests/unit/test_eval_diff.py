"""`agora eval-diff`: two runs' episode evaluations on the same held-out seeds, paired by seed
(agora/evaluation/diff.py)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from agora.evaluation.diff import EvalDiffError, eval_diff

runner = CliRunner()
PARTNERS = ["fair", "conceder", "greedy"]


def write_eval(path, utilities: list[float], baseline: list[float], deals: list[int],
               label: str = "alice@v10", seed0: int = 1_000_000_000):
    """An eval.json as `agora eval` writes a negotiation's: per-seed outcome rows."""
    def rows(values, deal_values):
        return [{"seed": seed0 + i, "task": None, "partner": PARTNERS[i % 3],
                 "metrics": {"alice": {"deal_rate": float(d), "utility": u},
                             "bot:context:partner/fair": {"deal_rate": float(d), "utility": 0.5}},
                 "rewards": {"alice": u}}
                for i, (u, d) in enumerate(zip(values, deal_values, strict=True))]

    section = {"episodes": len(utilities), "partners": {"partner": PARTNERS},
               "policies": {"evaluated": {"labels": {"alice": label}},
                            "baseline": {"labels": {"alice": "alice@v0"}}},
               "outcomes": {"evaluated": rows(utilities, deals),
                            "baseline": rows(baseline, [1] * len(baseline))}}
    path.mkdir(parents=True, exist_ok=True)
    (path / "eval.json").write_text(json.dumps({"sections": {"episodes": section}}))
    return path


def test_two_runs_pair_by_seed_and_drop_what_each_pool_is_worth(tmp_path):
    """A's utility is B's + 0.1 on every pool, while pools differ widely in what they are
    worth: paired, the difference is exactly +10 points with no width; the deal rates differ
    where only one side closed."""
    pools = [0.1, 0.9, 0.3, 0.7, 0.2, 0.8]
    a = write_eval(tmp_path / "a" / "eval", [p + 0.1 for p in pools], pools, [1, 1, 1, 1, 1, 1])
    b = write_eval(tmp_path / "b" / "eval", pools, pools, [1, 0, 1, 0, 1, 1], label="alice@v7")
    diff = eval_diff(tmp_path / "a", tmp_path / "b")  # run folders: their eval/eval.json
    assert diff["agent"] == "alice" and diff["episodes"] == 6
    utility = diff["paired"]["utility"]
    assert utility["difference"] == pytest.approx(0.1)
    assert utility["ci95"][0] == pytest.approx(0.1) and utility["ci95"][1] == pytest.approx(0.1)
    assert (utility["better"], utility["worse"]) == (6, 0)
    deals = diff["paired"]["deal_rate"]
    assert deals["difference"] == pytest.approx(2 / 6)
    assert (deals["evaluated_only"], deals["baseline_only"]) == (2, 0)
    # A's own v0 against B's latest: the baseline rows of A.
    against_v0 = eval_diff(a, b, a_policy="baseline")
    assert against_v0["paired"]["utility"]["difference"] == pytest.approx(0.0)
    assert "alice@v0" in against_v0["a"] and "alice@v7" in against_v0["b"]


def test_evaluations_of_other_seeds_or_partners_are_refused_by_name(tmp_path):
    a = write_eval(tmp_path / "a", [0.5] * 3, [0.5] * 3, [1] * 3)
    shifted = write_eval(tmp_path / "b", [0.5] * 3, [0.5] * 3, [1] * 3, seed0=1_000_000_005)
    with pytest.raises(EvalDiffError, match="episode 0 differs in its seed"):
        eval_diff(a, shifted)
    shorter = write_eval(tmp_path / "c", [0.5] * 2, [0.5] * 2, [1] * 2)
    with pytest.raises(EvalDiffError, match="3 episodes and .* 2"):
        eval_diff(a, shorter)
    (tmp_path / "games").mkdir()
    (tmp_path / "games" / "eval.json").write_text(json.dumps({"sections": {"games": {}}}))
    with pytest.raises(EvalDiffError, match="no per-seed episode outcomes"):
        eval_diff(a, tmp_path / "games")
    with pytest.raises(EvalDiffError, match="'bob' is not scored in both"):
        eval_diff(a, a, agent="bob")


def test_the_cli_prints_the_paired_table_and_names_bad_input(tmp_path):
    pools = [0.2, 0.6, 0.4]
    a = write_eval(tmp_path / "a", [p + 0.05 for p in pools], pools, [1, 1, 1])
    b = write_eval(tmp_path / "b", pools, pools, [1, 1, 1])
    done = runner.invoke(app, ["eval-diff", str(a), str(b)])
    assert done.exit_code == 0, done.output
    assert "A minus B over the same 3 held-out episodes" in done.output
    assert "| utility | +5.0 [+5.0, +5.0] | 3 seeds | 0 seeds | 3 seeds |" in done.output
    bad = runner.invoke(app, ["eval-diff", str(a), str(b), "--b-policy", "latest"])
    assert bad.exit_code == 2
    assert "--b-policy: 'latest' is not evaluated or baseline" in " ".join(bad.output.split())
    missing = runner.invoke(app, ["eval-diff", str(a), str(tmp_path / "nowhere")])
    assert missing.exit_code == 2 and "no eval.json there" in " ".join(missing.output.split())
