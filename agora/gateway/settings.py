"""Gateway settings from the environment (its only configuration source besides the run
config, so the same image runs in the embedded stack, compose and k8s).

| variable | default | meaning |
|---|---|---|
| ``AGORA_CONFIG`` | (required) | run config YAML: which agents exist, where their servers are |
| ``AGORA_GATEWAY_TIMEOUT_S`` | ``120`` | budget of each upstream (vLLM) read; over it: 504 |
| ``AGORA_GATEWAY_MAX_BODY_BYTES`` | ``1048576`` | request body limit; over it: 413 |
| ``AGORA_GATEWAY_MAX_IMAGE_BYTES`` | ``262144`` | each image part, decoded; over it: 413 |
| ``AGORA_GATEWAY_MAX_IMAGE_SIDE`` | ``2048`` | each image's width and height; over it: 413 |
| ``AGORA_GATEWAY_REQUIRE_KEYS`` | ``0`` | ``1``: API keys required even before any exists |
| ``AGORA_GATEWAY_DEFAULT_RATE`` | ``600`` | requests/min of a key without ``--rate`` (0: none) |
| ``AGORA_GATEWAY_KEY_PEPPER`` | (none) | secret mixed into key hashes (same value for the CLI) |
| ``AGORA_GATEWAY_EPISODE_TTL_S`` | ``3600`` | idle episodes are forgotten after this |
| ``AGORA_GATEWAY_RUNS_DIR`` | ``runs`` | folder of the runs started through ``/v1/runs`` |
| ``AGORA_GATEWAY_STOP_GRACE_S`` | ``60`` | a stopped run gets this long to exit before SIGKILL |
| ``AGORA_GATEWAY_ALLOWED_ORIGINS`` | (none) | comma-separated sites whose pages may call it |
| ``AGORA_REDIS_URL`` / ``REDIS_URL`` | (none) | keys, rate limits, episodes, runs, versions |
| ``AGORA_RUN_ID``, ``AGORA_RUN_DIR`` | (none) | the run whose versions and metrics to serve |

The launcher sets ``AGORA_CONFIG``, ``AGORA_REDIS_URL``, ``AGORA_RUN_ID`` and ``AGORA_RUN_DIR``.
Without Redis the gateway still proxies chat completions; the routes that need state answer
503 naming the variable. ``AGORA_CONFIG`` is read here but required by the server only
(services/gateway/app.py), so a container's environment can be checked without the file.

An empty variable counts as unset; a bad one stops the gateway with a ConfigError naming it
(agora/stack/envvars.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import AliasChoices, BeforeValidator, Field, model_validator
from pydantic_settings import SettingsConfigDict

from agora.stack.envvars import EnvSettings

PREFIX = "AGORA_GATEWAY_"
CONFIG_ENV = "AGORA_CONFIG"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_BODY_BYTES = 1024 * 1024

_TRUE = ("1", "true", "yes")
_FALSE = ("0", "false", "no")


def _flag(value: object) -> object:
    """``0``/``1`` (also ``true``/``false``, ``yes``/``no``); nothing looser, as a typo in a
    security switch must stop the gateway rather than read as false."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE + _FALSE:
            return word in _TRUE
        raise ValueError("must be 0 or 1")
    return value


class GatewaySettings(EnvSettings):
    """The gateway's settings: ``GatewaySettings.from_env()`` (or keyword arguments)."""

    model_config = SettingsConfigDict(env_prefix=PREFIX)

    timeout_s: float = Field(DEFAULT_TIMEOUT_S, gt=0)
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, ge=1)
    # Each image part of a request (agora/gateway/images.py): decoded bytes, pixels a side.
    max_image_bytes: int = Field(256 * 1024, ge=1)
    max_image_side: int = Field(2048, ge=1)
    require_keys: Annotated[bool, BeforeValidator(_flag)] = False
    # A key without a rate of its own is still limited: a leaked key cannot flood the policy
    # servers. 0 lifts the default.
    default_rate: int = Field(600, ge=0)
    key_pepper: str = Field("", repr=False)
    episode_ttl_s: int = Field(3600, ge=1)
    runs_dir: Path = Path("runs")
    stop_grace_s: float = 60.0
    # Browsers' cross-site requests are refused unless from these origins
    # (agora/gateway/browser_guard.py), e.g. "https://dashboard.example.com".
    allowed_origins: str = ""
    redis_url: str | None = Field(None, validation_alias=AliasChoices("AGORA_REDIS_URL",
                                                                      "REDIS_URL"))
    run_id: str | None = Field(None, validation_alias="AGORA_RUN_ID")
    run_dir: Path | None = Field(None, validation_alias="AGORA_RUN_DIR")
    config: Path | None = Field(None, validation_alias=CONFIG_ENV)

    def origins(self) -> list[str]:
        return [origin for origin in self.allowed_origins.split(",") if origin.strip()]

    @model_validator(mode="after")
    def _keys_need_redis(self) -> GatewaySettings:
        if self.require_keys and not self.redis_url:
            raise ValueError(f"{PREFIX}REQUIRE_KEYS=1 needs Redis (AGORA_REDIS_URL or "
                             "REDIS_URL), where the keys are stored")
        return self
