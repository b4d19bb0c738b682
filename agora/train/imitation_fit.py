"""How well an SFT adapter learnt its demonstrations, read the way the policy server plays them.

The SFT's loss and TRL's token accuracy average over every completion token, and most of those
are certain (a Tic-Tac-Toe move's closing bracket, the end token), so a loss of 0.19 per token
hid a coin flip on the move itself (tictactoe-15-warm-every). This reads, per demonstrated turn,
the tokens the model must choose after the env's assistant prefill (``[`` for a game move):

- *probability*: of the whole demonstrated answer, the product of its tokens' probabilities at
  temperature 1; what sampling at the agents' training temperature plays;
- *greedy match*: whether each of those tokens is the most likely one given the ones before,
  i.e. whether greedy decoding (``eval.temperature: 0``, ``agora play``) writes the demonstration.

Written by hand: TRL reports the token accuracy of training batches only, and nothing scores
a prompt / completion pair after the assistant prefill the way vLLM serves it.
"""

from __future__ import annotations

import math

import torch

from agora.serving.client import render_prompt

# Enough to read a game's table (Tic-Tac-Toe has 335 positions for one demonstrator) in about
# half a minute on a CPU; larger example sets are read at evenly spaced examples.
MAX_READ = 400


def answer_ids(tokenizer, example: dict, prefill: str) -> tuple[list[int], list[int]]:
    """(context ids, answer ids): the chat-rendered prompt with the prefill, and the tokens of
    the demonstrated answer after it, as the policy server would continue."""
    messages = example["prompt"]
    content = example["completion"][0]["content"]
    context = render_prompt(tokenizer, messages, prefill)
    full = render_prompt(tokenizer, messages, content if content.startswith(prefill)
                         else prefill + content)
    shared = 0  # where the two tokenizations part (a prefill merged with the move's token)
    while shared < min(len(context), len(full)) and context[shared] == full[shared]:
        shared += 1
    return full[:shared], full[shared:]


def imitation_fit(model, tokenizer, examples: list[dict], prefill: str = "",
                  max_read: int = MAX_READ) -> dict:
    """Mean probability of the demonstrated answer and the share of answers greedy decoding
    reproduces, over ``examples`` (prompt / completion chat pairs; at most ``max_read`` of
    them, evenly spaced)."""
    if not examples:
        raise ValueError("imitation_fit: no examples")
    step = max(1, math.ceil(len(examples) / max_read))
    return score_answers(model, [answer_ids(tokenizer, e, prefill) for e in examples[::step]])


@torch.no_grad()
def score_answers(model, pairs: list[tuple[list[int], list[int]]]) -> dict:
    """``imitation_fit`` over (context ids, answer ids) pairs; empty answers are skipped."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    logprobs_read, matches = [], 0
    for context, answer in pairs:
        if not answer:
            continue
        ids = torch.tensor([context + answer], device=device)
        logits = model(input_ids=ids).logits[0, len(context) - 1:-1].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        target = torch.tensor(answer, device=device)
        logprobs_read.append(logprobs.gather(1, target[:, None]).sum().item())
        matches += bool((logits.argmax(dim=-1) == target).all())
    if was_training:
        model.train()
    read = len(logprobs_read)
    if not read:
        return {"read": 0, "mean_probability": None, "mean_logprob": None, "greedy_match": None}
    return {"read": read,
            "mean_probability": round(sum(math.exp(lp) for lp in logprobs_read) / read, 4),
            "mean_logprob": round(sum(logprobs_read) / read, 4),  # nats per answer
            "greedy_match": round(matches / read, 4)}
