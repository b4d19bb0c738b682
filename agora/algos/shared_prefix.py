"""Forward a batch of turns whose prompts share a long prefix, computing that prefix once.

Why: an environment's prompts repeat the same instructions every turn (Tic-Tac-Toe's system
prompt is 51 of a turn's ~105 tokens), and the PPO update's cost is proportional to the tokens it
forwards. vLLM already reuses the prefix at rollout time (prefix caching); this does the same in
the trainer. The prefix runs once per group with batch size 1, its keys and values are
*expanded* (a view, no copy) to the group's size, and the suffixes attend to them. Gradients
flow back through the expanded cache into the single prefix computation, so the result (values
and gradients) equals a plain forward of the full sequences up to float rounding.

HF transformers has no batched shared-prefix training forward (its cache is built for
generation), hence this small module over its public ``DynamicCache``.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from transformers import DynamicCache

# Below this many shared tokens the extra prefix pass is not worth it.
MIN_SHARED_TOKENS = 8

# Share of a batch's tokens the prefix passes must save before they are used, per device type
# (``trainer.shared_prefix: auto``). Why it differs: the CPU is compute-bound, so forwarding
# fewer tokens pays almost at once. Measured with ``bench/ppo_update.py --sweep`` (SmolLM2-135M,
# 32 turns of ~160 tokens, 1 thread, 2026-11-25): tokens saved 5% -> update 1.14x faster, 9% ->
# 1.09x, 18% -> 1.22x, 36% -> 1.48x, 54% -> 2.12x; below 5% was not measured, so it stays
# plain. A GPU is launch-bound at these sizes: the prefix pass doubles the kernel launches,
# measured 0.49-0.79x on an H100 at 3.4k-17k tokens with ~40% saved, so a GPU never takes it
# by default (a device type missing here never does).
MIN_SAVED_SHARE = {"cpu": 0.05}


def common_prefix_length(rows: list[list[int]]) -> int:
    first = rows[0]
    limit = min(len(r) for r in rows)
    for i in range(limit):
        token = first[i]
        if any(r[i] != token for r in rows):
            return i
    return limit


def prefix_groups(prompts: list[list[int]]) -> list[tuple[list[int], int]]:
    """Split rows into groups that share a long prefix: ``[(row indices, prefix length)]``.

    Rows are first split on the token right after the whole batch's common prefix (for
    role-conditioned prompts that token is the role: "as X" / "as O"), then each group takes its
    own common prefix. Prefixes stop one token short of the group's shortest prompt, so every
    position that predicts an action lies in the suffix. One level of splitting is enough for
    prompts of the form "shared instructions + role + shared instructions + state"; if it would
    shatter the batch (more groups than half the rows) the batch stays one group.
    """
    global_len = common_prefix_length(prompts)
    by_next: dict[int, list[int]] = defaultdict(list)
    for row, prompt in enumerate(prompts):
        by_next[prompt[global_len] if len(prompt) > global_len else -1].append(row)
    groups = list(by_next.values())
    if len(groups) > max(1, len(prompts) // 2):
        groups = [list(range(len(prompts)))]
    result = []
    for rows in groups:
        members = [prompts[r] for r in rows]
        shared = min(common_prefix_length(members), min(len(m) for m in members) - 1)
        result.append((rows, shared if shared >= MIN_SHARED_TOKENS and len(rows) > 1 else 0))
    return result


def saved_share(groups: list[tuple[list[int], int]], lengths: list[int]) -> float:
    """The share of the rows' tokens that sharing ``groups``' prefixes does not forward."""
    saved = sum((len(rows) - 1) * prefix for rows, prefix in groups if prefix)
    return saved / max(1, sum(lengths))


def pays_off(groups: list[tuple[list[int], int]], lengths: list[int], device_type: str) -> bool:
    threshold = MIN_SAVED_SHARE.get(device_type)
    return threshold is not None and saved_share(groups, lengths) >= threshold


def hidden_states(
    body: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    prefix_len: int,
    **image_inputs: torch.Tensor,
) -> torch.Tensor:
    """Last hidden states ``[B, T, H]`` of right-padded rows whose first ``prefix_len`` tokens
    are identical. Positions inside the prefix are not computed (zeros): callers read only
    positions >= ``prefix_len``. ``image_inputs`` (a vision-language body's pixel inputs) go
    with whole rows only."""
    if prefix_len == 0:
        return body(input_ids=input_ids, attention_mask=attention_mask,
                    use_cache=False, **image_inputs).last_hidden_state
    if image_inputs:
        raise ValueError("a shared prefix forward takes no image inputs")
    batch, width = input_ids.shape
    prefix = body(input_ids=input_ids[:1, :prefix_len], use_cache=True).past_key_values
    shared = DynamicCache(ddp_cache_data=[
        (layer.keys.expand(batch, -1, -1, -1), layer.values.expand(batch, -1, -1, -1))
        for layer in prefix.layers
    ])
    suffix_len = width - prefix_len
    positions = torch.arange(prefix_len, width, device=input_ids.device).expand(
        batch, suffix_len)
    suffix_hidden = body(
        input_ids=input_ids[:, prefix_len:],
        attention_mask=attention_mask,
        past_key_values=shared,
        position_ids=positions,
        use_cache=True,
    ).last_hidden_state
    pad = suffix_hidden.new_zeros(batch, prefix_len, suffix_hidden.shape[-1])
    return torch.cat([pad, suffix_hidden], dim=1)
