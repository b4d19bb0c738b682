"""Reward service configuration from the environment (as every service: one image runs in the
embedded stack, compose and k8s).

| variable | default | meaning |
|---|---|---|
| ``AGORA_REWARD_MODEL`` | (none) | the learned verifier's folder (``agora verifier train``) |
| ``AGORA_REWARD_BLEND`` | ``0.5`` | default weight of the rule reward in mode "blend" |
| ``AGORA_SANDBOX_CONCURRENCY`` | CPU count | code runs at the same time, over all requests |
| ``AGORA_SANDBOX_ISOLATION`` | ``full`` | the weakest sandbox isolation to run code under |

The sandbox is probed at start-up: where it cannot reach ``AGORA_SANDBOX_ISOLATION`` (full:
network, mount and PID namespaces, as root or through user namespaces; network; seccomp),
``/health`` answers 503 saying why and every request that would run code is refused with 503,
instead of scoring code 0 because it "failed".

The learned verifier is loaded once, in the background at start-up (``/health`` is up at once;
the first scoring request waits for it). Unset: ``/v1/score`` and non-rule modes answer 422
naming the variable (503 if it is set but failed to load).

An empty variable counts as unset; a bad one stops the service with a ConfigError naming it
(agora/stack/envvars.py).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from agora.stack.envvars import EnvSettings


class RewardSettings(EnvSettings):
    """The reward service's settings: ``RewardSettings.from_env()`` (or keyword arguments)."""

    model_config = SettingsConfigDict(env_prefix="AGORA_REWARD_")

    model: str | None = None
    blend: float = 0.5
    sandbox_concurrency: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1,
                                     validation_alias="AGORA_SANDBOX_CONCURRENCY")

    sandbox_isolation: Literal["full", "network", "seccomp"] = Field(
        "full", validation_alias="AGORA_SANDBOX_ISOLATION")

    @field_validator("blend")
    @classmethod
    def _blend_is_a_weight(cls, blend: float) -> float:
        # A bad blend must stop the service, not turn every blended reward into NaN.
        if not 0.0 <= blend <= 1.0:  # NaN fails this too
            raise ValueError("must be a number in [0, 1]")
        return blend
