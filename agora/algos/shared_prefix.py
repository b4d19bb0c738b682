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
# What one more forward call costs, in token positions, when the groups are chosen: its
# dispatch over every layer and the lower matmul efficiency of a few rows. Measured with
# interleaved updates on SmolLM2-135M, 1 thread (2026-11-28): at 8, 32 Tic-Tac-Toe turns split
# into 7 groups to save 5% of the positions and the update ran 0.93x; at 32 they stay in the
# X / O groups, and real discussion batches still split by question and round (7-11 groups).
CALL_COST_TOKENS = 32

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


def prefix_groups(prompts: list[list[int]], lengths: list[int] | None = None
                  ) -> list[tuple[list[int], int]]:
    """Split rows into groups forwarded apart: ``[(row indices, shared prefix length)]``,
    chosen to forward the fewest tokens.

    A group forwards its shared prefix once, then every row's suffix padded to the group's
    longest row (``lengths``: each row's prompt + completion; default the prompts'). So
    grouping trades the prefix saved against the padding it adds, plus a fixed cost per
    forward call: a discussion batch mixes first-round prompts of ~60 tokens with second-round
    ones of ~130 under a ~50-token common prefix, and one group there pads away what the
    prefix saves. The groups are the best partition along the prompts' token trie: each node
    is forwarded either as one group or split by the token after its rows' common prefix
    (recursively), whichever forwards fewer tokens. Prefixes stop one token short of the
    group's shortest prompt, so every position that predicts an action lies in the suffix.
    """
    lengths = lengths if lengths is not None else [len(p) for p in prompts]

    def best(rows: list[int]) -> tuple[int, list[tuple[list[int], int]]]:
        members = [prompts[r] for r in rows]
        common = common_prefix_length(members)
        prefix = min(common, min(len(m) for m in members) - 1)
        if prefix < MIN_SHARED_TOKENS or len(rows) == 1:
            prefix = 0
        whole = forwarded_tokens([(rows, prefix)], lengths, CALL_COST_TOKENS)
        by_next: dict[int, list[int]] = defaultdict(list)
        for r in rows:
            by_next[prompts[r][common] if len(prompts[r]) > common else -1].append(r)
        if len(by_next) == 1:
            return whole, [(rows, prefix)]
        parts = [best(child) for child in by_next.values()]
        split = sum(cost for cost, _ in parts)
        if split < whole:
            return split, [group for _, groups in parts for group in groups]
        return whole, [(rows, prefix)]

    return best(list(range(len(prompts))))[1]


def forwarded_tokens(groups: list[tuple[list[int], int]], lengths: list[int],
                     call_cost: int = 0) -> int:
    """Token positions ``groups`` forward: per group its prefix once and each row's suffix
    padded to the group's longest row, plus ``call_cost`` per forward call."""
    total = 0
    for rows, prefix in groups:
        width = max(lengths[r] for r in rows)
        total += prefix + len(rows) * (width - prefix) + call_cost * (2 if prefix else 1)
    return total


def saved_share(groups: list[tuple[list[int], int]], lengths: list[int]) -> float:
    """The share of a plain forward's tokens (every row padded to the longest, one call) that
    forwarding ``groups`` does not forward."""
    plain = forwarded_tokens([(list(range(len(lengths))), 0)], lengths)
    return 1 - forwarded_tokens(groups, lengths) / plain


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
