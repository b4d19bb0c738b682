"""The learner on a real CUDA GPU: the same checks as tests/integration/test_ppo_device.py's, where
they cannot be faked. Marked ``gpu``: they run wherever torch sees a GPU (tests/conftest.py skips
them, saying so, on machines without one, such as CI's)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from agora.algos.compute import ComputeConfig, flash_attn_installed
from agora.algos.ppo import PPOLearner
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from tests.integration.test_ppo_device import DeviceAudit, _turns
from tests.stack_helpers import FP32

pytestmark = pytest.mark.gpu


def _gpu_learner(tiny_model: str, device: str = "cuda", **compute) -> PPOLearner:
    agent = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16)
    ppo = PPOConfig(kl_coef=0.02, epochs=1, batch_turns=16, minibatch_turns=16)
    return PPOLearner(tiny_model, agent, ppo, compute=ComputeConfig(device=device, **compute))


def test_auto_trains_on_the_gpu_in_bf16_at_ratio_one(tiny_model):
    learner = _gpu_learner(tiny_model, device="auto")
    assert learner.device.type == "cuda" and learner.placement.dtype == torch.bfloat16
    assert next(learner.model.parameters()).device.type == "cuda"
    first = learner.update(_turns(learner, 16))  # behaviour logprobs from the same policy
    assert first["ratio"] == pytest.approx(1.0, abs=0.02) and first["clipfrac"] < 0.05
    turns = _turns(learner, 16)
    audit = DeviceAudit(learner.device, host_ok=True)
    with torch.device("meta"), audit:
        learner.update(turns)
    assert audit.off_device == [], audit.off_device[:5]


def test_gpu_logprobs_match_the_cpu_ones(tiny_model):
    cpu = PPOLearner(tiny_model, AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16),
                     PPOConfig(), compute=FP32)
    gpu = _gpu_learner(tiny_model, dtype="fp32")
    turn = _turns(cpu, 1)[0]
    assert gpu.sequence_logprobs(turn) == pytest.approx(cpu.sequence_logprobs(turn), abs=1e-3)
    bf16 = _gpu_learner(tiny_model, dtype="bf16")
    assert bf16.sequence_logprobs(turn) == pytest.approx(cpu.sequence_logprobs(turn), abs=0.1)


@pytest.mark.parametrize("sharing", ["on", "off"])
def test_shared_prefix_on_the_gpu_gives_the_same_update(tiny_model, sharing):
    learner = _gpu_learner(tiny_model, dtype="fp32")
    learner.placement = dataclasses.replace(learner.placement, shared_prefix=sharing)
    turns = _turns(learner, 8)
    assert learner.update(turns)["ratio"] == pytest.approx(1.0, abs=1e-3)


def test_two_learners_on_two_gpus(tiny_model):
    if torch.cuda.device_count() < 2:
        pytest.skip("one GPU: per-learner devices need two")
    a, b = _gpu_learner(tiny_model, "cuda:0"), _gpu_learner(tiny_model, "cuda:1")
    assert (a.device.index, b.device.index) == (0, 1)
    for learner in (a, b):
        assert learner.update(_turns(learner, 8))["turns"] == 8


def test_flash_attention_2_when_installed(tiny_model):
    if not flash_attn_installed():
        with pytest.raises(ValueError, match="needs the flash-attn package"):
            _gpu_learner(tiny_model, attn_implementation="flash_attention_2")
        return
    learner = _gpu_learner(tiny_model, attn_implementation="auto")
    assert learner.placement.attn_implementation == "flash_attention_2"
    assert learner.update(_turns(learner, 8))["turns"] == 8


def test_processes_past_the_gpus_are_refused_before_anything_starts():
    from agora.stack.preflight import placement_problems
    from tests.stack_helpers import tiny_config

    many = torch.cuda.device_count() + 1
    cfg = tiny_config(trainer={"device": "cuda", "processes": many},
                      ppo={"batch_turns": 8 * many, "minibatch_turns": 8 * many})
    assert any("trainer.processes" in p for p in placement_problems(cfg))


@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason="a sharded learner needs 2 GPUs here (NCCL: one process per GPU)")
def test_two_gpus_compute_the_one_process_update(tiny_model, tmp_path, monkeypatch):
    """tests/integration/test_ppo_sharded.py's check, on GPUs: two processes over NCCL, fp32."""
    import json

    from tests import sharded_learner
    from tests.integration.test_ppo_sharded import _run_two_ranks

    monkeypatch.setenv("AGORA_TEST_DEVICE", "cuda")
    _run_two_ranks(tiny_model, tmp_path)
    sharded = json.loads((tmp_path / "stats.json").read_text())
    for name, ppo in sharded_learner.SCENARIOS:
        agent = sharded_learner.learner(tiny_model, ppo, scenario=name)
        single = agent.update(sharded_learner.turns(agent))
        for key in ("pg_loss", "vf_loss", "grad_norm", "kl"):
            if key in single:
                assert sharded[name][key] == pytest.approx(single[key], rel=1e-3, abs=1e-5)
