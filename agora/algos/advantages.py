"""Advantages: GAE over each turn's tokens from per-token rewards, then whitening; or, without
a critic, each turn's reward against its group's (GRPO, RLOO).

Both run as whole-tensor operations on the learner's device. GAE is a reverse scan over the
*columns* of a [turns x tokens] grid (one vector step per token position, as TRL and CleanRL
do), not over every token of the batch: the old per-token Python loop took 76 ms of a 315 ms
update on an H100 for 17k tokens, and was 3x slower on GPU tensors than on CPU ones.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation within each turn.

    ``rewards`` and ``values`` are [turns, tokens], right-padded with zeros past each turn's
    last token: the value after a turn's last token is 0, and padding (reward 0, value 0) keeps
    the running advantage at 0 until the scan reaches the turn's real tokens.
    Returns (advantages, returns), same shape."""
    advantages = torch.zeros_like(rewards)
    last_adv = rewards.new_zeros(rewards.shape[0])
    next_value = rewards.new_zeros(rewards.shape[0])
    for t in range(rewards.shape[1] - 1, -1, -1):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last_adv = delta + gamma * lam * last_adv
        advantages[:, t] = last_adv
        next_value = values[:, t]
    return advantages, advantages + values


def whiten_by_group(x: torch.Tensor, group: torch.Tensor, groups: int | None = None,
                    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
    """Normalise each group's values on their own (role-conditioned advantages; one group of
    zeros = whiten the whole batch); a group of one value is left as it is. ``groups`` (the
    number of group ids, known on the host) avoids a device sync to find it. ``reduce`` sums a
    tensor over the learner's processes (agora/algos/distributed.py) when ``x`` is one
    process's share: count, mean and variance are then those of the whole batch."""
    if groups is None:
        groups = int(group.max()) + 1 if group.numel() else 0
    reduce = reduce or (lambda t: t)
    sums = x.new_zeros(2, groups)
    sums[0].index_add_(0, group, torch.ones_like(x))
    sums[1].index_add_(0, group, x)
    count, total = reduce(sums)
    centred = x - (total / count.clamp(min=1))[group]
    squares = reduce(x.new_zeros(groups).index_add_(0, group, centred**2))
    var = squares / (count - 1).clamp(min=1)
    whitened = centred / (var.sqrt()[group] + 1e-8)
    return torch.where(count[group] >= 2, whitened, x)


def _group_rows(groups: Sequence[Hashable | None]) -> list[list[int]]:
    """Each group's row indices; a None group is a group of its own."""
    members: dict[Hashable, list[int]] = {}
    for i, group in enumerate(groups):
        members.setdefault(("single", i) if group is None else group, []).append(i)
    return list(members.values())


def group_advantages(rewards: Sequence[float], groups: Sequence[Hashable | None],
                     kind: str) -> list[float]:
    """Critic-free advantages of turns from their groups (samples of one prompt).

    ``rloo``: reward - the mean of the group's other rewards (REINFORCE leave-one-out; an
    unbiased baseline). ``grpo``: (reward - group mean) / group std (DeepSeekMath's GRPO; std
    with Bessel's correction, 0 when every reward is equal). Both sum to 0 over a group. A turn
    alone in its group (None, or its group's other samples landed in another batch) has no
    baseline and gets 0: it pushes the policy nowhere rather than by its raw reward. Host-side
    lists: a batch has tens of turns, and the result is one number per turn.
    """
    out = [0.0] * len(rewards)
    for rows in _group_rows(groups):
        n = len(rows)
        if n < 2:
            continue
        values = [float(rewards[i]) for i in rows]
        total = sum(values)
        mean = total / n
        if kind == "rloo":
            for i, r in zip(rows, values, strict=True):
                out[i] = r - (total - r) / (n - 1)
        elif kind == "grpo":
            std = (sum((r - mean) ** 2 for r in values) / (n - 1)) ** 0.5
            for i, r in zip(rows, values, strict=True):
                out[i] = (r - mean) / (std + 1e-6) if std > 0 else 0.0
        else:
            raise ValueError(f"unknown group advantage '{kind}' (grpo or rloo)")
    return out


def informative_turns(rewards: Sequence[float], groups: Sequence[Hashable | None]
                      ) -> list[bool]:
    """Which turns come from a group with a signal: False for every turn of a group whose
    rewards are all equal and for a turn alone in its group, the turns ``group_advantages``
    gives 0 whatever happens (DAPO's dynamic sampling keeps only the others;
    ``ppo.filter_groups``)."""
    keep = [False] * len(rewards)
    for rows in _group_rows(groups):
        values = {float(rewards[i]) for i in rows}
        if len(rows) >= 2 and max(values) - min(values) > 1e-9:
            for i in rows:
                keep[i] = True
    return keep


def learning_signal(rewards: torch.Tensor, advantages: torch.Tensor, returns: torch.Tensor,
                    values: torch.Tensor, turn_advantages: Sequence[float] | None
                    ) -> dict[str, torch.Tensor]:
    """What the policy gradient had to work with in one update: the numbers that say why a run
    does not learn (issue 16's per-recipe write-ups read them from metrics.jsonl).

    * ``reward_std``, ``reward_nonzero``: turn rewards that never differ (or are all 0) carry no
      signal, whatever the advantage estimator.
    * ``adv_abs``: mean |advantage| per token before whitening (whitening scales any noise up).
    * ``explained_var`` (critic): 1 - Var(returns - values) / Var(returns); near 0 or below,
      the critic's baseline removes nothing and GAE is REINFORCE with extra noise.
    * ``adv_zero`` (grpo / rloo, ``turn_advantages`` given): the share of turns whose group all
      scored alike, which teach nothing.
    """
    zero = rewards.new_zeros(())
    out = {
        "reward_std": rewards.std(unbiased=False) if rewards.numel() > 1 else zero,
        "reward_nonzero": (rewards != 0).float().mean(),
        "adv_abs": advantages.abs().mean(),
    }
    if turn_advantages is None:
        # On the device, no branch on a device value: one more host sync per update would
        # show on a GPU (tests/integration/test_ppo_device.py counts them).
        spread = returns.var(unbiased=False)
        explained = 1 - (returns - values).var(unbiased=False) / spread.clamp_min(1e-8)
        out["explained_var"] = torch.where(spread > 1e-8, explained, zero)
    else:
        out["adv_zero"] = rewards.new_tensor(
            sum(abs(a) < 1e-9 for a in turn_advantages) / max(len(turn_advantages), 1))
    return out
