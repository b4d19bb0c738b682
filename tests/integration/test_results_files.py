"""results.md and its pictures as `agora results` writes them (write_results describes the
machine through a subprocess, hence integration); the runner keeping a step's product."""

from __future__ import annotations

import json
from pathlib import Path

from agora.evaluation.switching import switching_report
from agora.results import runner
from agora.results.commands import Step
from agora.results.plan import Experiment
from agora.results.report import write_results
from agora.results.runner import STEP_RECORD, run_experiment
from tests.switching_episodes import write_episodes

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_rerun_keeps_a_warm_start_made_by_the_same_command(tmp_path, monkeypatch):
    # Hanabi's warm start takes ~25 min: a plan stopped after it (or whose PPO run failed)
    # must go on from its adapter, not make it again, unless its command changed or --rerun.
    out = tmp_path / "results"
    adapter = out / "runs" / "h-sft"
    adapter.mkdir(parents=True)
    warm = Step("warm start", ["config", "reference"], product=adapter)  # exits 0
    ppo = Step("train + evaluate", ["config", "reference", "--no-such-option"])  # exits 2
    planned = [warm, ppo]
    monkeypatch.setattr(runner, "steps", lambda _exp, _runs: planned)
    exp = Experiment(name="h", recipe="Hanabi", kind="demo",
                     config=ROOT / "configs/hanabi_selfplay.yaml", minutes=1)
    lines: list[str] = []

    first = run_experiment(exp, out, lines.append)
    assert first["error"] == "'train + evaluate' exited 2"
    # the machine probed before the experiment, logged and kept in its outcome
    assert lines[0].startswith("h: machine: ") and " GFLOP/s on 1 thread" in lines[0]
    assert first["machine"]["block_ms_1t"] > 0
    assert json.loads((out / "h.json").read_text())["machine"] == first["machine"]
    record = json.loads((adapter / STEP_RECORD).read_text())
    assert record == {"command": "agora config reference"}

    lines.clear()  # (the probe is left out from here on: its figures were checked above)
    second = run_experiment(exp, out, lines.append, probe_machine=False)
    assert second["error"] == "'train + evaluate' exited 2"  # the failed step runs again
    assert lines[0] == f"h: warm start: made before by the same command, kept: {adapter}"
    assert lines[1].startswith("h: train + evaluate: agora config reference --no-such-option")
    assert "(kept from before" in (out / "logs" / "h.log").read_text()

    lines.clear()  # --rerun makes it again
    run_experiment(exp, out, lines.append, reuse=False, probe_machine=False)
    assert lines[0] == "h: warm start: agora config reference"
    lines.clear()  # another command (say, more SFT steps) makes it again
    planned[0] = Step("warm start", ["config", "reference", "--help"], product=adapter)
    run_experiment(exp, out, lines.append, probe_machine=False)
    assert lines[0] == "h: warm start: agora config reference --help"
    assert json.loads((adapter / STEP_RECORD).read_text())["command"].endswith("--help")
    lines.clear()  # and a step that failed leaves no record behind: not kept next time
    planned[0] = Step("warm start", ["config", "reference", "--bad"], product=adapter)
    run_experiment(exp, out, lines.append, probe_machine=False)
    assert not (adapter / STEP_RECORD).exists()


def test_a_step_appends_its_output_to_the_log_and_returns_its_exit_code(tmp_path):
    """Steps run tethered to `agora results` (a killed plan takes its step with it); their
    output lands after the runner's own `$ command` line, and their exit code is returned."""
    log = tmp_path / "x.log"
    log.write_text("$ agora --help\n")
    assert runner.run_step(Step("help", ["--help"]), log, "x") == 0
    text = log.read_text()
    assert text.startswith("$ agora --help\n") and "results" in text
    assert runner.run_step(Step("bad", ["no-such-command"]), log, "x") == 2
    assert "No such command" in log.read_text()
