"""Reward service configuration from the environment (as every service: one image runs in the
embedded stack, compose and k8s).

| variable | default | meaning |
|---|---|---|
| ``AGORA_REWARD_MODEL`` | (none) | the learned verifier's folder (``agora verifier train``) |
| ``AGORA_REWARD_BLEND`` | ``0.5`` | default weight of the rule reward in mode "blend" |
| ``AGORA_SANDBOX_CONCURRENCY`` | CPU count | code runs at the same time, over all requests |

The learned verifier is loaded once, in the background at start-up (``/health`` is up at once;
the first scoring request waits for it). Unset: ``/v1/score`` and non-rule modes answer 422
naming the variable (503 if it is set but failed to load).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from agora.config.run import ConfigError
from agora.stack.envvars import EnvReader


@dataclass(frozen=True)
class RewardSettings:
    model: str | None = None
    blend: float = 0.5
    sandbox_concurrency: int = field(default_factory=lambda: os.cpu_count() or 1)

    def __post_init__(self) -> None:
        # A bad blend must stop the service, not turn every blended reward into NaN.
        if not 0.0 <= self.blend <= 1.0:  # NaN fails this too
            raise ConfigError(f"AGORA_REWARD_BLEND must be a number in [0, 1], got {self.blend}")
        if self.sandbox_concurrency < 1:
            raise ConfigError("AGORA_SANDBOX_CONCURRENCY must be at least 1, got "
                              f"{self.sandbox_concurrency}")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RewardSettings:
        read = EnvReader("AGORA_", env)
        return cls(model=read.get("REWARD_MODEL"),
                   blend=float(read.number("REWARD_BLEND", float, 0.5)),
                   sandbox_concurrency=int(read.number("SANDBOX_CONCURRENCY", int,
                                                      os.cpu_count() or 1)))
