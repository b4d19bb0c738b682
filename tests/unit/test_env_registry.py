"""The env registry (agora/envs/registry.py) is the one place env facts live: every env the
config accepts has a spec, and each fact in a spec holds for the real env, bots and gateway."""

from __future__ import annotations

import pytest

from agora.config.base import ConfigError
from agora.config.environment import environment_model
from agora.envs.base import TurnBasedEnv
from agora.envs.registry import ENV_METRICS, REGISTRY, SPECS, make_bot, make_env
from agora.gateway.episodes import DEFAULT_PLAY, SEAT_COUNTS
from agora.ops.metrics import exported_names, trainer_gauge_name
from tests.stack_helpers import tiny_config

# The smallest valid seating and payload of each built-in env, to build it from a config.
SEATING = {"tictactoe": 2, "hanabi": 2, "discussion": 2, "negotiation": 2, "story": 2,
           "code_debug": 2, "support": 3}
TASK = {"task_id": "t1", "kind": "math", "question": "What is 2 + 3?", "answer": "5"}


def test_specs_have_unique_names_and_the_config_accepts_exactly_them():
    assert len({s.name for s in SPECS}) == len(SPECS)
    for spec in SPECS:
        assert environment_model(spec.name).model_fields["name"].default == spec.name
    with pytest.raises(ConfigError, match="unknown environment 'chess'"):
        tiny_config(environment={"name": "chess", "seats": ["player"]})


@pytest.mark.parametrize("spec", [s for s in SPECS if s.name in SEATING], ids=lambda s: s.name)
def test_each_env_is_built_from_its_config_section_and_scored_by_its_named_scorer(spec):
    from agora.rollout.seating import build_env

    task = {"source": "jsonl", "path": "unused.jsonl", "format": "gsm8k"}
    extra = {"task": task} if spec.name == "discussion" else {}
    cfg = tiny_config(environment={"name": spec.name, "seats": ["player"] * SEATING[spec.name],
                                   "opponents": {"self": 1.0}, **extra},
                      reward={"verifier": spec.verifiers[0]})
    assert type(cfg.environment) is environment_model(spec.name)
    assert (cfg.environment.options is None) == (spec.options is None)
    env = build_env(cfg, {"seed": 3, "task": TASK})
    assert isinstance(env, TurnBasedEnv) and env.name == spec.name
    assert env.num_seats == SEATING[spec.name]
    assert (spec.load_scorer() is None) == (spec.scorer is None)
    # Written back out and read again, the section keeps its options (SerializeAsAny).
    again = tiny_config(environment=cfg.environment.model_dump(mode="json"),
                        reward={"verifier": spec.verifiers[0]})
    assert again.environment == cfg.environment


@pytest.mark.parametrize("spec", [s for s in SPECS if s.bots], ids=lambda s: s.name)
def test_a_games_seat_counts_and_bots_are_what_the_env_and_bots_accept(spec):
    low, high = spec.seats
    for seats in range(low, high + 1):
        assert make_env(spec.name, num_seats=seats).num_seats == seats
    for seats in (low - 1, high + 1):
        with pytest.raises(ValueError):
            make_env(spec.name, num_seats=seats)
    for bot in spec.bots:
        assert make_bot(bot) is not None


def test_the_gateway_plays_exactly_the_envs_with_a_default_play():
    playable = {s.name for s in SPECS if s.play is not None}
    assert playable == set(DEFAULT_PLAY) == set(SEAT_COUNTS)
    prefill, sampling = DEFAULT_PLAY["tictactoe"]
    assert (prefill, sampling.max_tokens, sampling.stop) == ("[", 6, ["]"])


def test_every_env_metric_is_exported_and_described():
    assert set(ENV_METRICS) == {s.name for s in SPECS if s.metrics}
    for spec in SPECS:
        for name, help_ in spec.metrics.items():
            assert trainer_gauge_name(name) in exported_names()
            assert help_.startswith(spec.name)
    assert REGISTRY["hanabi"].cooperative and not REGISTRY["tictactoe"].cooperative
