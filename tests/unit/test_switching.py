"""The switching-partner analysis (agora/evaluation/switching.py) on episodes written as the
worker writes them: forgetting and recovery are measured against the same strategy only."""

from __future__ import annotations

import pytest

from agora.evaluation.switching import reward_by_update, segments, switching_report
from agora.results.report import plot_curves, switching_lines
from agora.results.runner import switching, switching_figures
from tests.stack_helpers import tiny_config, write_config
from tests.switching_episodes import SCHEDULE, write_episodes


def test_rewards_per_update_and_segments_follow_the_partner(tmp_path):
    by_update = reward_by_update(write_episodes(tmp_path / "e.jsonl"), "alice")
    assert by_update[0] == ("fair", pytest.approx(0.3))
    assert by_update[5] == ("fair", pytest.approx(0.6))
    parts = segments(by_update)
    assert [(s.strategy, s.start, s.end) for s in parts] == [
        ("fair", 0, 1), ("greedy", 2, 3), ("fair", 4, 5), ("greedy", 6, 7)]


def test_returns_measure_forgetting_and_recovery_against_the_same_strategy(tmp_path):
    report = switching_report(write_episodes(tmp_path / "e.jsonl"), "alice")
    fair, greedy = report["returns"]
    # fair ended its first segment at (0.3 + 0.6) / 2; it came back at 0.3, was above by 5
    assert fair["strategy"] == "fair" and fair["before"] == pytest.approx(0.45)
    assert fair["forgetting"] == pytest.approx(0.15) and fair["recovered_after"] == 1
    # greedy ended at (0.05 + 0.2) / 2 = 0.125; back at 0.3 at once, never forgotten
    assert greedy["recovered_after"] == 0 and greedy["forgetting"] == pytest.approx(-0.175)
    summary = report["summary"]
    assert summary == {"switches": 3, "returns": 2, "recovered": 2,
                       "median_updates_to_recover": 0.5,
                       "mean_forgetting": pytest.approx(-0.0125),
                       "reward_by_strategy": {"fair": 0.45, "greedy": 0.1375},
                       "partner_effect": 0.3125}
    figures = {f.name: f for f in switching_figures(report)}
    assert figures["returns recovered"].after.value == 1.0
    assert figures["returns recovered"].after.n == 2
    assert figures["median updates to recover"].after.value == 0.5
    assert figures["partner effect (reward)"].after.value == 0.3125
    assert "fair 0.450, greedy 0.138 (partner effect 0.312)" in "\n".join(
        switching_lines(report))


def test_a_return_that_never_recovers_says_so(tmp_path):
    schedule = {0: ("fair", [0.9]), 1: ("greedy", [0.0]), 2: ("fair", [0.1]),
                3: ("fair", [0.2])}
    report = switching_report(write_episodes(tmp_path / "e.jsonl", schedule), "alice")
    (back,) = report["returns"]
    assert back["recovered_after"] is None
    assert report["summary"]["median_updates_to_recover"] is None
    assert "| 2 | fair | 0.900 | 0.100 | +0.800 | - |" in "\n".join(switching_lines(report))


def test_no_switching_partner_no_report(tmp_path):
    fixed = {0: ("fair", [0.1]), 1: ("fair", [0.3])}
    assert switching_report(write_episodes(tmp_path / "e.jsonl", fixed), "alice") == {}
    assert switching_report(tmp_path / "missing.jsonl", "alice") == {}
    assert switching_report(write_episodes(tmp_path / "b.jsonl", SCHEDULE, "bob"), "alice") == {}


def test_the_curves_png_gets_a_switching_panel(tmp_path):
    report = switching_report(write_episodes(tmp_path / "e.jsonl"), "alice")
    outcome = {"recipe": "Negotiation", "curves": {}, "switching": report}
    png = plot_curves([outcome], tmp_path / "curves.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


def test_a_trained_run_is_read_with_its_own_configs_learner(tmp_path):
    """What `agora results` does with a train_eval run folder: the learner comes from the
    run's config.yaml, the episodes from its episodes.jsonl."""
    cfg = tiny_config(
        agents=[{"name": "alice", "base": "tiny", "lora_rank": 8, "lora_alpha": 16}],
        context_agents={"partner": {"cycle": ["fair", "greedy"], "every": 2}},
        environment={"name": "negotiation", "seats": ["alice", "context:partner"],
                     "prefill": "", "opponents": {"self": 1.0}},
        reward={"verifier": "deal"})
    run = tmp_path / "negotiation"
    run.mkdir()
    write_config(cfg, run / "config.yaml")
    write_episodes(run / "episodes.jsonl")
    report = switching(run)
    assert report["learner"] == "alice" and report["summary"]["returns"] == 2
