"""The seeds evaluation plays, which training never plays.

An episode's content is a function of its seed (a research question, a negotiation's item pool,
a planted bug, a Hanabi deck, a scripted bot's dice), and training numbers its episodes 0, 1,
2, ... (``cfg.seed * 1_000_003 + index`` in agora.rollout.worker), as a warm start numbers its
demonstrations. Evaluated on those seeds, a policy is asked what it was trained on: the one SFT
researcher solved 80% of seeds 0-49, its own demonstrations, and 47% of seeds 1000-1149. So
evaluation episode or game ``i`` plays seed ``HELD_OUT_SEEDS + --seed + i``, a range training
never reaches (``RunConfig.seed`` is bounded for it).
"""

from __future__ import annotations

# Evaluation seeds start here; training's (RunConfig.seed * 1_000_003 + episode index) and a
# warm start's (its episode index) stay below it. Below 2**31 with room to spare: every env
# takes it as a seed (numpy's generators want < 2**32).
HELD_OUT_SEEDS = 1_000_000_000


def held_out_seed(seed: int, episode: int) -> int:
    """The seed evaluation episode (or game) ``episode`` plays (``seed``: ``agora eval
    --seed``)."""
    return HELD_OUT_SEEDS + seed + episode
