"""Gateway settings from the environment (its only configuration source besides the run
config, so the same image runs in the embedded stack, compose and k8s).

| variable | default | meaning |
|---|---|---|
| ``AGORA_CONFIG`` | (required) | run config YAML: which agents exist, where their servers are |
| ``AGORA_GATEWAY_TIMEOUT_S`` | ``120`` | budget of each upstream (vLLM) read; over it: 504 |
| ``AGORA_GATEWAY_MAX_BODY_BYTES`` | ``1048576`` | request body limit; over it: 413 |
| ``AGORA_GATEWAY_REQUIRE_KEYS`` | ``0`` | ``1``: API keys required even before any exists |
| ``AGORA_GATEWAY_DEFAULT_RATE`` | (none) | requests/minute for keys created without ``--rate`` |
| ``AGORA_GATEWAY_KEY_PEPPER`` | (none) | secret mixed into key hashes (same value for the CLI) |
| ``AGORA_GATEWAY_EPISODE_TTL_S`` | ``3600`` | idle episodes are forgotten after this |
| ``AGORA_GATEWAY_RUNS_DIR`` | ``runs`` | folder of the runs started through ``/v1/runs`` |
| ``AGORA_GATEWAY_STOP_GRACE_S`` | ``60`` | a stopped run gets this long to exit before SIGKILL |
| ``AGORA_REDIS_URL`` / ``REDIS_URL`` | (none) | keys, rate limits, episodes, runs, versions |
| ``AGORA_RUN_ID``, ``AGORA_RUN_DIR`` | (none) | the run whose versions and metrics to serve |

The launcher sets ``AGORA_CONFIG``, ``AGORA_REDIS_URL``, ``AGORA_RUN_ID`` and ``AGORA_RUN_DIR``.
Without Redis the gateway still proxies chat completions; the routes that need state answer
503 naming the variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agora.config.run import ConfigError
from agora.stack.envvars import EnvReader

PREFIX = "AGORA_GATEWAY_"
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_BODY_BYTES = 1024 * 1024


@dataclass(frozen=True)
class GatewaySettings:
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    require_keys: bool = False
    default_rate: int | None = None
    key_pepper: str = ""
    episode_ttl_s: int = 3600
    runs_dir: Path = Path("runs")
    stop_grace_s: float = 60.0
    redis_url: str | None = None
    run_id: str | None = None
    run_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.max_body_bytes < 1 or self.episode_ttl_s < 1:
            raise ConfigError(f"{PREFIX}TIMEOUT_S, MAX_BODY_BYTES and EPISODE_TTL_S must be > 0")
        if self.default_rate is not None and self.default_rate < 1:
            raise ConfigError(f"{PREFIX}DEFAULT_RATE must be >= 1 request per minute")
        if self.require_keys and not self.redis_url:
            raise ConfigError(f"{PREFIX}REQUIRE_KEYS=1 needs Redis (AGORA_REDIS_URL or "
                              "REDIS_URL), where the keys are stored")

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GatewaySettings:
        read = EnvReader(PREFIX, env)

        flag = (read.get("REQUIRE_KEYS") or "0").lower()
        if flag not in ("0", "1", "true", "false", "yes", "no"):
            raise ConfigError(f"{PREFIX}REQUIRE_KEYS must be 0 or 1, not '{flag}'")
        rate = read.number("DEFAULT_RATE", int, None)
        run_dir = read.raw("AGORA_RUN_DIR")
        return cls(
            timeout_s=float(read.number("TIMEOUT_S", float, DEFAULT_TIMEOUT_S)),
            max_body_bytes=int(read.number("MAX_BODY_BYTES", int, DEFAULT_MAX_BODY_BYTES)),
            require_keys=flag in ("1", "true", "yes"),
            default_rate=None if rate is None else int(rate),
            key_pepper=read.get("KEY_PEPPER") or "",
            episode_ttl_s=int(read.number("EPISODE_TTL_S", int, 3600)),
            runs_dir=Path(read.get("RUNS_DIR") or "runs"),
            stop_grace_s=float(read.number("STOP_GRACE_S", float, 60.0)),
            redis_url=read.raw("AGORA_REDIS_URL") or read.raw("REDIS_URL"),
            run_id=read.raw("AGORA_RUN_ID"),
            run_dir=Path(run_dir) if run_dir else None,
        )
