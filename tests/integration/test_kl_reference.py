"""PPO's KL reference after a warm start (``agents[].kl_reference``): with ``init`` the policy
is held to the adapter it started from (a second, frozen adapter), with ``base`` to the base
model. The warm-started negotiator lost its deals to the base reference (98% -> 1%): the
penalty paid it to forget its SFT."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agora.algos.ppo import REFERENCE_ADAPTER, PPOLearner
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from tests.integration.test_ppo_device import _turns
from tests.stack_helpers import FP32

PPO = {"kl_coef": 0.05, "epochs": 2, "batch_turns": 10, "minibatch_turns": 5,
       "learning_rate": 5e-2}


def _learner(model: str, **agent) -> PPOLearner:
    config = AgentConfig(name="a", base="m", lora_rank=8, lora_alpha=16, **agent)
    return PPOLearner(model, config, PPOConfig(**PPO), compute=FP32)


@pytest.fixture(scope="module")
def warm_adapter(tiny_model, tmp_path_factory) -> Path:
    """An adapter some training moved away from the base (a stand-in for an SFT warm start)."""
    learner = _learner(tiny_model)
    for _ in range(3):
        learner.update(_turns(learner, 10))
    return learner.save_adapter(tmp_path_factory.mktemp("warm") / "adapter")


def _adapter_weights(learner: PPOLearner, adapter: str) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in learner.model.named_parameters()
            if f".{adapter}." in name}


def test_init_reference_is_the_warm_start_and_stays_frozen(tiny_model, warm_adapter, tmp_path):
    learner = _learner(tiny_model, init_adapter=str(warm_adapter))
    reference_before = _adapter_weights(learner, REFERENCE_ADAPTER)
    assert reference_before, "no reference adapter was made"
    trainable = [name for name, p in learner.model.named_parameters() if p.requires_grad]
    assert trainable and all(".default." in name for name in trainable)

    # Behaviour logprobs are the warm start's own: the policy is its reference, KL 0.
    first = learner.update(_turns(learner, 10))
    assert first["kl"] == pytest.approx(0.0, abs=1e-5)
    second = learner.update(_turns(learner, 10))
    assert abs(second["kl"]) > 1e-4  # the policy moved; the reference did not

    # After two updates (each switching to the reference and back) only the trained adapter
    # trains, and the reference holds the warm start's weights.
    assert [n for n, p in learner.model.named_parameters() if p.requires_grad] == trainable
    for name, weight in _adapter_weights(learner, REFERENCE_ADAPTER).items():
        torch.testing.assert_close(weight, reference_before[name], rtol=0, atol=0)
    saved = learner.save_adapter(tmp_path / "served")
    assert not (saved / REFERENCE_ADAPTER).exists()  # what vLLM loads: the trained adapter only
    served, warm = load_file(str(saved / "adapter_model.safetensors")), load_file(
        str(warm_adapter / "adapter_model.safetensors"))
    assert sorted(served) == sorted(warm)
    assert any(not torch.equal(served[k], warm[k]) for k in warm)


def test_base_reference_measures_the_distance_from_the_base(tiny_model, warm_adapter):
    learner = _learner(tiny_model, init_adapter=str(warm_adapter), kl_reference="base")
    assert REFERENCE_ADAPTER not in learner.model.peft_config
    stats = learner.update(_turns(learner, 10))
    assert abs(stats["kl"]) > 1e-3  # the warm start differs from the base: penalised from the start


def test_checkpoint_resume_keeps_the_warm_start_reference(tiny_model, warm_adapter, tmp_path):
    trained = _learner(tiny_model, init_adapter=str(warm_adapter))
    trained.update(_turns(trained, 10))
    trained.save_checkpoint(tmp_path / "ckpt", {"at": 1})
    resumed = _learner(tiny_model, init_adapter=str(warm_adapter))
    resumed.load_checkpoint(tmp_path / "ckpt")
    turns = _turns(trained, 10)
    # Same policy and same reference on both sides: the same KL.
    assert resumed.update(turns)["kl"] == pytest.approx(trained.update(turns)["kl"], rel=1e-4)
