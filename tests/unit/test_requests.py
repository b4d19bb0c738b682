"""The one builder of vLLM request bodies (agora/serving/requests.py), against the fields vLLM's
OpenAI server documents: rollouts ask for token ids and logprobs, chat turns continue a prefill,
and legal-move decoding becomes ``structured_outputs.choice`` in both."""

from __future__ import annotations

from agora.config.agents import SamplingConfig
from agora.serving.requests import chat_request, completion_request

SAMPLING = SamplingConfig(temperature=0.7, top_p=0.9, max_tokens=6, stop=["]"])


def test_a_rollout_completion_returns_the_tokens_and_logprobs_the_learner_needs():
    body = completion_request("player", [1, 2, 3], SAMPLING)
    assert body["prompt"] == [1, 2, 3] and body["model"] == "player"
    assert (body["logprobs"], body["return_token_ids"]) == (0, True)
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.9, 6)
    assert body["stop"] == ["]"] and body["include_stop_str_in_output"] is True
    assert "structured_outputs" not in body and "seed" not in body
    legal = completion_request("player", [1], SAMPLING, choices=["4]", "8]"])
    assert legal["structured_outputs"] == {"choice": ["4]", "8]"]}


def test_a_chat_turn_continues_its_prefill_and_keeps_the_callers_messages():
    messages = [{"role": "user", "content": "your move"}]
    plain = chat_request("player", messages, SAMPLING)
    assert plain["messages"] == messages and "continue_final_message" not in plain
    body = chat_request("player", messages, SAMPLING, prefill="[", choices=["4]"])
    assert body["messages"] == [*messages, {"role": "assistant", "content": "["}]
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert body["structured_outputs"] == {"choice": ["4]"]}
    assert messages == [{"role": "user", "content": "your move"}]  # not mutated
    assert "logprobs" not in body
