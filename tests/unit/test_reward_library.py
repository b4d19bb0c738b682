"""The reward service's logic used in-process (agora/rewards/service.py), and its settings from
the environment: the HTTP app (tests/integration/test_reward_service.py) is a thin layer over
exactly this."""

from __future__ import annotations

import pytest

from agora.config.base import ConfigError
from agora.rewards.schemas import ScoreRequest, VerifyRequest
from agora.rewards.service import RewardError, RewardService
from agora.rewards.settings import RewardSettings


def test_settings_come_from_the_environment_and_bad_values_name_the_variable():
    settings = RewardSettings.from_env({"AGORA_REWARD_BLEND": "0.25",
                                        "AGORA_SANDBOX_CONCURRENCY": "3"})
    assert (settings.blend, settings.sandbox_concurrency, settings.model) == (0.25, 3, None)
    assert RewardSettings.from_env({"AGORA_REWARD_BLEND": ""}).blend == 0.5  # compose's VAR=
    for env, name in [({"AGORA_REWARD_BLEND": "2"}, "AGORA_REWARD_BLEND"),
                      ({"AGORA_REWARD_BLEND": "nan"}, "AGORA_REWARD_BLEND"),
                      ({"AGORA_REWARD_BLEND": "half"}, "AGORA_REWARD_BLEND"),
                      ({"AGORA_SANDBOX_CONCURRENCY": "0"}, "AGORA_SANDBOX_CONCURRENCY")]:
        with pytest.raises(ConfigError, match=name):
            RewardSettings.from_env(env)


def test_a_game_is_replayed_in_process_and_bad_requests_carry_their_status():
    service = RewardService(RewardSettings())
    verdict = service.verify(VerifyRequest(env="tictactoe",
                                           actions=["[0]", "[3]", "[1]", "[4]", "[2]"]))
    assert verdict.finished and verdict.results == ["win", "loss"]
    with pytest.raises(RewardError) as unknown:
        service.verify(VerifyRequest(env="chess", actions=["e4"]))
    assert unknown.value.status == 422 and "unknown env 'chess'" in unknown.value.message
    with pytest.raises(RewardError) as no_model:
        service.score(ScoreRequest(question="2+2?", answers=["4"]))
    assert no_model.value.status == 422 and "AGORA_REWARD_MODEL" in no_model.value.message
