"""The rollout worker's environment settings (agora/rollout/settings.py)."""

from __future__ import annotations

import pytest

from agora.config.base import ConfigError
from agora.rollout.settings import DEFAULT_REDIS_URL, WorkerSettings


def test_defaults_and_the_redis_url_fallback_order():
    assert WorkerSettings.from_env({}).redis_url == DEFAULT_REDIS_URL
    assert WorkerSettings.from_env({}).metrics_port is None
    assert WorkerSettings.from_env({"REDIS_URL": "redis://r:1/0"}).redis_url == "redis://r:1/0"
    both = {"REDIS_URL": "redis://r:1/0", "AGORA_REDIS_URL": "redis://a:2/0"}
    assert WorkerSettings.from_env(both).redis_url == "redis://a:2/0"
    # compose writes an unset variable as VAR=: empty counts as unset
    empty = {"AGORA_REDIS_URL": "", "AGORA_VISIBILITY_TIMEOUT": "", "REDIS_URL": "redis://r:1/0"}
    settings = WorkerSettings.from_env(empty)
    assert (settings.redis_url, settings.visibility_timeout) == ("redis://r:1/0", 60)


@pytest.mark.parametrize(("env", "message"), [
    ({"AGORA_VISIBILITY_TIMEOUT": "soon"}, "AGORA_VISIBILITY_TIMEOUT must be a number, not 'soon'"),
    ({"AGORA_VISIBILITY_TIMEOUT": "2"}, "AGORA_VISIBILITY_TIMEOUT must be at least 5, not '2'"),
    ({"AGORA_WORKER_METRICS_PORT": "70000"},
     "AGORA_WORKER_METRICS_PORT must be at most 65535, not '70000'"),
])
def test_a_bad_value_is_named_with_its_variable(env, message):
    with pytest.raises(ConfigError, match=message):
        WorkerSettings.from_env(env)
