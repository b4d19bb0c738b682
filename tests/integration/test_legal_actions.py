"""Legal-action decoding (``sampling.legal_actions_only``), against the real vLLM CPU server.

The contract: vLLM samples only one of the env's legal actions (structured outputs ``choice``)
and returns logprobs normalised over the tokens its grammar allowed; the learner rebuilds those
masks (agora/algos/action_mask.py) so its logprobs match vLLM's, and PPO's ratio starts at 1.
"""

from __future__ import annotations

import asyncio
import math
import random
import uuid

import pytest
import redis
import torch

from agora.algos.action_mask import ChoiceMasker, choice_grammar, stop_token_ids
from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig, SamplingConfig
from agora.config.run import parse_config
from agora.config.training import PPOConfig
from agora.envs.base import legal_completions
from agora.envs.hanabi import Hanabi
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import episode_payload, play
from agora.serving.client import PolicyAdmin, PolicyClient
from agora.serving.weights import adapter_dir
from tests.stack_helpers import FP32, session_servers_config

LOGPROB_ATOL = 2e-3  # as tests/integration/test_policy_vllm.py: fp32 on both sides


def hanabi_midgame(seed: int = 3, moves: int = 4) -> Hanabi:
    """A position with plays, discards and hints all legal (an info token is left)."""
    env = Hanabi(num_players=2)
    env.reset(seed)
    for _ in range(moves):
        env.step(next(a for a in env.legal_actions() if a.startswith("[Reveal]")))
    return env


def perturbed_learner(tiny_model: str) -> PPOLearner:
    agent = AgentConfig(name="hanabi", base="m", lora_rank=8, lora_alpha=16)
    learner = PPOLearner(tiny_model, agent, PPOConfig(), seed=4,
                         compute=FP32)
    gen = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, param in learner.model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * 0.2)
    return learner


def test_choice_grammar_is_the_one_vllm_compiles():
    from vllm.v1.structured_output.utils import choice_as_grammar

    choices = ["Play] 0", 'say "hi"', "back\\slash", "tab\there", "new\nline", "bell\x07"]
    assert choice_grammar(choices) == choice_as_grammar(choices)


def test_masks_follow_the_choices_and_refuse_other_tokens(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    stops = stop_token_ids(tok, tiny_model)
    assert stops == [tok.eos_token_id]
    masker = ChoiceMasker(tok, len(tok), stops)
    choices = ["Play] 0", "Play] 1", "Discard] 0"]
    ids = tok.encode("Play] 1", add_special_tokens=False) + stops
    allowed = masker.allowed(choices, ids)
    assert allowed.shape == (len(ids), len(tok))
    assert all(bool(allowed[k, t]) for k, t in enumerate(ids))
    # The first step allows the first token of every choice, but not a random word.
    firsts = {tok.encode(c, add_special_tokens=False)[0] for c in choices}
    assert all(bool(allowed[0, t]) for t in firsts)
    assert not allowed[0, tok.encode(" hello", add_special_tokens=False)[0]]
    # After the whole action only a stop token may follow.
    assert allowed[-1].nonzero().flatten().tolist() == stops
    with pytest.raises(ValueError, match="outside the choice grammar"):
        masker.allowed(choices, tok.encode("Pass", add_special_tokens=False))


def test_vllm_samples_only_legal_actions_and_its_logprobs_match_the_masked_learner(
        vllm_tiny, tiny_model, tmp_path):
    url, _ = vllm_tiny
    learner = perturbed_learner(tiny_model)
    PolicyAdmin(url).load_adapter("hanabi", str(learner.save_adapter(tmp_path / "hanabi")))
    policy = PolicyClient(url, "hanabi", learner.tokenizer,
                          SamplingConfig(max_tokens=40, stop=["\n"], legal_actions_only=True))
    env = hanabi_midgame()
    choices = legal_completions(env, "[")
    assert choices and len(choices) >= 10 and all(not c.startswith("[") for c in choices)
    seen = set()
    for _ in range(6):
        gen = asyncio.run(policy.generate(env.observation(env.current_seat), prefill="[",
                                          choices=choices))
        assert gen.text in choices, gen.text
        seen.add(gen.text)
        sample = TurnSample(gen.prompt_token_ids, gen.completion_token_ids, gen.logprobs, 0.0,
                            choices=choices)
        ours = torch.tensor(learner.sequence_logprobs(sample))
        diff = (ours - torch.tensor(gen.logprobs)).abs().max().item()
        assert diff < LOGPROB_ATOL, f"{gen.text!r}: max |Δlogp| = {diff:.2e}"
        # Without the mask the learner would score the same tokens nats lower: PPO's ratio
        # would read every constrained turn as far off-policy.
        free = torch.tensor(learner.sequence_logprobs(
            TurnSample(gen.prompt_token_ids, gen.completion_token_ids, gen.logprobs, 0.0)))
        assert (ours - free).sum().item() > 1.0
    assert len(seen) >= 2, "a random model should not always pick the same action"


def test_config_refuses_legal_actions_only_for_free_text_envs():
    raw = {
        "models": {"m": {"model": "tiny-random"}},
        "agents": [{"name": "a", "base": "m", "sampling": {"legal_actions_only": True}}],
        "environment": {"name": "discussion", "seats": ["a"],
                        "task": {"source": "reasoning_gym", "name": "basic_arithmetic"}},
    }
    with pytest.raises(Exception) as err:
        parse_config(raw, "t")
    assert "agents.a.sampling.legal_actions_only" in str(err.value)
    assert "free text" in str(err.value)


def test_legal_only_hanabi_episodes_are_all_legal_and_train_at_ratio_one(
        vllm_tiny, reward_url, redis_url, tiny_model, tmp_path):
    cfg = session_servers_config(
        vllm_tiny[0], reward_url, redis_url,
        agents=[{"name": "player", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 40, "stop": ["\n"], "legal_actions_only": True}}],
        environment={"name": "hanabi", "seats": ["player", "player"], "prefill": "[",
                     "opponents": {"self": 1.0}},
        ppo={"kl_coef": 0.0, "epochs": 1, "batch_turns": 8, "minibatch_turns": 8},
        trainer={"pin_cpus": False, "nice": 0},
    )
    learner = PPOLearner(tiny_model, cfg.agent("player"), cfg.ppo, compute=cfg.trainer)
    path = learner.save_adapter(adapter_dir(tmp_path, "player", 0))
    PolicyAdmin(cfg.policy_url("player")).load_adapter("player", str(path))

    run_id = f"legal-{uuid.uuid4().hex[:6]}"
    rng = random.Random(0)
    for index in range(1, 4):
        assert play(episode_payload(cfg, run_id, index, rng, redis_url)) == "added"
    client = redis.Redis.from_url(redis_url)
    records = [EpisodeRecord.model_validate_json(f[b"record"])
               for _, f in client.xrange(EpisodeStream(client, run_id).keys.stream)]
    turns = [t for r in records for t in r.turns]
    # A random model writes noise when free; restricted, every move is legal and the games end
    # by the rules (fuses or deck), never by forfeit.
    assert len(turns) >= 6 and all(t.legal for t in turns)
    assert all(t.choices and t.text.removeprefix("[") in t.choices for t in turns)
    assert all("illegal" not in r.results for r in records)

    # Rewards spread over +-1: three random games often all score 0, and with all-zero rewards
    # (and the zero-initialised critic) every advantage is 0, so nothing could move below.
    samples = [TurnSample(t.prompt_token_ids, t.completion_token_ids, t.behaviour_logprobs,
                          t.reward + (1.0 if i % 2 else -1.0), choices=t.choices)
               for i, t in enumerate(turns)]
    stats = learner.update(samples)
    # Same weights as the ones that sampled: the masked ratio is 1 up to fp noise.
    assert stats["ratio"] == pytest.approx(1.0, abs=1e-3)
    assert stats["clipfrac"] == 0.0 and stats["entropy"] > 0.0
    assert "off_grammar_turns" not in stats and "nonfinite_steps_skipped" not in stats
    # Masked tokens (p = 0, logp = -inf) must not send nan gradients into the adapter: the
    # weights stay finite, and they moved.
    lora = {n: p.detach().clone() for n, p in learner.model.named_parameters() if p.requires_grad}
    assert all(torch.isfinite(p).all() for p in lora.values())
    again = learner.update(samples)
    assert math.isfinite(again["pg_loss"]) and again["entropy"] > 0.0
    assert "nonfinite_steps_skipped" not in again
    moved = [not torch.equal(p, dict(learner.model.named_parameters())[n]) for n, p in lora.items()]
    assert any(moved)
    assert all(torch.isfinite(p).all() for p in learner.model.parameters())
