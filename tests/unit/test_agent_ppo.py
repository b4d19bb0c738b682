"""``agents[].ppo``: one learner's own learning rate, KL coefficient, ... over the run's ``ppo:``
(agents of a multi-model run on different bases want different steps)."""

from __future__ import annotations

import pytest

from agora.algos.distributed import SINGLE
from agora.config.base import ConfigError
from agora.config.training import AgentPPOConfig, PPOConfig, ppo_for_agent
from agora.train.learners import build_learners, learner_placements
from tests.stack_helpers import bandit_samples, tiny_config


def test_an_agent_overrides_only_the_fields_it_sets():
    run = PPOConfig(learning_rate=5e-4, kl_coef=0.01, clip_range=0.2, batch_turns=32)
    own = ppo_for_agent(run, AgentPPOConfig(learning_rate=1e-4, kl_coef=0.05))
    assert (own.learning_rate, own.kl_coef) == (1e-4, 0.05)
    assert (own.clip_range, own.batch_turns, own.value_learning_rate) == (
        0.2, 32, run.value_learning_rate)
    assert ppo_for_agent(run, None) is run
    assert (run.learning_rate, run.kl_coef) == (5e-4, 0.01)  # the run's own is untouched


@pytest.mark.parametrize("fields, named", [
    ({"learning_rte": 1e-4}, "agents.1.ppo.learning_rte"),
    ({"learning_rate": 0}, "agents.1.ppo.learning_rate"),
    ({"kl_coef": -1}, "agents.1.ppo.kl_coef"),
    # Batching is the trainer's, for every agent at once: not a per-agent field.
    ({"batch_turns": 8}, "agents.1.ppo.batch_turns"),
])
def test_a_bad_per_agent_field_is_named(fields, named):
    agents = [{"name": "alice", "base": "tiny"}, {"name": "bob", "base": "tiny", "ppo": fields}]
    with pytest.raises(ConfigError) as err:
        tiny_config(agents=agents, environment={"name": "tictactoe", "seats": ["alice", "bob"]})
    assert named in str(err.value)


def test_each_learner_steps_at_its_own_learning_rate(tiny_model):
    agents = [{"name": "alice", "base": "tiny", "lora_rank": 8, "lora_alpha": 16},
              {"name": "bob", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
               "ppo": {"learning_rate": 5e-6, "kl_coef": 0.0}}]
    cfg = tiny_config(agents=agents, environment={"name": "tictactoe", "seats": ["alice", "bob"]},
                      ppo={"learning_rate": 5e-3, "kl_coef": 0.01, "batch_turns": 8,
                           "minibatch_turns": 8})
    learners = build_learners(cfg, learner_placements(cfg, SINGLE), SINGLE)
    alice, bob = learners["alice"], learners["bob"]
    assert (alice.ppo.learning_rate, alice.ppo.kl_coef) == (5e-3, 0.01)
    assert (bob.ppo.learning_rate, bob.ppo.kl_coef) == (5e-6, 0.0)
    assert bob.ppo.batch_turns == alice.ppo.batch_turns == 8

    moved = {}
    for name, learner in learners.items():
        good, bad = (learner.tokenizer.encode(c, add_special_tokens=False)[0] for c in "AB")
        before = [p.detach().clone() for p in learner.policy_params]
        stats = learner.update(bandit_samples(learner, good, bad, 8))
        assert stats["lr"] == pytest.approx(learner.ppo.learning_rate)
        moved[name] = max((p.detach() - b).abs().max().item()
                          for p, b in zip(learner.policy_params, before, strict=True))
    # Adam's first step moves each weight by about its learning rate: a thousand times less.
    assert moved["alice"] > 100 * moved["bob"] > 0
