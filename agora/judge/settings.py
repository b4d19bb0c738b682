"""Judge configuration from the environment (the service's only configuration source, so the same
image runs locally, in compose and in k8s).

| variable | default | meaning |
|---|---|---|
| ``AGORA_JUDGE_BACKEND`` | ``rubric`` | default backend: ``rubric`` or ``llm`` |
| ``AGORA_JUDGE_BASE_URL`` | (none) | OpenAI-compatible server of the judge model; enables ``llm`` |
| ``AGORA_JUDGE_MODEL`` | ``base`` | model to ask for (the policy vLLM calls its base ``base``) |
| ``AGORA_JUDGE_API_KEY`` | (none) | sent as ``Authorization: Bearer ...`` |
| ``AGORA_JUDGE_MAX_TOKENS`` | ``512`` | generation budget per judge call |
| ``AGORA_JUDGE_TIMEOUT_S`` | ``120`` | read timeout per judge call |
| ``AGORA_JUDGE_ATTEMPTS`` | ``3`` | tries per call on connection errors / 5xx |
| ``AGORA_JUDGE_CACHE_TTL_S`` | ``604800`` | verdict cache TTL (7 days) |
| ``REDIS_URL`` | (none) | verdict cache; unset or empty = no cache |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agora.config.run import ConfigError
from agora.judge.cache import DEFAULT_TTL_S
from agora.stack.envvars import EnvReader

PREFIX = "AGORA_JUDGE_"


@dataclass(frozen=True)
class JudgeSettings:
    backend: str = "rubric"
    base_url: str | None = None
    model: str = "base"
    api_key: str | None = None
    max_tokens: int = 512
    timeout_s: float = 120.0
    attempts: int = 3
    cache_ttl_s: int = DEFAULT_TTL_S
    redis_url: str | None = None

    def __post_init__(self) -> None:
        if self.backend not in ("rubric", "llm"):
            raise ConfigError(f"{PREFIX}BACKEND must be 'rubric' or 'llm', not '{self.backend}'")
        if self.backend == "llm" and not self.base_url:
            raise ConfigError(
                f"{PREFIX}BACKEND=llm needs {PREFIX}BASE_URL (an OpenAI-compatible server, e.g. "
                f"http://127.0.0.1:8000/v1) and usually {PREFIX}MODEL"
            )
        if self.max_tokens < 1 or self.attempts < 1 or self.timeout_s <= 0 or self.cache_ttl_s < 1:
            raise ConfigError(
                f"{PREFIX}MAX_TOKENS, ATTEMPTS, TIMEOUT_S and CACHE_TTL_S must be positive"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> JudgeSettings:
        read = EnvReader(PREFIX, env)

        return cls(
            backend=read.get("BACKEND") or "rubric",
            base_url=read.get("BASE_URL"),
            model=read.get("MODEL") or "base",
            api_key=read.get("API_KEY"),
            max_tokens=int(read.number("MAX_TOKENS", int, 512)),
            timeout_s=float(read.number("TIMEOUT_S", float, 120.0)),
            attempts=int(read.number("ATTEMPTS", int, 3)),
            cache_ttl_s=int(read.number("CACHE_TTL_S", int, DEFAULT_TTL_S)),
            redis_url=read.raw("REDIS_URL"),
        )
