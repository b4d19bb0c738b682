"""`agora demo` end to end on tiny-random (a Hanabi config with a warm start: the trainer's
SFT first, the team-score table with the base model's row, and a move asked through the
gateway), and its refusal of envs it cannot evaluate."""

from __future__ import annotations

import json
import subprocess
import sys

import torch
from safetensors.torch import load_file

from agora.serving.weights import adapter_dir
from tests.stack_helpers import processes_of_run, tiny_config, write_config


def _agora(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agora.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_demo_warm_starts_trains_evaluates_before_and_after_and_asks_the_gateway(tmp_path):
    cfg = tiny_config(
        models={"tiny": {"max_model_len": 1024}},
        agents=[{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"temperature": 1.0, "max_tokens": 6, "stop": ["\n"]},
                 # the trainer's SFT on hanabi_simple's turns, before PPO (version 0)
                 "warm_start": {"episodes": 2, "max_steps": 3, "batch_size": 2,
                                "learning_rate": 0.01}}],
        environment={"name": "hanabi", "seats": ["player", "player"], "prefill": "[Play] ",
                     "opponents": {"self": 1.0, "hanabi_simple": 1.0}},
        ppo={"advantage_norm": "role"}, trainer={"max_updates": 1, "pin_cpus": False, "nice": 0},
        eval={"games": 4, "opponents": ["self", "hanabi_simple"]},
        output_dir=str(tmp_path / "runs"),
    )
    proc = _agora("demo", str(write_config(cfg, tmp_path / "hanabi.yaml")), cwd=tmp_path)
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "hanabi: before vs after training" in out and "mean score" in out
    assert "/v1/chat/completions -> [Play]" in out  # the gateway answered with a move
    assert "made the chat key 'demo-" in out  # with a key: the embedded gateway requires one
    (run_dir,) = (tmp_path / "runs").iterdir()
    rows = json.loads((run_dir / "eval.json").read_text())
    assert set(rows) == {"base (untrained)", "before (v0)", "after"}
    assert "evaluating the base model, player-v0 and player (latest)" in " ".join(out.split())
    # Version 0 is the warm start's adapter, which learnt something (LoRA B starts at zero).
    trainer_log = (run_dir / "logs" / "trainer.log").read_text()
    assert "player: warm start on " in trainer_log and "demonstrated turns" in trainer_log
    warm = load_file(str(run_dir / "warm-start" / "player" / "adapter_model.safetensors"))
    v0 = load_file(str(adapter_dir(run_dir, "player", 0) / "adapter_model.safetensors"))
    assert set(warm) == set(v0)
    assert all(torch.equal(warm[k], v0[k]) for k in warm)
    assert any(k.endswith("lora_B.weight") and warm[k].abs().sum() > 0 for k in warm)
    for by_opponent in rows.values():
        assert set(by_opponent) == {"self", "hanabi_simple"}
        for row in by_opponent.values():
            assert row["games"] == 4 and 0.0 <= row["score"] <= 25.0
            lo, hi = row["score_ci95"]  # 4 games: an interval beside the mean
            assert 0.0 <= lo <= row["score"] <= hi
    assert processes_of_run(run_dir.name) == []


def test_demo_refuses_an_env_it_cannot_evaluate(tmp_path):
    cfg = tiny_config(
        environment={"name": "negotiation", "seats": ["player", "context:partner"],
                     "prefill": "", "opponents": {"self": 1.0}},
        context_agents={"partner": {"strategy": "fair"}},
    )
    proc = _agora("demo", str(write_config(cfg, tmp_path / "nego.yaml")), cwd=tmp_path)
    assert proc.returncode == 2
    assert "environment.name: demo evaluates games" in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr


def test_run_ids_that_are_paths_are_refused_and_delete_nothing(tmp_path):
    """A fresh run deletes the folder of its id first: `--run-id ../x` must never reach out."""
    victim = tmp_path / "precious"
    victim.mkdir()
    (victim / "data.txt").write_text("keep me")
    cfg = tiny_config(output_dir=str(tmp_path / "runs"))
    path = str(write_config(cfg, tmp_path / "ttt.yaml"))
    for command in ("demo", "up"):
        for bad in ("../precious", "a/b", "-rf", ".hidden", "x" * 102):
            proc = _agora(command, path, "--run-id", bad, cwd=tmp_path)
            assert proc.returncode == 2, (command, bad, proc.stdout, proc.stderr)
            assert "--run-id" in proc.stdout and "not a run id" in proc.stdout, proc.stdout
            assert "Traceback" not in proc.stdout + proc.stderr
    assert (victim / "data.txt").read_text() == "keep me"
