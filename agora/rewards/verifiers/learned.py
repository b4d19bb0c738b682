"""The learned verifier: a sequence classifier (one logit) that scores how likely an answer to a
question is right, trained with TRL's RewardTrainer on answers the rule verifiers labelled
(see ``agora.rewards.verifiers.learned_train``) and served by the reward service's ``/v1/score``.

Training and serving must feed the model the very same token ids, so both go through
``encode``: the question's start, the answer's end (where its final answer is) and a fixed
closing question. The fixed suffix matters because a causal classifier pools the *last*
non-padding token: ending every input on the same words gives that token the same job in every
input (read back and judge), whatever the answer's length or how it was cut.

torch and transformers are imported only when a model is loaded: the reward service imports this
module at start-up and must stay cheap when no learned verifier is configured.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

PROMPT = "Question: {question}\n\nAnswer: "
SUFFIX = "\n\nIs this answer correct?"
META_FILE = "agora_verifier.json"
DEFAULT_MAX_LENGTH = 384
MIN_MAX_LENGTH = 32
SCORE_BATCH = 16
log = logging.getLogger(__name__)


class VerifierUnavailable(RuntimeError):
    """No learned verifier can be used (none configured, or it failed to load)."""


def ensure_pad_token(tokenizer: PreTrainedTokenizerBase) -> None:
    """Batches need a pad token; causal LM tokenizers often have none, so borrow EOS."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token


def encode(
    tokenizer: PreTrainedTokenizerBase, question: str, answer: str, max_length: int
) -> list[int]:
    """The classifier's input ids for (question, answer), at most ``max_length`` long.

    When too long, the answer keeps its *end* (the final answer) and at least half the budget;
    the question keeps its *start*. Truncating here rather than in TRL: RewardTrainer's
    ``max_length`` drops over-long pairs instead of cutting them, which would silently remove
    the long (often wrong) answers from training.
    """
    if max_length < MIN_MAX_LENGTH:
        raise ValueError(f"max_length must be >= {MIN_MAX_LENGTH}, got {max_length}")
    head = tokenizer(PROMPT.format(question=question), add_special_tokens=False)["input_ids"]
    body = tokenizer(answer, add_special_tokens=False)["input_ids"]
    tail = tokenizer(SUFFIX, add_special_tokens=False)["input_ids"]
    budget = max_length - len(tail)
    if len(head) + len(body) > budget:
        keep = max(budget - len(head), budget // 2)
        body = body[-keep:]
        head = head[: budget - len(body)]
    return head + body + tail


def probability(score: float) -> float:
    """sigmoid(score): the classifier's P(right); written to never overflow."""
    if score >= 0:
        return 1.0 / (1.0 + math.exp(-score))
    z = math.exp(score)
    return z / (1.0 + z)


def read_meta(path: Path) -> dict[str, Any]:
    meta_path = path / META_FILE
    if not meta_path.is_file():
        return {}
    try:
        meta = json.loads(meta_path.read_text())
    except ValueError as err:
        raise ValueError(f"{meta_path}: invalid JSON ({err})") from None
    return meta if isinstance(meta, dict) else {}


class LearnedVerifier:
    """A loaded classifier. ``score`` is serialised by a lock: on a small CPU box concurrent
    forward passes only fight over the same cores, and one at a time keeps latency bounded."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, max_length: int
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> LearnedVerifier:
        """Load a folder written by ``agora verifier train`` (or any 1-label classifier)."""
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        folder = Path(path).expanduser()
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"{folder}: not a model folder (no config.json)")
        meta = read_meta(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        ensure_pad_token(tokenizer)
        model = AutoModelForSequenceClassification.from_pretrained(
            folder, dtype=torch.float32, local_files_only=True
        )
        if model.config.num_labels != 1:
            raise ValueError(f"{folder}: a verifier has one output, this model has "
                             f"{model.config.num_labels} labels")
        model.config.pad_token_id = tokenizer.pad_token_id
        model.eval()
        return cls(model, tokenizer, int(meta.get("max_length", DEFAULT_MAX_LENGTH)))

    def score(self, question: str, answers: Sequence[str]) -> list[float]:
        """One raw score (logit) per answer; higher = more likely right."""
        return self.score_pairs([(question, a) for a in answers])

    def score_pairs(self, items: Sequence[tuple[str, str]]) -> list[float]:
        """Scores of (question, answer) items with different questions (evaluation)."""
        encoded = [encode(self.tokenizer, q, a, self.max_length) for q, a in items]
        return self.score_ids(encoded)

    def score_ids(self, encoded: Sequence[list[int]]) -> list[float]:
        """Scores of already encoded inputs, right-padded in batches of ``SCORE_BATCH``."""
        import torch

        pad = self.tokenizer.pad_token_id
        scores: list[float] = []
        with self._lock, torch.inference_mode():
            for start in range(0, len(encoded), SCORE_BATCH):
                batch = encoded[start:start + SCORE_BATCH]
                width = max(len(ids) for ids in batch)
                ids = torch.full((len(batch), width), pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, seq in enumerate(batch):
                    ids[row, :len(seq)] = torch.tensor(seq, dtype=torch.long)
                    mask[row, :len(seq)] = 1
                logits = self.model(input_ids=ids, attention_mask=mask).logits
                scores += [float(x) for x in logits[:, 0].tolist()]
        return scores


class LazyVerifier:
    """The service's handle on its learned verifier: loaded on first use, once, even when
    several request threads ask at the same time. A failed load is remembered, so every
    request gets the same clear message instead of retrying a multi-second load."""

    def __init__(self, path: str | None) -> None:
        self.path = path or None
        self._lock = threading.Lock()
        self._verifier: LearnedVerifier | None = None
        self._error: str | None = None

    @property
    def configured(self) -> bool:
        return self.path is not None

    def warm(self) -> None:
        """Load now (the service's start-up thread); a failure is kept for requests to report."""
        try:
            self.get()
            log.info("learned verifier loaded from %s", self.path)
        except VerifierUnavailable as err:
            log.error("%s", err)

    def get(self) -> LearnedVerifier:
        if self._verifier is not None:
            return self._verifier
        if self.path is None:
            raise VerifierUnavailable(
                "no learned verifier is configured: start the reward service with "
                "AGORA_REWARD_MODEL=<folder written by `agora verifier train`>"
            )
        with self._lock:
            if self._verifier is None and self._error is None:
                try:
                    self._verifier = LearnedVerifier.load(self.path)
                except Exception as err:  # any load failure is reported, never a 500
                    self._error = (f"the learned verifier at AGORA_REWARD_MODEL={self.path} "
                                   f"could not be loaded: {type(err).__name__}: {err}")
        if self._verifier is None:
            raise VerifierUnavailable(self._error or "the learned verifier is not loaded")
        return self._verifier
