"""A learner sharded over two processes (``trainer.processes: 2``: PyTorch FSDP2, torchrun, gloo
on the CPU: the code path a multi-GPU learner takes, with NCCL there) computes the update a
one-process learner computes: the same statistics, the same adapter after several minibatches
and epochs, checkpoints that resume with either number of processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agora.config.base import ConfigError
from tests import sharded_learner
from tests.stack_helpers import tiny_config

REPO = Path(__file__).resolve().parents[2]


def _run_two_ranks(model: str, out: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(REPO / "tests" / "sharded_learner.py"), model, str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    """An adapter's weights, or a full-weight model folder's."""
    adapter = folder / "adapter_model.safetensors"
    return load_file(str(adapter if adapter.is_file() else folder / "model.safetensors"))


@pytest.fixture(scope="module")
def sharded_and_single(tiny_model, tmp_path_factory):
    """Both runs of every scenario: (two-process folder, one-process stats and folder)."""
    out = tmp_path_factory.mktemp("sharded")
    single_dir = tmp_path_factory.mktemp("single")
    single_stats = {}
    sharded_learner.write_init_adapter(tiny_model, out)
    for name, ppo in sharded_learner.SCENARIOS:
        agent = sharded_learner.learner(tiny_model, ppo, scenario=name, out=out)
        single_stats[name] = agent.update(sharded_learner.turns(agent))
        agent.save_policy(single_dir / name)
        if name == "minibatches":
            agent.save_checkpoint(out / "single-ckpt", {"scenario": name})
    _run_two_ranks(tiny_model, out)
    return out, single_stats, single_dir


@pytest.mark.parametrize("scenario", [name for name, _ in sharded_learner.SCENARIOS])
def test_two_processes_compute_the_one_process_update(sharded_and_single, scenario,
                                                      tiny_model):
    out, single_stats, single_dir = sharded_and_single
    sharded = json.loads((out / "stats.json").read_text())[scenario]
    single = single_stats[scenario]
    # The gradient norm too: AdamW's step hides a gradient off by a constant factor.
    for key in ("pg_loss", "vf_loss", "entropy", "clipfrac", "ratio", "kl", "grad_norm",
                "turns", "tokens"):
        if key in single:
            assert sharded[key] == pytest.approx(single[key], rel=1e-4, abs=1e-6), key
    assert single["turns"] == 10
    before = _weights(single_dir / scenario)
    after = _weights(out / scenario)
    assert sorted(after) == sorted(before)
    lr = dict(sharded_learner.SCENARIOS)[scenario].get("learning_rate", 5e-3)
    for key, weight in before.items():
        # AdamW divides by the root of tiny second moments: an element whose gradient is ~0
        # may differ by up to a fraction of a step; on average the weights agree to ~lr/1e4.
        torch.testing.assert_close(after[key], weight, atol=lr / 4, rtol=1e-3)
        assert (after[key] - weight).abs().mean() < lr / 2500, key
    if scenario == "full":  # every weight of the base moved, not only an adapter's
        base = load_file(str(Path(tiny_model) / "model.safetensors"))
        assert sorted(after) == sorted(base)
        assert all(not torch.equal(after[k], base[k]) for k in after if "layers.0." in k)
        # ... except the embeddings (= the tied LM head), which vLLM cannot reload.
        assert torch.equal(after["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    elif scenario == "warm":  # held to the init adapter: its KL starts at 0
        assert single["kl"] == pytest.approx(0.0, abs=1e-5)
    else:  # lora_B starts at zero: the update changed the adapter
        assert sum(w.abs().sum().item() for k, w in before.items() if "lora_B" in k) > 0


def test_checkpoints_are_whole_and_resume_across_process_counts(sharded_and_single,
                                                                 tiny_model):
    out, _, _ = sharded_and_single
    # Written by two processes, read by one: the same weights and optimizer moments.
    sharded_state = torch.load(out / "minibatches-ckpt" / "trainer_state.pt")
    single_state = torch.load(out / "single-ckpt" / "trainer_state.pt")
    assert sharded_state["updates"] == single_state["updates"] == 1
    for key, moments in single_state["policy_opt"]["state"].items():
        torch.testing.assert_close(sharded_state["policy_opt"]["state"][key]["exp_avg"],
                                   moments["exp_avg"], atol=1e-6, rtol=1e-3)
    one = sharded_learner.learner(tiny_model, sharded_learner.SCENARIOS[0][1])
    assert one.load_checkpoint(out / "minibatches-ckpt") == {"scenario": "minibatches"}
    assert one.updates == 1
    # Written by one process, resumed by two, saved again: nothing lost on the way.
    for key, weight in _weights(out / "single-ckpt" / "adapter").items():
        torch.testing.assert_close(_weights(out / "resumed-ckpt" / "adapter")[key], weight)
    resumed = torch.load(out / "resumed-ckpt" / "trainer_state.pt")
    for key, moments in single_state["policy_opt"]["state"].items():
        torch.testing.assert_close(resumed["policy_opt"]["state"][key]["exp_avg_sq"],
                                   moments["exp_avg_sq"])


def test_config_refuses_what_a_sharded_learner_cannot_do():
    with pytest.raises(ConfigError, match=r"agents.player.device"):
        tiny_config(trainer={"device": "cpu", "dtype": "fp32", "processes": 2},
                    agents=[{"name": "player", "base": "tiny", "lora_rank": 8,
                             "device": "cpu"}])
    with pytest.raises(ConfigError, match=r"trainer.compile"):
        tiny_config(trainer={"device": "cpu", "dtype": "fp32", "processes": 2, "compile": True})
    with pytest.raises(ConfigError, match=r"ppo.batch_turns >= 4"):
        tiny_config(trainer={"device": "cpu", "dtype": "fp32", "processes": 4},
                    ppo={"batch_turns": 2, "minibatch_turns": 2})
