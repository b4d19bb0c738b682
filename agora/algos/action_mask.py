"""The learner's side of legal-action decoding: which tokens vLLM let the policy choose from.

With ``sampling.legal_actions_only`` the rollout asks vLLM for one of the env's legal actions
(structured outputs ``choice``), so the policy is the model's distribution *restricted* to token
paths that spell a legal action. vLLM applies that grammar's token mask to the logits before it
computes the logprobs it returns (v1 sampler, ``raw_logprobs`` mode; measured: the tokens a
choice forces come back with logprob 0.0), so its behaviour logprobs are normalised over the
allowed tokens only. PPO's ratio compares them with the learner's logprobs, so the learner must
normalise over the same tokens, or every constrained turn would look off-policy.

Why xgrammar and not a mask written here: it is the backend that computed vLLM's masks. The same
choice grammar (built the way vLLM builds it), the same tokenizer vocabulary and the same stop
tokens give the same allowed set at every step, including non-canonical tokenizations of an
action (``P`` ``l`` ``a`` ``y`` for ``Play``) and the end-of-sequence step.
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch


def choice_grammar(choices: list[str]) -> str:
    """The EBNF grammar vLLM compiles for ``structured_outputs: {choice: [...]}``: one literal
    per choice. Quotes, backslashes and control characters are escaped the same way."""
    escapes = {"\\": r"\\", '"': r"\"", "\n": r"\n", "\r": r"\r", "\t": r"\t"}

    def escape(ch: str) -> str:
        if ch in escapes:
            return escapes[ch]
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            return f"\\u{ord(ch):04x}"
        return ch

    literals = ('"' + "".join(escape(ch) for ch in choice) + '"' for choice in choices)
    return "root ::= " + " | ".join(literals)


def stop_token_ids(tokenizer, model_path: str) -> list[int]:
    """The ids that end a constrained answer, as vLLM collects them: the tokenizer's EOS plus
    the ``eos_token_id`` of the model's generation config."""
    from transformers import GenerationConfig

    ids = {tokenizer.eos_token_id} if tokenizer.eos_token_id is not None else set()
    if (Path(model_path) / "generation_config.json").exists():
        extra = GenerationConfig.from_pretrained(model_path).eos_token_id
        ids.update([extra] if isinstance(extra, int) else (extra or []))
    return sorted(ids)


class ChoiceMasker:
    """Per completion token, the boolean mask of the tokens vLLM allowed at that step."""

    def __init__(self, tokenizer, vocab_size: int, stop_ids: list[int]) -> None:
        import xgrammar

        self._xgr = xgrammar
        self.vocab_size = vocab_size
        self.stop_ids = stop_ids
        info = xgrammar.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self._bit = torch.arange(32, dtype=torch.int32)

    @functools.lru_cache(maxsize=256)  # noqa: B019 - one masker per learner, kept for the run
    def _compiled(self, choices: tuple[str, ...]):
        return self._compiler.compile_grammar(choice_grammar(list(choices)))

    def allowed(self, choices: list[str], completion_ids: list[int]) -> torch.Tensor:
        """``[len(completion_ids), vocab]`` bool: row k is what vLLM let token k be.

        Raises ValueError if the completion leaves the grammar: then it was not sampled under
        these choices and no mask would make its logprobs comparable."""
        matcher = self._xgr.GrammarMatcher(self._compiled(tuple(choices)),
                                           override_stop_tokens=self.stop_ids)
        bitmask = self._xgr.allocate_token_bitmask(len(completion_ids), self.vocab_size)
        for k, token in enumerate(completion_ids):
            matcher.fill_next_token_bitmask(bitmask, k)
            if not matcher.accept_token(token):
                raise ValueError(f"token {token} at step {k} is outside the choice grammar")
        # Unpack the int32 words (bit b of word w = token 32*w + b) into one bool per token.
        bits = (bitmask.unsqueeze(-1) >> self._bit) & 1
        return bits.reshape(len(completion_ids), -1)[:, : self.vocab_size].bool()
