"""Start, watch and stop the local processes of the embedded stack (and of the tests).

Each service runs in its own process group so that stopping it also stops whatever it forked
(vLLM's engine core, Celery's pool): a group kill leaves no orphans behind. Each runs under a
tether (agora/stack/tether.py) holding a pipe to this process, so the services also die when
this process is killed outright (``kill -9`` of ``agora up``). Logs go to one file per service,
whose last lines are what the launcher prints when that service fails.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

TETHER = str(Path(__file__).with_name("tether.py"))


class ServiceFailed(RuntimeError):
    def __init__(self, name: str, message: str, log_tail: str = "") -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.log_tail = log_tail
        if log_tail:  # shown under a traceback (a test's failure), not in str() (the CLI's line)
            self.add_note(f"last lines of {name}'s log:\n{log_tail}")


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()
PORT_SHARD_ENV = "AGORA_PORT_SHARD"


def port_shard() -> tuple[int, int]:
    """``AGORA_PORT_SHARD=INDEX/COUNT``: this process hands out only the ports of its shard.

    Why: two processes that pick ports at the same moment for servers they start later (the
    test suite's parallel workers, ``make test``) can each be handed the same free port by the
    OS, and the second server then fails to bind. Ports of disjoint shards never meet. Unset:
    one shard, every port."""
    raw = os.environ.get(PORT_SHARD_ENV, "").strip()
    if not raw:
        return 0, 1
    try:
        index, count = (int(part) for part in raw.split("/"))
    except ValueError:
        raise ValueError(f"{PORT_SHARD_ENV}={raw!r}: expected INDEX/COUNT, e.g. 0/2") from None
    if not 0 <= index < count:
        raise ValueError(f"{PORT_SHARD_ENV}={raw!r}: INDEX must be in 0..COUNT-1")
    return index, count


def in_port_shard(port: int, index: int, count: int) -> bool:
    # port // 2, not port: Linux hands bind(0) ports of one parity (odd here), so port % 2
    # would leave one of two shards empty.
    return (port // 2) % count == index


def free_port() -> int:
    """A port nothing listens on now, and never one this process handed out before.

    Binding to port 0 lets the OS pick any free port, so two calls in a row can return the
    same one (nothing is listening yet between them); a config given both would then be
    refused for putting two services on one port (seen in a test run). Only ports of this
    process's shard (``port_shard``) are handed out."""
    index, count = port_shard()
    with _HANDED_OUT_LOCK:
        for _ in range(1000):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
            if port not in _HANDED_OUT and in_port_shard(port, index, count):
                _HANDED_OUT.add(port)
                return port
    raise RuntimeError("no free TCP port left on 127.0.0.1")


def tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Service:
    name: str
    command: list[str]
    log_path: Path
    env: dict[str, str] | None = None
    cwd: str | None = None
    health: Callable[[], bool] | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)
    _lifeline: int | None = field(default=None, repr=False)  # the tether's pipe, write end

    def start(self) -> Service:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - owned by the child
        lifeline_r, lifeline_w = os.pipe()
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-I", "-S", TETHER, str(lifeline_r), "--", *self.command],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                pass_fds=(lifeline_r,),
                start_new_session=True,  # own process group: see module docstring
            )
        except BaseException:
            os.close(lifeline_w)
            raise
        finally:
            os.close(lifeline_r)
            log.close()
        self._lifeline = lifeline_w
        return self

    def _release(self) -> None:
        """The service is gone: its lifeline has nothing left to hold."""
        if self._lifeline is not None and self.process is not None and \
                self.process.poll() is not None:
            os.close(self._lifeline)
            self._lifeline = None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def alive(self) -> bool:
        if self.process is None:
            return False
        running = self.process.poll() is None
        if not running:
            self._release()
        return running

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.alive():
                code = self.process.returncode if self.process else None
                raise ServiceFailed(self.name, f"exited with code {code}", tail(self.log_path))
            if self.health is None or self.health():
                return
            time.sleep(0.5)
        raise ServiceFailed(self.name, f"not healthy after {timeout_s:.0f}s", tail(self.log_path))

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after ``grace_s`` (see ``stop_all``)."""
        stop_all([self], grace_s)

    def kill(self) -> None:
        """SIGKILL the whole group at once (fault tests)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=30)
        self._release()


def http_ok(url: str, timeout_s: float = 2.0) -> Callable[[], bool]:
    def check() -> bool:
        try:
            return httpx.get(url, timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    return check


def stop_all(services: list[Service], grace_s: float = 10.0) -> None:
    """Stop services in parallel: SIGTERM every process group, wait up to ``grace_s`` for all
    of them, then SIGKILL what is left. One grace period in total, not one per service."""
    running = [s for s in services if s.process is not None]
    for svc in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(svc.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_group_alive(s) for s in running):
        time.sleep(0.2)
    for svc in running:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(svc.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            svc.process.wait(timeout=grace_s)
        svc._release()


def _group_alive(svc: Service) -> bool:
    svc.process.poll()  # reap the leader so a zombie does not count as alive
    try:
        os.killpg(svc.process.pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
