"""Our side of the policy-server contract, against a real vLLM CPU server on tiny-random.

- vLLM's behaviour logprobs for a LoRA agent match a PEFT forward pass of the same adapter (the
  PPO ratio is only meaningful if they do), at temperature 1 and below it (vLLM reports the
  logprobs of the tempered distribution it sampled from, the learner scores logits / T), and the
  first PPO ratio is 1. Tolerance: 2e-3 nats per token, both sides fp32.
- A hot-swap (``load_inplace``) changes the agent's answers, and requests in flight complete.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
import torch

from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig, SamplingConfig
from agora.config.training import PPOConfig
from agora.serving.client import PolicyAdmin, PolicyClient, PolicyServerError
from tests.stack_helpers import FP32, randomize_lora_b

LOGPROB_ATOL = 2e-3
MESSAGES = [
    [{"role": "user", "content": "Pick a cell of the board."}],
    [{"role": "system", "content": "You play Tic-Tac-Toe."}, {"role": "user", "content": "Move?"}],
    [{"role": "user", "content": "Say something short about the weather today, please."}],
]


def perturbed_learner(tiny_model: str, seed: int, layers: list[int] | None = None,
                      temperature: float = 1.0, ppo: PPOConfig | None = None) -> PPOLearner:
    agent = AgentConfig(name="alice", base="m", lora_rank=8, lora_alpha=16, lora_layers=layers,
                        sampling=SamplingConfig(temperature=temperature))
    learner = PPOLearner(tiny_model, agent, ppo or PPOConfig(), seed=seed,
                         compute=FP32)
    randomize_lora_b(learner.model, seed)
    return learner


@pytest.fixture(scope="module")
def admin(vllm_tiny) -> PolicyAdmin:
    return PolicyAdmin(vllm_tiny[0])


def client(url: str, learner: PPOLearner, name: str, **sampling) -> PolicyClient:
    cfg = SamplingConfig(max_tokens=8, stop=[], **sampling)
    return PolicyClient(url, name, learner.tokenizer, cfg)


@pytest.mark.parametrize("layers", [None, [1]], ids=["all-layers", "top-layer-only"])
def test_vllm_logprobs_match_peft_forward_of_same_adapter(
    vllm_tiny, admin, tiny_model, tmp_path, layers
):
    url, _ = vllm_tiny
    learner = perturbed_learner(tiny_model, seed=1, layers=layers)
    admin.load_adapter("alice", str(learner.save_adapter(tmp_path / "alice")))
    policy = client(url, learner, "alice", temperature=1.0)
    checked = 0
    for i, messages in enumerate(MESSAGES):
        gen = asyncio.run(policy.generate(messages, prefill="["))
        assert gen.completion_token_ids, "vLLM returned no tokens"
        ours = learner.sequence_logprobs(
            TurnSample(gen.prompt_token_ids, gen.completion_token_ids, gen.logprobs, 0.0)
        )
        diff = (torch.tensor(ours) - torch.tensor(gen.logprobs)).abs().max().item()
        assert diff < LOGPROB_ATOL, f"prompt {i}: max |Δlogp| = {diff:.2e}"
        checked += len(ours)
    assert checked >= 3


def test_at_temperature_0_7_the_learner_scores_what_vllm_sampled_and_the_first_ratio_is_1(
    vllm_tiny, admin, tiny_model, tmp_path
):
    url, _ = vllm_tiny
    ppo = PPOConfig(batch_turns=6, minibatch_turns=6, epochs=1, kl_coef=0.02)
    learner = perturbed_learner(tiny_model, seed=6, temperature=0.7, ppo=ppo)
    admin.load_adapter("tempered", str(learner.save_adapter(tmp_path / "tempered")))
    policy = client(url, learner, "tempered", temperature=0.7)
    samples = []
    for messages in MESSAGES * 2:
        gen = asyncio.run(policy.generate(messages, prefill="["))
        samples.append(TurnSample(gen.prompt_token_ids, gen.completion_token_ids, gen.logprobs,
                                  reward=float(len(samples) % 2)))
    vllm_logp = torch.tensor([x for s in samples for x in s.behaviour_logprobs])
    ours = torch.tensor([x for s in samples for x in learner.sequence_logprobs(s)])
    assert (ours - vllm_logp).abs().max().item() < LOGPROB_ATOL
    # The same adapter scored at T = 1 (what the learner did before) is a different policy.
    untempered = perturbed_learner(tiny_model, seed=6, temperature=1.0, ppo=ppo)
    raw = torch.tensor([x for s in samples for x in untempered.sequence_logprobs(s)])
    assert (raw - vllm_logp).abs().max().item() > 50 * LOGPROB_ATOL
    # One minibatch, one epoch: the ratio is taken before the step, so it is exactly 1.
    stats = learner.update(samples)
    assert stats["ratio"] == pytest.approx(1.0, abs=2e-3)
    assert stats["clipfrac"] == pytest.approx(0.0)


def test_adapter_changes_answers_and_base_differs(vllm_tiny, admin, tiny_model, tmp_path):
    """Sanity for the next test: with a perturbed adapter, greedy answers differ from base."""
    url, _ = vllm_tiny
    learner = perturbed_learner(tiny_model, seed=2)
    admin.load_adapter("bob", str(learner.save_adapter(tmp_path / "bob")))
    adapter = client(url, learner, "bob", temperature=0.0)
    base = client(url, learner, "base", temperature=0.0)
    texts = [asyncio.run(c.generate(MESSAGES[0])).completion_token_ids for c in (adapter, base)]
    assert texts[0] != texts[1]


def test_hot_swap_changes_answers_while_in_flight_requests_complete(
    vllm_tiny, admin, tiny_model, tmp_path
):
    url, _ = vllm_tiny
    v1 = perturbed_learner(tiny_model, seed=3)
    v2 = perturbed_learner(tiny_model, seed=4)
    admin.load_adapter("carol", str(v1.save_adapter(tmp_path / "v1")))
    greedy = client(url, v1, "carol", temperature=0.0)
    before = [asyncio.run(greedy.generate(m)).completion_token_ids for m in MESSAGES]

    async def swap_during_long_requests() -> list[httpx.Response]:
        long = client(url, v1, "carol", temperature=1.0)
        long.sampling = SamplingConfig(max_tokens=96, stop=[], temperature=1.0)
        tasks = [asyncio.create_task(long.generate(MESSAGES[2])) for _ in range(6)]
        await asyncio.sleep(0.3)
        await asyncio.to_thread(admin.load_adapter, "carol", str(v2.save_adapter(tmp_path / "v2")))
        return await asyncio.gather(*tasks)

    finished = asyncio.run(swap_during_long_requests())
    assert all(g.completion_token_ids for g in finished)

    after = [asyncio.run(greedy.generate(m)).completion_token_ids for m in MESSAGES]
    assert before != after
    # And the new answers are v2's: greedy tokens under v2 score higher under v2 than under v1.
    sample = TurnSample(
        asyncio.run(greedy.generate(MESSAGES[0])).prompt_token_ids, after[0], [], 0.0
    )
    assert sum(v2.sequence_logprobs(sample)) > sum(v1.sequence_logprobs(sample))


def test_unknown_adapter_is_a_clear_error(vllm_tiny, tiny_model):
    url, _ = vllm_tiny
    learner = perturbed_learner(tiny_model, seed=5)
    with pytest.raises(PolicyServerError, match="HTTP 404|does not exist|not found"):
        asyncio.run(client(url, learner, "nobody", temperature=0.0).generate(MESSAGES[0]))
