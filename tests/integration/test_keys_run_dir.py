"""``agora keys --run RUN_DIR``: keys made on the embedded stack's Redis without its password
ever being printed.

The stack's Redis wants a fresh password per start (issue 18). `agora up` used to print it inside
the `--redis-url` of its "API keys required" hint, where it stayed in any log the output was
piped to. Now the hint names the run directory and the CLI reads the password from the run's
0600 ``redis/auth.conf``. Here: a real password-protected redis-server laid out as a run
directory (the launcher's own ``redis_service``), and the CLI in-process.
"""

from __future__ import annotations

import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import yaml
from typer.testing import CliRunner

from agora.cli.main import app as cli_app
from agora.stack.procs import free_port
from agora.stack.redis_server import redis_service, redis_url

KEY = re.compile(r"^agora-[A-Za-z0-9_\-]{40,}$", re.MULTILINE)


def write_run_config(run_dir: Path, port: int, host: str = "127.0.0.1") -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(
        {"name": "keys", "services": {"host": host, "redis_port": port}}))


@pytest.fixture
def run_dir(tmp_path) -> Iterator[tuple[Path, int, str]]:
    """A run directory as `agora up` leaves it: config.yaml, redis/auth.conf, a live Redis."""
    run, port, password = tmp_path / "runs" / "r1", free_port(), secrets.token_urlsafe(24)
    write_run_config(run, port)
    svc = redis_service(port, run / "redis", tmp_path / "redis.log", password=password).start()
    try:
        svc.wait_healthy(30)
        yield run, port, password
    finally:
        svc.stop()


def keys(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli_app, ["keys", *args])
    return result.exit_code, result.output


def test_keys_reach_the_runs_redis_through_its_directory(run_dir):
    run, port, password = run_dir
    url = redis_url("127.0.0.1", port, password)
    auth = run / "redis" / "auth.conf"
    assert stat.S_IMODE(auth.stat().st_mode) == 0o600  # the only place the password lives
    with pytest.raises(redis.AuthenticationError):  # the Redis really wants it
        redis.Redis(host="127.0.0.1", port=port).ping()

    code, out = keys("create", "alice", "--rate", "60", "--run", str(run))
    assert code == 0, out
    key = KEY.search(out).group(0)
    assert password not in out
    stored = redis.Redis.from_url(url).hgetall("agora:gateway:keys")
    assert b"alice" in stored and key.encode() not in b"".join(stored.values())

    code, out = keys("list", "--run", str(run))
    assert code == 0 and "alice" in out and key not in out
    code, out = keys("revoke", "alice", "--run", str(run))
    assert code == 0, out
    assert b"alice" not in redis.Redis.from_url(url).hgetall("agora:gateway:keys")


def test_a_run_bound_to_every_interface_is_reached_on_the_loopback(tmp_path):
    run, port, password = tmp_path / "run", free_port(), "pw-" + secrets.token_urlsafe(8)
    write_run_config(run, port, host="0.0.0.0")
    svc = redis_service(port, run / "redis", tmp_path / "redis.log", password=password).start()
    try:
        svc.wait_healthy(30)
        code, out = keys("create", "bob", "--run", str(run))
        assert code == 0, out
        assert b"bob" in redis.Redis.from_url(redis_url("127.0.0.1", port, password)).hgetall(
            "agora:gateway:keys")
    finally:
        svc.stop()


def test_bad_run_directories_get_a_message_naming_what_is_missing(tmp_path, run_dir):
    run, port, password = run_dir
    code, out = keys("list", "--run", str(tmp_path / "nowhere"))
    assert code == 2 and "--run" in out and "not a run directory" in out

    external = tmp_path / "external"  # a run on the user's own REDIS_URL: no auth.conf
    write_run_config(external, 6399)
    code, out = keys("list", "--run", str(external))
    assert code == 2 and "pass that as --redis-url" in out

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("services: {}\n")
    code, out = keys("list", "--run", str(broken))
    assert code == 2 and "no services.redis_port" in out

    code, out = keys("list", "--run", str(run), "--redis-url",
                     redis_url("127.0.0.1", port, password))
    assert code == 2 and "not both" in out
    assert "Traceback" not in out
