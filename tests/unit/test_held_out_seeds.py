"""Evaluation episodes and games play seeds training never plays: an env whose content follows
the seed (a research question, a negotiation's item pool, a Hanabi deck) must not be evaluated on
what it trained on."""

from __future__ import annotations

import random

import pytest

from agora.config.run import ConfigError, load_config
from agora.envs.hanabi import draw_order
from agora.envs.research import research_question
from agora.evaluation.seeds import HELD_OUT_SEEDS, held_out_seed
from agora.rollout.worker import episode_payload

ROOT = "configs/research.yaml"


def training_seeds(seed: int, episodes: range, config: str = ROOT) -> list[int]:
    cfg = load_config(config, [f"seed={seed}"])
    rng = random.Random(0)
    return [episode_payload(cfg, "run", i, rng, "redis://")["seed"] for i in episodes]


def test_evaluation_asks_other_questions_than_training_and_the_warm_start():
    trained = training_seeds(0, range(200))
    # The warm start numbers its demonstrations from 0 as well (agora.train.warm_start).
    seen = {research_question(s).question_id for s in [*trained, *range(200)]}
    evaluated = [held_out_seed(0, i) for i in range(200)]
    assert min(evaluated) >= HELD_OUT_SEEDS > max(trained)
    asked = [research_question(s).question_id for s in evaluated]
    # Before: evaluation episode i played training's seed i, every question one it trained on.
    # Now only chance repeats of its ~4,000 questions remain (4.5%).
    repeated = sum(q in seen for q in asked) / len(asked)
    assert repeated < 0.15, repeated
    assert held_out_seed(1000, 5) == HELD_OUT_SEEDS + 1005  # --seed moves within the range


def test_the_largest_run_seed_keeps_a_million_episodes_below_the_held_out_seeds():
    [last] = training_seeds(998, range(999_999, 1_000_000))
    assert last < HELD_OUT_SEEDS
    with pytest.raises(ConfigError, match="seed"):
        load_config(ROOT, ["seed=999"])


def test_evaluation_deals_hanabi_decks_training_never_dealt():
    trained = training_seeds(0, range(500), "configs/hanabi_selfplay.yaml")
    decks = {tuple(draw_order(s)) for s in trained}
    assert len(decks) == 500
    # Before: `agora eval`'s deal g was training's episode g, deck for deck.
    assert tuple(draw_order(trained[3])) == tuple(draw_order(3))
    evaluated = {tuple(draw_order(held_out_seed(0, g))) for g in range(200)}
    assert not evaluated & decks
