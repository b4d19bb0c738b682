"""The env registry (agora/envs/registry.py) is the one place env facts live: every env the
config accepts has a spec, and each fact in a spec holds for the real env, bots and gateway."""

from __future__ import annotations

import typing

import pytest

from agora.agents.bots import make_bot
from agora.config.run import EnvironmentConfig
from agora.envs import make_env
from agora.envs.registry import ENV_METRICS, ENV_NAMES, REGISTRY, SPECS
from agora.gateway.episodes import DEFAULT_PLAY, SEAT_COUNTS, PlayableEnv
from agora.ops.metrics import exported_names, trainer_gauge_name


def test_every_env_the_config_accepts_has_exactly_one_spec():
    accepted = typing.get_args(EnvironmentConfig.model_fields["name"].annotation)
    assert sorted(accepted) == sorted(ENV_NAMES)
    assert len({s.name for s in SPECS}) == len(SPECS)


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
    assert set(typing.get_args(PlayableEnv)) == playable == set(DEFAULT_PLAY) == set(SEAT_COUNTS)
    prefill, sampling = DEFAULT_PLAY["tictactoe"]
    assert (prefill, sampling.max_tokens, sampling.stop) == ("[", 6, ["]"])


def test_every_env_metric_is_exported_and_described():
    assert set(ENV_METRICS) == {s.name for s in SPECS if s.metrics}
    for spec in SPECS:
        for name, help_ in spec.metrics.items():
            assert trainer_gauge_name(name) in exported_names()
            assert help_.startswith(spec.name)
    assert REGISTRY["hanabi"].cooperative and not REGISTRY["tictactoe"].cooperative
