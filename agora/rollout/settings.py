"""The rollout worker's environment: where Redis is, how long a taken task may stay unacked,
and where the worker serves its Prometheus metrics.

Read with pydantic-settings like every service's (``agora.stack.envvars.EnvSettings``: an
empty value is unset, a bad one is a ConfigError naming the variable). The embedded stack,
compose and k8s set these per worker process/container.
"""

from __future__ import annotations

from pydantic import AliasChoices, Field

from agora.ops.metrics import serve_metrics
from agora.stack.envvars import EnvSettings

DEFAULT_REDIS_URL = "redis://127.0.0.1:6390/0"


class WorkerSettings(EnvSettings):
    redis_url: str = Field(DEFAULT_REDIS_URL,
                           validation_alias=AliasChoices("AGORA_REDIS_URL", "REDIS_URL"))
    # Seconds after which a task taken by a dead worker goes back to the queue.
    visibility_timeout: int = Field(60, ge=5, validation_alias="AGORA_VISIBILITY_TIMEOUT")
    # This worker's Prometheus port (unset: it serves none) and the address it binds.
    metrics_port: int | None = Field(None, ge=1, le=65535,
                                     validation_alias="AGORA_WORKER_METRICS_PORT")
    metrics_addr: str = Field("0.0.0.0", validation_alias="AGORA_WORKER_METRICS_ADDR")


def serve_worker_metrics() -> int | None:
    """Serve the worker's metrics where its settings say (unset port: nowhere)."""
    settings = WorkerSettings()
    return serve_metrics(settings.metrics_port, settings.metrics_addr)
