"""results.md and its pictures as `agora results` writes them (write_results describes the
machine through a subprocess, hence integration)."""

from __future__ import annotations

from agora.evaluation.switching import switching_report
from agora.results.report import write_results
from tests.switching_episodes import write_episodes


def test_results_write_each_switching_run_its_own_png(tmp_path):
    report = switching_report(write_episodes(tmp_path / "e.jsonl"), "alice")
    plan = tmp_path / "plan.yaml"
    plan.write_text("experiments: []\n")
    outcomes = [{"name": "negotiation", "recipe": "Negotiation", "kind": "train_eval",
                 "curves": {}, "switching": report, "figures": [], "targets": [],
                 "status": "done", "log": "logs/negotiation.log",
                 "commands": []},
                {"name": "story", "recipe": "Story", "kind": "train_eval", "curves": {},
                 "switching": {}, "figures": [], "targets": [], "commands": [],
                 "status": "done", "log": "logs/story.log"}]
    written = write_results(outcomes, tmp_path, plan)
    assert written["switching-negotiation"].read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "switching-story.png").exists()
