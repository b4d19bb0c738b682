"""The benchmark scripts still run: the PPO-update bench on tiny-random (two turns, one repeat),
writing its section to a scratch file, not bench/results.md. The figures themselves come from
`make bench` on a quiet machine; this only keeps the script in step with the learner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.stack_helpers import tiny_config

ROOT = Path(__file__).resolve().parents[2]


def run_bench(tmp_path: Path, args: list[str], timeout: int) -> str:
    """``python bench/<args>`` writing to a scratch results file: the section it appended."""
    results = tmp_path / "results.md"
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "AGORA_BENCH_RESULTS": str(results)})
    assert done.returncode == 0, done.stderr[-3000:]
    return results.read_text()


@pytest.mark.parametrize("turn_set", ["ttt32", "disc32"])
def test_ppo_update_bench_runs_on_the_current_learner(tmp_path, turn_set):
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config().model_dump(mode="json")))
    section = run_bench(tmp_path, [
        "bench/ppo_update.py", "--config", str(config), "--device", "cpu", "--dtype", "fp32",
        "--set", turn_set, "--turns", "4", "--repeats", "1"], timeout=600)
    for row in ("floor (fwd+bwd)", "PPO update, sharing on", "PPO update, sharing off"):
        assert row in section


def test_judge_signal_bench_runs_both_readings(tmp_path):
    """bench/judge_signal.py on tiny-random: a vLLM server, both readings, one table."""
    section = run_bench(tmp_path, ["bench/judge_signal.py", "--model", "tiny-random"],
                        timeout=900)
    assert "| sampled (constrained) |" in section and "| probabilities (logprobs) |" in section


def test_machine_speed_bench_writes_the_probe(tmp_path):
    section = run_bench(tmp_path, ["bench/machine_speed.py", "--repeats", "1"], timeout=300)
    assert "## machine_speed.py, " in section
    assert "| matmul 1024x1024 fp32 (GFLOP/s) |" in section and "fwd+bwd, 512 tokens" in section


def test_shared_base_bench_holds_one_copy_of_the_base(tmp_path):
    """bench/shared_base.py on tiny-random: both arms run in their own processes, and three
    learners on one base hold about a third of the weights three copies do."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_config().model_dump(mode="json")))
    section = run_bench(tmp_path, ["bench/shared_base.py", "--config", str(config), "--device",
                                   "cpu", "--dtype", "fp32", "--turns", "4", "--repeats", "1"],
                        timeout=600)
    shared = next(line for line in section.splitlines() if line.startswith("| one shared base"))
    weights_ratio = float(shared.split("|")[3].strip().rstrip("x"))
    assert 0.2 < weights_ratio < 0.5, shared
    assert "| fwd+bwd, one mixed-adapter batch |" in section


def test_negotiation_demonstrators_bench_scores_every_negotiator_against_every_partner(tmp_path):
    """bench/negotiation_demonstrators.py: no model; a row per negotiator, the fair one the
    baseline (1.00x), and the conceder above it on the same pools (the reason for its
    warm start, configs/results.yaml negotiation-warm-conceder)."""
    section = run_bench(tmp_path, ["bench/negotiation_demonstrators.py", "--pools", "40"],
                        timeout=300)
    for row in ("| fair |", "| conceder |", "| greedy |"):
        assert row in section
    ratios = section.rsplit("same pools): ", 1)[1].split(", ")
    assert ratios[0] == "fair 1.00x"
    assert float(ratios[1].removeprefix("conceder ").removesuffix("x")) > 1.2
