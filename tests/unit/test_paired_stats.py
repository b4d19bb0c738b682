"""Paired comparisons in `agora eval`: evaluated minus baseline on the same seeds or tasks.

The interval formulas are checked against a published value and by simulation (coverage of
the true difference), the eval sections by the numbers they compute from known outcomes, and
the report by the table it writes.
"""

from __future__ import annotations

import math
import random

import pytest

from agora.evaluation.context_envs import (
    paired_by_task,
    paired_metrics,
    preference_over_tasks,
    task_of,
)
from agora.evaluation.discussion import Answer, paired_rounds, task_accuracy
from agora.evaluation.report import context_md, discussion_md, mean
from agora.evaluation.stats import paired_difference, paired_mean_difference, rate, wilson
from agora.rollout.records import EpisodeRecord

CELLS = [(True, True), (True, False), (False, True), (False, False)]


def table_outcomes(both: int, evaluated_only: int, baseline_only: int, neither: int
                   ) -> tuple[list[bool], list[bool]]:
    pairs = ([CELLS[0]] * both + [CELLS[1]] * evaluated_only + [CELLS[2]] * baseline_only
             + [CELLS[3]] * neither)
    return [a for a, _ in pairs], [b for _, b in pairs]


def test_paired_difference_matches_newcombes_published_interval():
    # Newcombe's square-and-add interval for the paired table [[59, 6], [16, 80]], as the
    # contingency-table literature reports it: -0.0621 (-0.1186 to -0.0046).
    result = paired_difference(*table_outcomes(59, 6, 16, 80))
    assert result["difference"] == pytest.approx(-10 / 161)
    lo, hi = result["ci95"]
    assert lo == pytest.approx(-0.1186, abs=5e-5) and hi == pytest.approx(-0.0046, abs=5e-5)
    assert (result["both"], result["evaluated_only"], result["baseline_only"],
            result["neither"], result["n"]) == (59, 6, 16, 80, 161)


def independent_half_widths(evaluated: list[bool], baseline: list[bool]) -> float:
    """The same square-and-add interval's width with the correlation left out (phi = 0)."""
    n = len(evaluated)
    p1, p2 = sum(evaluated) / n, sum(baseline) / n
    (l1, u1), (l2, u2) = wilson(sum(evaluated), n), wilson(sum(baseline), n)
    return math.hypot(p1 - l1, u2 - p2) + math.hypot(p2 - l2, u1 - p1)


def test_paired_interval_covers_the_true_difference_95_percent_and_is_narrower_than_unpaired():
    # Correlated outcomes, as two versions of one policy on the same seeds: most seeds are
    # solved by both or by neither. True difference 0.10 - 0.05 = +0.05.
    rng = random.Random(0)
    probs = [0.35, 0.10, 0.05, 0.50]
    sims, n, covered, paired_width, unpaired_width = 1000, 200, 0, 0.0, 0.0
    for _ in range(sims):
        pairs = rng.choices(CELLS, probs, k=n)
        evaluated, baseline = [a for a, _ in pairs], [b for _, b in pairs]
        lo, hi = paired_difference(evaluated, baseline)["ci95"]
        covered += lo <= 0.05 <= hi
        paired_width += hi - lo
        unpaired_width += independent_half_widths(evaluated, baseline)
    # Ignoring the correlation covers 99.9% here (too wide); the paired interval is near 95%.
    assert 0.93 <= covered / sims <= 0.975
    assert paired_width < 0.6 * unpaired_width


def test_paired_difference_edge_cases_are_clear():
    same = paired_difference([True, False, True], [True, False, True])
    assert same["difference"] == 0.0 and same["ci95"][0] < 0.0 < same["ci95"][1]
    everything = paired_difference([True] * 30, [False] * 30)
    assert everything["difference"] == 1.0 and 0.8 < everything["ci95"][0] <= 1.0
    assert everything["ci95"][1] == 1.0
    assert paired_difference([], [])["ci95"] is None
    with pytest.raises(ValueError, match="same seeds"):
        paired_difference([True, False], [True])


def test_paired_mean_difference_is_over_units_and_counts_better_and_worse():
    result = paired_mean_difference([0.5, 1.0, 0.25, 0.0], [0.25, 0.5, 0.25, 0.25])
    assert result["difference"] == pytest.approx((0.25 + 0.5 + 0.0 - 0.25) / 4)
    assert (result["better"], result["worse"], result["n"]) == (2, 1, 4)
    lo, hi = result["ci95"]
    assert -1.0 <= lo < result["difference"] < hi <= 1.0
    with pytest.raises(ValueError):
        paired_mean_difference([0.5], [])


def record(seed: int, solved: float | None) -> EpisodeRecord:
    metrics = {"fixer": {"pass_rate": 0.5}} if solved is None else {
        "fixer": {"solved": solved, "pass_rate": 0.5}}
    return EpisodeRecord(run_id="r", episode_id=f"e{seed}", env="code_debug", seed=seed,
                         seats=["fixer"], info={"metrics": metrics})


def test_paired_metrics_pair_episodes_by_seed_and_skip_seeds_one_side_lacks():
    evaluated = [record(i, s) for i, s in enumerate([1.0, 1.0, 0.0, 1.0, None])]
    baseline = [record(i, s) for i, s in enumerate([1.0, 0.0, 0.0, 0.0, 1.0])]
    paired = paired_metrics(evaluated, baseline, "fixer")
    solved = paired["solved"]
    assert (solved["n"], solved["both"], solved["evaluated_only"], solved["baseline_only"],
            solved["neither"]) == (4, 1, 2, 0, 1)
    assert solved["difference"] == pytest.approx(0.5)
    # pass_rate is a mean, played by all five seeds alike: paired, no difference.
    assert paired["pass_rate"]["difference"] == 0.0 and paired["pass_rate"]["n"] == 5


def negotiated(seed: int, utility: float, deal: float, calls: int = 0) -> EpisodeRecord:
    return EpisodeRecord(run_id="r", episode_id=f"e{seed}", env="negotiation", seed=seed,
                         seats=["agent", "bot:context:partner/fair"], info={
                             "pool": {"book": 2}, "metrics": {"agent": {
                                 "utility": utility, "deal_rate": deal, "tool_calls": calls}}})


def test_a_mean_metric_is_paired_by_seed_and_the_pool_it_shares_drops_out():
    # Pools worth a lot or little to both versions (0.2 .. 0.9): per seed the evaluated policy
    # gets 0.05 more. Unpaired, the two means' intervals overlap; paired, the difference is
    # exactly +0.05 with no spread, every seed better.
    worth = [0.2 + 0.7 * (i % 8) / 7 for i in range(40)]
    evaluated = [negotiated(i, w + 0.05, 1.0, 3) for i, w in enumerate(worth)]
    baseline = [negotiated(i, w, 1.0, 1) for i, w in enumerate(worth)]
    paired = paired_metrics(evaluated, baseline, "agent")
    assert "tool_calls" not in paired  # a count has no 0..1 scale to take points of
    utility = paired["utility"]
    assert (utility["unit"], utility["n"], utility["better"], utility["worse"]) == (
        "seed", 40, 40, 0)
    assert utility["difference"] == pytest.approx(0.05)
    assert utility["ci95"][0] == pytest.approx(0.05) and utility["ci95"][1] == pytest.approx(0.05)
    assert utility["evaluated"]["ci95"][0] < utility["baseline"]["ci95"][1]  # unpaired: overlap
    assert paired["deal_rate"]["evaluated_only"] == 0  # a 0/1 metric stays Newcombe's
    text = "\n".join(context_md({"episodes": 40, "policies": {
        side: {"labels": {"agent": "agent@v0"}, "agents": {"agent": {}}}
        for side in ("evaluated", "baseline")}, "paired": {"agent": {"utility": utility}}}))
    row = next(line for line in text.splitlines() if line.startswith("| agent | utility |"))
    assert "| +5.0 [+5.0, +5.0] | 40 seeds | 0 seeds | 40 seeds |" in row
    # Both versions' means with their intervals, as the episodes table writes a mean.
    assert row.endswith(f"| {mean(utility['evaluated'])} / {mean(utility['baseline'])} |")
    assert "%" not in row


def coded(seed: int, problem: str, solved: float) -> EpisodeRecord:
    """A code_debug record of ``problem``, the author on the strategy of seed parity."""
    author = "bot:context:author/" + ("buggy_author" if seed % 2 else "reference_author")
    return EpisodeRecord(run_id="r", episode_id=f"e{seed}", env="code_debug", seed=seed,
                         seats=[author, "fixer"], info={"problem_id": problem,
                                                        "metrics": {"fixer": {"solved": solved}}})


def test_seeds_that_repeat_a_task_are_paired_by_task_not_by_seed():
    # 12 seeds over 3 problems x 2 author strategies = 6 tasks, each played twice alike (what
    # greedy decoding does): the seeds are not 12 independent outcomes.
    problems = ["p0", "p1", "p2"]
    tasks = [(problems[i % 3], i) for i in range(12)]
    evaluated = [coded(i, p, 1.0 if p == "p0" else 0.0) for p, i in tasks]
    baseline = [coded(i, p, 0.0) for p, i in tasks]
    solved = paired_metrics(evaluated, baseline, "fixer")["solved"]
    assert (solved["unit"], solved["n"], solved["seeds"]) == ("task", 6, 12)
    assert solved["difference"] == pytest.approx(2 / 6)
    assert (solved["better"], solved["worse"]) == (2, 0)
    assert solved["evaluated"]["mean"] == pytest.approx(2 / 6)
    assert solved["baseline"]["mean"] == 0.0
    by_seed = paired_difference([r.info["metrics"]["fixer"]["solved"] == 1.0 for r in evaluated],
                                [False] * 12)
    # Over the 6 tasks the interval is wider than the one that takes 12 seeds as independent.
    task_width = solved["ci95"][1] - solved["ci95"][0]
    assert task_width > by_seed["ci95"][1] - by_seed["ci95"][0]
    # A task of each seed's own (no repeats): paired by seed, Newcombe's interval.
    unique = paired_metrics([coded(i, f"q{i}", 1.0) for i in range(4)],
                            [coded(i, f"q{i}", 0.0) for i in range(4)], "fixer")["solved"]
    assert (unique["unit"], unique["n"], unique["evaluated_only"]) == ("seed", 4, 4)
    # The partner strategy is part of the task: p0 under both authors is two tasks.
    assert task_of(coded(0, "p0", 1.0)) != task_of(coded(1, "p0", 1.0))
    assert task_of(record(0, 1.0)) is None  # no problem named: every seed its own


def test_discussion_accuracy_is_paired_by_task_over_samples_and_seats():
    right, wrong = Answer(True, 1), Answer(False, 2)
    # answers[task][sample][round][seat]: 2 tasks, k = 2, 2 rounds, 2 seats.
    evaluated = [[[[wrong, wrong], [right, right]], [[right, wrong], [right, right]]],
                 [[[wrong, wrong], [wrong, right]], [[wrong, wrong], [wrong, wrong]]]]
    baseline = [[[[wrong, wrong], [wrong, wrong]], [[right, wrong], [right, wrong]]],
                [[[wrong, wrong], [wrong, wrong]], [[wrong, wrong], [wrong, wrong]]]]
    assert task_accuracy(evaluated, 1) == [1.0, 0.25]
    assert task_accuracy(baseline, 1) == [0.25, 0.0]
    paired = paired_rounds(evaluated, baseline)
    assert paired["turn1"]["difference"] == 0.0
    assert paired["last"]["difference"] == pytest.approx((0.75 + 0.25) / 2)
    assert (paired["last"]["better"], paired["last"]["worse"]) == (2, 0)


def test_eval_markdown_shows_the_paired_tables():
    rate = {"rate": 0.5, "n": 4, "ci95": [0.2, 0.8]}
    context = {"episodes": 4, "policies": {
        "evaluated": {"labels": {"fixer": "fixer@v3"}, "agents": {"fixer": {"solved": rate}}},
        "baseline": {"labels": {"fixer": "fixer@v0"}, "agents": {"fixer": {"solved": rate}}}},
        "paired": {"fixer": {"solved": {"difference": 0.04, "ci95": [0.009, 0.071], "n": 300,
                                        "evaluated_only": 20, "baseline_only": 8,
                                        "both": 100, "neither": 172}}}}
    text = "\n".join(context_md(context))
    assert "paired (points: a 0..1 metric x 100)" in text
    assert "| fixer | solved | +4.0 [+0.9, +7.1] | 20 seeds | 8 seeds | 300 seeds | - |" in text
    by_task = paired_by_task([1.0, 1.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], ["a", "a", "b", "b"])
    context["paired"]["fixer"]["solved"] = by_task
    text = "\n".join(context_md(context))
    assert ("| fixer | solved | +25.0 [-24.0, +74.0] | 1 tasks | 0 tasks | 2 tasks (4 seeds) | "
            "50.0% [0.0%, 100.0%] / 25.0% [0.0%, 74.0%] |") in text
    assert "The 4 seeds pose 2 distinct tasks" in text
    metrics = {"pass@1": rate, "pass@k": rate, "maj@k": rate}
    discussion = {"tasks": 2, "k": 2, "policies": {
        "evaluated": {"label": "a@v1", "turn1": metrics, "last": metrics}},
        "paired": {"turn1": {"difference": 0.0, "ci95": [-0.1, 0.1], "n": 2, "better": 0,
                             "worse": 0},
                   "last": {"difference": 0.5, "ci95": None, "n": 2, "better": 2, "worse": 0}}}
    text = "\n".join(discussion_md(discussion))
    assert "| turn 1 | +0.0 [-10.0, +10.0] | 0 / 0 / 2 |" in text
    assert "| last turn | +50.0 | 2 / 0 / 0 |" in text


def test_judge_preference_over_repeated_premises_is_read_over_tasks():
    # 8 comparisons over 2 premises: the first always won by a, the second always tied.
    probs = [1.0, 0.5] * 4
    tasks = ["p0|fair", "p1|fair"] * 4
    by_task = preference_over_tasks(probs, tasks)["preference_by_task"]
    assert (by_task["mean"], by_task["n"], by_task["seeds"]) == (0.75, 2, 8)
    over_comparisons = wilson(6, 8)
    assert by_task["ci95"][1] - by_task["ci95"][0] > over_comparisons[1] - over_comparisons[0]
    # Each comparison its own task, or one whose task is unknown: nothing to regroup.
    assert preference_over_tasks(probs, [f"q{i}" for i in range(8)]) == {}
    assert preference_over_tasks(probs, [None, *tasks[1:]]) == {}
    pref = {"a": "writer@v3", "b": "writer@v0", "comparisons": 8,
            "preference": rate(6, 8), "wins": 4, "ties": 4, "losses": 0, "position_bias": 0,
            "malformed": 0, "preference_by_task": by_task}
    section = {"episodes": 8, "preference": pref, "policies": {
        side: {"labels": {"writer": "writer@v0"}, "agents": {"writer": {}}}
        for side in ("evaluated", "baseline")}}
    text = "\n".join(context_md(section))
    assert "The 8 comparisons pose 2 distinct tasks: over tasks the preference for a is 75.0%" \
        in text
