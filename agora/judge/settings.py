"""Judge configuration from the environment (the service's only configuration source, so the same
image runs locally, in compose and in k8s).

| variable | default | meaning |
|---|---|---|
| ``AGORA_JUDGE_BACKEND`` | ``rubric`` | default backend: ``rubric`` or ``llm`` |
| ``AGORA_JUDGE_BASE_URL`` | (none) | OpenAI-compatible server of the judge model; enables ``llm`` |
| ``AGORA_JUDGE_MODEL`` | ``base`` | model to ask for (the policy vLLM calls its base ``base``) |
| ``AGORA_JUDGE_API_KEY`` | (none) | sent as ``Authorization: Bearer ...`` |
| ``AGORA_JUDGE_MAX_TOKENS`` | ``512`` | generation budget per judge call |
| ``AGORA_JUDGE_CONSTRAINED`` | ``false`` | verdict and score lines only (vLLM structured outputs) |
| ``AGORA_JUDGE_LOGPROBS`` | ``false`` | verdicts from next-token probabilities (G-Eval) |
| ``AGORA_JUDGE_TIMEOUT_S`` | ``120`` | read timeout per judge call |
| ``AGORA_JUDGE_ATTEMPTS`` | ``3`` | tries per call on connection errors / 5xx |
| ``AGORA_JUDGE_CACHE_TTL_S`` | ``604800`` | verdict cache TTL (7 days) |
| ``REDIS_URL`` | (none) | verdict cache; unset or empty = no cache |

An empty variable counts as unset; a bad one stops the service with a ConfigError naming it
(agora/stack/envvars.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from agora.judge.cache import DEFAULT_TTL_S
from agora.serving.auth import vllm_api_key
from agora.stack.envvars import EnvSettings

if TYPE_CHECKING:
    from agora.config.run import RunConfig

PREFIX = "AGORA_JUDGE_"


class JudgeSettings(EnvSettings):
    """The judge service's settings: ``JudgeSettings.from_env()`` (or keyword arguments)."""

    model_config = SettingsConfigDict(env_prefix=PREFIX)

    backend: Literal["rubric", "llm"] = "rubric"
    base_url: str | None = None
    model: str = "base"
    api_key: str | None = Field(None, repr=False)
    max_tokens: int = Field(512, ge=1)
    constrained: bool = False
    logprobs: bool = False
    timeout_s: float = Field(120.0, gt=0)
    attempts: int = Field(3, ge=1)
    cache_ttl_s: int = Field(DEFAULT_TTL_S, ge=1)
    redis_url: str | None = Field(None, validation_alias="REDIS_URL")

    @model_validator(mode="after")
    def _llm_needs_a_server(self) -> JudgeSettings:
        if self.backend == "llm" and not self.base_url:
            raise ValueError(
                f"{PREFIX}BACKEND=llm needs {PREFIX}BASE_URL (an OpenAI-compatible server, e.g. "
                f"http://127.0.0.1:8000/v1) and usually {PREFIX}MODEL"
            )
        return self


def service_env(cfg: RunConfig, redis_url: str, vllm_key: str | None = None
                ) -> dict[str, str]:
    """The environment of a run's judge service (``agora up``'s and ``agora eval``'s): the run
    config's ``judge`` section in the variables above. ``redis_url`` "" means no verdict cache;
    ``vllm_key``: the run's policy servers' API key (default: AGORA_VLLM_API_KEY), sent to a
    judge model served by one of them, never to a ``judge.base_url`` elsewhere."""
    from agora.serving.vllm_server import SERVED_BASE_NAME

    env = {f"{PREFIX}BACKEND": cfg.judge.backend, f"{PREFIX}MAX_TOKENS": str(cfg.judge.max_tokens),
           f"{PREFIX}CONSTRAINED": str(cfg.judge.constrained).lower(),
           f"{PREFIX}LOGPROBS": str(cfg.judge.logprobs).lower(), "REDIS_URL": redis_url}
    if (url := cfg.judge_model_url()) is not None:
        env[f"{PREFIX}BASE_URL"] = url
        if not cfg.judge.base_url and (key := vllm_key or vllm_api_key()):
            env[f"{PREFIX}API_KEY"] = key
        # A judge on a policy server of the run asks for that server's base model.
        env[f"{PREFIX}MODEL"] = cfg.judge.served_model if cfg.judge.base_url else SERVED_BASE_NAME
    return env
