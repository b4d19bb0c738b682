"""Agent turns -> the tensors of one PPO update, laid out on the host once, moved to the learner's
device in one go.

Why the index bookkeeping lives here, in Python lists: the update selects tokens of minibatch
rows, groups rows that share a prompt prefix and scatters per-token values into a [turns x
tokens] grid for GAE. Done with tensor ops on the device (``isin``, boolean masks, ``nonzero``,
``int()`` of a row length), each of those is a device -> host sync; on an H100 the update spent
most of its time waiting on them (GPU busy 6-7%). The collate step already walks every token on
the host, so it records every index the update will need, and the update only gathers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import torch

# Where batches are laid out before they move to the learner's device (explicit, so that no
# tensor lands on the default device by accident).
HOST = torch.device("cpu")


@dataclass
class TurnSample:
    """One agent turn, as the trainer learns from it."""

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    reward: float
    version: int = 0
    role: str = ""
    # Legal-action decoding: the completions vLLM restricted this turn to (None: free text).
    choices: list[str] | None = None
    # Samples of the same prompt (ppo.group_size episodes of one seed or task; the same role
    # and turn number): what grpo / rloo compare its reward with. None: a group of its own.
    group: str | None = None
    # The prompt's images (data URLs), for a vision-language learner (docs/vlm.md).
    images: list[str] = field(default_factory=list)


@dataclass
class Batch:
    """Right-padded rows plus flat per-action-token views (action tokens of row 0, then row
    1, ...). Tensors live on one device (``to``); the ``*_host`` lists never leave the host."""

    input_ids: torch.Tensor  # [B, T] right-padded
    attention_mask: torch.Tensor  # [B, T]
    pred_pos: torch.Tensor  # [N] position (within its row) of the logits predicting each action
    labels: torch.Tensor  # [N] the action token ids
    seq_of_token: torch.Tensor  # [N] which row each action token belongs to
    step_of_token: torch.Tensor  # [N] the token's index within its turn's completion
    is_last: torch.Tensor  # [N] the turn's last action token (where its reward lands)
    behaviour_logprobs: torch.Tensor  # [N]
    rewards: torch.Tensor  # [B]
    # [N, vocab] tokens each action could have been (legal-action decoding); None: any token.
    allowed: torch.Tensor | None
    prompts: list[list[int]]  # each turn's prompt tokens (to find shared prefixes)
    lengths_host: list[int]  # tokens per row
    first_token_host: list[int]  # flat index of each row's first action token
    actions_host: list[int]  # action tokens per row
    pred_pos_host: list[int]
    images_host: list[list[str]] = field(default_factory=list)  # each row's prompt images

    @property
    def size(self) -> int:
        return len(self.lengths_host)

    @property
    def max_actions(self) -> int:
        return max(self.actions_host)

    @property
    def device(self) -> torch.device:
        return self.input_ids.device

    def to(self, device: torch.device) -> Batch:
        moved = {f.name: getattr(self, f.name).to(device, non_blocking=True)
                 for f in fields(self) if isinstance(getattr(self, f.name), torch.Tensor)}
        return replace(self, **moved)

    def token_indices(self, rows: list[int]) -> list[int]:
        """Flat indices of the action tokens of ``rows``, in the order the rows are given."""
        out: list[int] = []
        for r in rows:
            out.extend(range(self.first_token_host[r], self.first_token_host[r]
                             + self.actions_host[r]))
        return out

    def index(self, values: list[int]) -> torch.Tensor:
        """A host list as an index tensor on the batch's device (one copy, no sync)."""
        host = torch.tensor(values, dtype=torch.long, device=HOST)
        return host.to(self.device, non_blocking=True)

    def to_grid(self, flat: torch.Tensor) -> torch.Tensor:
        """Per-token values [N] -> [B, max_actions], right-padded with zeros (GAE's layout)."""
        grid = flat.new_zeros(self.size, self.max_actions)
        grid[self.seq_of_token, self.step_of_token] = flat
        return grid

    def from_grid(self, grid: torch.Tensor) -> torch.Tensor:
        return grid[self.seq_of_token, self.step_of_token]


def collate(samples: list[TurnSample], pad_id: int,
            masks: list[torch.Tensor | None] | None = None) -> Batch:
    """The batch on the host (CPU tensors); ``masks`` (one per sample, from
    ``action_mask.ChoiceMasker``; None rows are unconstrained) become ``Batch.allowed``."""
    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in samples]
    input_ids = torch.full((len(samples), max(lengths)), pad_id, dtype=torch.long, device=HOST)
    attention_mask = torch.zeros((len(samples), max(lengths)), dtype=torch.long, device=HOST)
    pred_pos, labels, seq_of_token, step_of_token, is_last, behaviour = [], [], [], [], [], []
    first_token, actions = [], []
    for row, s in enumerate(samples):
        ids = s.prompt_ids + s.completion_ids
        input_ids[row, : len(ids)] = torch.tensor(ids, device=HOST)
        attention_mask[row, : len(ids)] = 1
        first_token.append(len(labels))
        actions.append(len(s.completion_ids))
        for k, token in enumerate(s.completion_ids):
            # The logits at position p predict token p+1: action k sits at len(prompt)+k.
            pred_pos.append(len(s.prompt_ids) + k - 1)
            labels.append(token)
            seq_of_token.append(row)
            step_of_token.append(k)
            is_last.append(k == len(s.completion_ids) - 1)
        behaviour.extend(s.behaviour_logprobs)
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        pred_pos=torch.tensor(pred_pos, dtype=torch.long, device=HOST),
        labels=torch.tensor(labels, dtype=torch.long, device=HOST),
        seq_of_token=torch.tensor(seq_of_token, dtype=torch.long, device=HOST),
        step_of_token=torch.tensor(step_of_token, dtype=torch.long, device=HOST),
        is_last=torch.tensor(is_last, dtype=torch.bool, device=HOST),
        behaviour_logprobs=torch.tensor(behaviour, dtype=torch.float32, device=HOST),
        rewards=torch.tensor([s.reward for s in samples], dtype=torch.float32, device=HOST),
        allowed=_stack_masks(samples, masks),
        prompts=[s.prompt_ids for s in samples],
        lengths_host=lengths,
        first_token_host=first_token,
        actions_host=actions,
        pred_pos_host=pred_pos,
        images_host=[s.images for s in samples],
    )


def _stack_masks(samples: list[TurnSample], masks: list[torch.Tensor | None] | None):
    if not masks or all(m is None for m in masks):
        return None
    vocab = next(m for m in masks if m is not None).shape[1]
    return torch.cat([m if m is not None else torch.ones(len(s.completion_ids), vocab,
                                                           dtype=torch.bool, device=HOST)
                      for s, m in zip(samples, masks, strict=True)])
