"""Several LoRA learners on one copy of their base (``trainer.share_base``), on the tiny model:
one base in memory, and every learner updates, saves and resumes exactly as it would alone."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from agora.algos.compute import ComputeConfig
from agora.algos.distributed import SINGLE
from agora.algos.ppo import PPOLearner, TurnSample
from agora.algos.shared_base import SharedBase
from agora.config.agents import AgentConfig
from agora.config.training import PPOConfig
from agora.train.learners import build_learners, learner_placements
from tests.stack_helpers import FP32, bandit_samples, randomize_lora_b, tiny_config

PPO = PPOConfig(learning_rate=5e-3, batch_turns=8, minibatch_turns=4, epochs=2, kl_coef=0.01)


def _agent(name: str, **fields) -> AgentConfig:
    return AgentConfig(name=name, base="m", lora_rank=8, lora_alpha=16, **fields)


def _bandit(learner: PPOLearner, n: int = 8) -> list[TurnSample]:
    """A one-token bandit ("A" +1, "B" -1), behaviour logprobs from the learner itself."""
    good, bad = (learner.tokenizer.encode(c, add_special_tokens=False)[0] for c in "AB")
    return bandit_samples(learner, good, bad, n)


def _lora_state(learner: PPOLearner) -> dict[str, torch.Tensor]:
    """The learner's adapter weights, named without the adapter (comparable across names)."""
    return {name.replace(f".{learner.adapter}.", "."): param.detach().clone()
            for name, param in learner._saved_parameters()}


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-5, atol=1e-6, msg=name)


@pytest.fixture
def pair(tiny_model):
    shared = SharedBase()
    alice = PPOLearner(tiny_model, _agent("alice"), PPO, compute=FP32, shared_base=shared)
    bob = PPOLearner(tiny_model, _agent("bob"), PPO, compute=FP32, shared_base=shared)
    return shared, alice, bob


def test_learners_of_one_base_hold_one_copy_of_it(pair, tiny_model):
    shared, alice, bob = pair
    assert alice.model is bob.model and len(shared.models) == 1
    assert shared.adapters[next(iter(shared.models))] == ["agent_alice", "agent_bob"]
    # Each optimizer holds its own adapter's weights and nothing else.
    assert not {id(p) for p in alice.policy_params} & {id(p) for p in bob.policy_params}
    assert len(alice.policy_params) == len(bob.policy_params) > 0
    base_weights = sum(p.numel() for n, p in alice.model.named_parameters() if "lora_" not in n)
    alone = PPOLearner(tiny_model, _agent("carol"), PPO, compute=FP32)
    assert base_weights == sum(p.numel() for n, p in alone.model.named_parameters()
                               if "lora_" not in n)
    with pytest.raises(ValueError, match="already on this base"):
        PPOLearner(tiny_model, _agent("bob"), PPO, compute=FP32, shared_base=shared)
    # A compiled learner keeps a base of its own (adapter switches under torch.compile are
    # not tested), as does a full-weight one.
    compiled = PPOLearner(tiny_model, _agent("dave"), PPO, shared_base=shared,
                          compute=ComputeConfig(device="cpu", dtype="fp32", compile=True))
    full = PPOLearner(tiny_model, _agent("erin", finetune="full"), PPO, compute=FP32,
                      shared_base=shared)
    for own in (compiled, full):
        assert not own.shared and own.model is not alice.model
    assert shared.sharers(next(iter(shared.models))) == 2


def test_a_shared_learner_updates_exactly_as_it_would_alone(pair, tiny_model):
    _, alice, bob = pair
    alone = PPOLearner(tiny_model, _agent("alice"), PPO, compute=FP32)
    _assert_same(_lora_state(alice), _lora_state(alone))  # the same initial adapter
    bob_before = _lora_state(bob)
    samples = _bandit(alone)
    for learner in (alice, alone):
        stats = learner.update([TurnSample(s.prompt_ids, s.completion_ids,
                                           list(s.behaviour_logprobs), s.reward)
                                for s in samples])
        assert stats["pg_loss"] != 0.0
    _assert_same(_lora_state(alice), _lora_state(alone))
    assert any(not torch.equal(a, b) for a, b in zip(
        _lora_state(alice).values(), bob_before.values(), strict=True))  # alice moved...
    _assert_same(_lora_state(bob), bob_before)  # ...and bob's adapter did not
    # Bob still speaks as the base (a fresh adapter), whatever adapter ran last.
    probe = _bandit(alone, 1)[0]
    base = PPOLearner(tiny_model, _agent("base"), PPO, compute=FP32)
    assert bob.sequence_logprobs(probe) == pytest.approx(base.sequence_logprobs(probe),
                                                         abs=1e-6)
    assert alice.sequence_logprobs(probe) == pytest.approx(alone.sequence_logprobs(probe),
                                                           abs=1e-6)


def test_each_learner_saves_its_own_adapter_as_vllm_reads_it(pair, tiny_model, tmp_path):
    _, alice, bob = pair
    randomize_lora_b(alice.model, seed=1)  # every adapter on the base gets random B
    alice.update(_bandit(alice))
    folder = alice.save_policy(tmp_path / "alice")
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "adapter_config.json",
                                                        "adapter_model.safetensors"]
    saved = load_file(str(folder / "adapter_model.safetensors"))
    assert saved and all("agent_" not in key for key in saved)  # no adapter name in keys
    assert json.loads((folder / "adapter_config.json").read_text())["r"] == 8
    # Loaded as another learner's starting adapter, it is alice's policy.
    probe = _bandit(alice, 1)[0]
    warm = PPOLearner(tiny_model, _agent("warm", init_adapter=str(folder)), PPO, compute=FP32)
    assert warm.sequence_logprobs(probe) == pytest.approx(alice.sequence_logprobs(probe),
                                                          abs=1e-6)
    assert bob.save_policy(tmp_path / "bob") != folder
    assert load_file(str(tmp_path / "bob" / "adapter_model.safetensors")).keys() == saved.keys()


def test_a_checkpoint_of_a_shared_learner_resumes_on_a_shared_base(pair, tiny_model, tmp_path):
    _, alice, bob = pair
    alice.update(_bandit(alice))
    probe = _bandit(alice, 1)[0]
    trained = alice.sequence_logprobs(probe)
    alice.save_checkpoint(tmp_path / "ckpt", {"version": 1})

    shared = SharedBase()
    fresh_bob = PPOLearner(tiny_model, _agent("bob"), PPO, compute=FP32, shared_base=shared)
    fresh = PPOLearner(tiny_model, _agent("alice"), PPO, compute=FP32, shared_base=shared)
    assert fresh.sequence_logprobs(probe) != pytest.approx(trained, abs=1e-6)
    assert fresh.load_checkpoint(tmp_path / "ckpt") == {"version": 1}
    assert fresh.updates == 1
    assert fresh.sequence_logprobs(probe) == pytest.approx(trained, abs=1e-6)
    assert fresh_bob.sequence_logprobs(probe) == pytest.approx(bob.sequence_logprobs(probe),
                                                               abs=1e-6)


def test_warm_started_learners_keep_their_own_frozen_references(tiny_model, tmp_path):
    adapters = {}
    for name, seed in (("alice", 1), ("bob", 2)):
        source = PPOLearner(tiny_model, _agent(name), PPO, compute=FP32)
        randomize_lora_b(source.model, seed=seed)
        adapters[name] = source.save_policy(tmp_path / name)
    shared = SharedBase()
    learners = {name: PPOLearner(tiny_model, _agent(name, init_adapter=str(path),
                                                    kl_reference="init"),
                                 PPO, compute=FP32, shared_base=shared)
                for name, path in adapters.items()}
    assert {"reference_agent_alice", "reference_agent_bob"} <= set(
        learners["alice"].model.peft_config)
    probe = _bandit(learners["alice"], 1)[0]
    for learner in learners.values():
        # Before any update the KL to its own reference is exactly 0: the reference the
        # forward switched to is this learner's starting adapter, not the other's.
        stats = learner.update(_bandit(learner))
        assert stats["kl"] == pytest.approx(0.0, abs=1e-6)
    assert (learners["alice"].sequence_logprobs(probe)
            != pytest.approx(learners["bob"].sequence_logprobs(probe), abs=1e-3))


def test_the_trainer_shares_a_base_unless_told_not_to(tiny_model):
    agents = [{"name": n, "base": "tiny", "lora_rank": 8, "lora_alpha": 16}
              for n in ("alice", "bob")]
    for share, copies in ((True, 1), (False, 2)):
        cfg = tiny_config(agents=agents, environment={"name": "tictactoe",
                                                      "seats": ["alice", "bob"]},
                          trainer={"share_base": share})
        learners = build_learners(cfg, learner_placements(cfg, SINGLE), SINGLE)
        assert len({id(learner.model) for learner in learners.values()}) == copies
        assert all(learner.shared == share for learner in learners.values())
