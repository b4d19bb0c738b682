"""`agora results` end to end on tiny-random: a warm-started Tic-Tac-Toe demo run through its
real commands, an experiment that fails, the table, the curves, and a rerun that keeps what
is done."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml
from typer.testing import CliRunner

from agora.cli.main import app
from tests.stack_helpers import processes_of_run, tiny_config, write_config


def _results(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agora.cli", "results", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def _results_here(*args: str):
    """The same command in this process (typer's CliRunner): for calls that run nothing, it
    saves a fresh interpreter's imports."""
    return CliRunner().invoke(app, ["results", *args])


def test_results_runs_the_plan_writes_the_table_and_keeps_done_experiments(tmp_path):
    cfg = tiny_config(trainer={"max_updates": 2, "pin_cpus": False, "nice": 0},
                      eval={"games": 4, "opponents": ["random", "minimax"]})
    config = write_config(cfg, tmp_path / "ttt.yaml")
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump({"experiments": [
        {"name": "ttt", "recipe": "Tic-Tac-Toe", "kind": "demo", "config": str(config),
         "updates": 1, "games": 4,
         "warm_start": {"episodes": 2, "epochs": 1, "max_steps": 2, "batch_size": 2},
         "targets": ["legal moves vs random >= 0", "wins vs random > 1.5",
                     "draws vs minimax >= before"]},
        # compare needs a discussion: this one fails at once, and the plan goes on.
        {"name": "broken", "recipe": "Not a discussion", "kind": "compare",
         "config": str(config), "updates": 1, "targets": ["multi-agent: last turn > 0"]},
    ]}))
    out = tmp_path / "results"
    proc = _results(str(plan), "--out", str(out), cwd=tmp_path)
    text = proc.stdout + proc.stderr
    assert proc.returncode == 1, text[-4000:]  # one experiment failed
    assert "failed" in proc.stdout and "broken" in proc.stdout

    ttt = json.loads((out / "ttt.json").read_text())
    assert ttt["status"] == "done", ttt.get("log_tail")
    assert [c.split()[1] for c in ttt["commands"]] == ["warm-start", "demo"]
    assert (out / "runs" / "ttt-sft" / "adapter_model.safetensors").is_file()
    made_by = json.loads((out / "runs" / "ttt-sft" / "agora_results_step.json").read_text())
    assert made_by["command"].startswith("agora warm-start ")  # a rerun may keep it
    run_config = yaml.safe_load((out / "runs" / "ttt" / "config.yaml").read_text())
    assert run_config["agents"][0]["init_adapter"].endswith("ttt-sft")  # PPO started from it
    figures = {f["name"]: f for f in ttt["figures"]}
    wins = figures["wins vs random"]
    assert wins["after"]["n"] == 4 and wins["before"]["n"] == 4
    assert wins["after"]["lo"] <= wins["after"]["value"] <= wins["after"]["hi"]
    verdicts = {t["target"]: t["met"] for t in ttt["targets"]}
    assert verdicts == {">= 0": True, "> 1.5": False, ">= before": verdicts[">= before"]}
    assert isinstance(verdicts[">= before"], bool)
    signals = ttt["learner"]["ttt"]["player"]
    assert {"reward_mean", "reward_std", "adv_abs", "explained_var", "entropy"} <= set(signals)
    assert ttt["curves"]["ttt"]["points"]

    broken = json.loads((out / "broken.json").read_text())
    assert broken["status"] == "failed" and "exited 2" in broken["error"]
    assert "compare needs a discussion" in broken["log_tail"]

    md = (out / "results.md").read_text()
    assert "| Tic-Tac-Toe | wins vs random |" in md and "| > 1.5 | **no** |" in md
    assert "**failed**: 'two arms' exited 2" in md
    assert "agora warm-start " in md and "agora demo " in md
    assert "What the learner `player` saw" in md and "| turn reward spread |" in md
    assert ttt["machine"]["matmul_gflops_1t"] > 0  # probed before it ran, said in the table
    assert "Machine before it: " in md and " GFLOP/s on 1 thread" in md
    assert (out / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((out / "results.json").read_text())[0]["name"] == "ttt"
    assert processes_of_run("ttt") == []

    # A rerun keeps the done experiment (no new run) and runs only what failed.
    log = out / "logs" / "ttt.log"
    stamp = log.stat().st_mtime_ns
    again = _results_here(str(plan), "--out", str(out), "--only", "ttt")
    assert again.exit_code == 0, again.output[-3000:]
    assert "ttt: done before" in again.output
    assert log.stat().st_mtime_ns == stamp
    # --reread: the figures are read again from the run's files; nothing runs.
    (out / "ttt.json").write_text(json.dumps({**ttt, "figures": [], "targets": []}))
    reread = _results_here(str(plan), "--out", str(out), "--only", "ttt", "--reread")
    assert reread.exit_code == 0, reread.output[-3000:]
    assert "ttt: done before; reading its figures again" in reread.output
    assert json.loads((out / "ttt.json").read_text())["figures"] == ttt["figures"]
    assert log.stat().st_mtime_ns == stamp
    bad = _results_here(str(plan), "--out", str(out), "--only", "nope")
    assert bad.exit_code == 2 and "--only: no experiment ['nope']" in bad.output
    assert bad.exception is None or isinstance(bad.exception, SystemExit)  # no traceback
