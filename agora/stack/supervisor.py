"""Which crashed services of the embedded stack ``agora up`` starts again, and how often.

Restarting is right only where it loses nothing:
- a policy server (vLLM) holds no state of the run: rollout workers wait for it (tenacity), and
  the trainer loads every agent's current adapter into the new one
  (agora/serving/adapter_keeper.py) before workers get answers from it;
- the embedded Redis replays its append-only file (``runs/<run-id>/redis/``) as it starts, and
  every client rides out the gap (agora/stack/redis_client.py, Celery's broker reconnect);
- the reward, judge and gateway services keep nothing of their own (verdict caches, keys,
  episodes and rate limits live in Redis): a worker waiting on a verdict retries the episode
  (RewardUnavailable, JudgeUnavailable), a user's request gets a refused connection for a few
  seconds.
Tearing a multi-hour run down for any of them would be the worse choice. A trainer or worker
that dies still stops everything and shows its last log lines: that is a bug or a bad config
to look at, not a blip (the trainer resumes from its checkpoint with ``--resume``). So does a
restartable service past its budget (``services.restarts``: a server that crashes as it starts
must not loop forever) or one that is not healthy ``services.health_timeout_s`` after its
restart.

The restarted service is not waited for in the watch loop: the rest of the stack keeps running
(and waiting on it by itself) while its health is checked once per tick.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agora.stack.procs import Service, ServiceFailed, tail


def restartable(name: str) -> bool:
    """Services whose restart loses nothing (see the module docstring)."""
    return name in ("redis", "reward", "judge", "gateway") or name.startswith("policy-")


@dataclass
class Restart:
    service: str
    attempt: int  # 1 = its first restart
    exit_code: int | None
    old_pid: int | None
    new_pid: int | None
    started_at: float  # time.monotonic()
    healthy_after_s: float | None = None  # seconds from restart to its first passed health check


class Supervisor:
    def __init__(self, budget: int, health_timeout_s: float, log_path: Path | None = None,
                 on_event: Callable[[str], None] = lambda _msg: None) -> None:
        self.budget = budget
        self.health_timeout_s = health_timeout_s
        self.log_path = log_path
        self.on_event = on_event
        self.history: list[Restart] = []
        self._recovering: dict[str, tuple[Service, Restart]] = {}

    def restarts(self, name: str) -> int:
        return sum(1 for r in self.history if r.service == name)

    def handle_exit(self, svc: Service, restart: Callable[[Service], Service]) -> Service:
        """``svc`` exited: start it again through ``restart`` (returns the new service), or
        raise ServiceFailed with its last log lines when it may not be restarted."""
        code = svc.process.returncode if svc.process else None
        done = self.restarts(svc.name)
        if not restartable(svc.name) or done >= self.budget:
            spent = f" (restarted {done} times, budget {self.budget})" if done else ""
            raise ServiceFailed(svc.name, f"exited with code {code}{spent}",
                                tail(svc.log_path, 40))
        old_pid = svc.pid
        new = restart(svc)
        record = Restart(svc.name, done + 1, code, old_pid, new.pid, time.monotonic())
        self.history.append(record)
        self._recovering[svc.name] = (new, record)
        self._event(f"{svc.name} exited with code {code}: restarted "
                    f"({record.attempt}/{self.budget}), pid {new.pid}")
        return new

    def check_recovering(self) -> None:
        """Note each restarted service that became healthy; fail one that did not in time."""
        for name, (svc, record) in list(self._recovering.items()):
            waited = time.monotonic() - record.started_at
            if not svc.alive():
                del self._recovering[name]  # the watch loop sees it exit and decides again
            elif svc.health is None or svc.health():
                record.healthy_after_s = waited
                del self._recovering[name]
                self._event(f"{name} healthy again {waited:.1f}s after its restart")
            elif waited > self.health_timeout_s:
                raise ServiceFailed(name, f"not healthy {waited:.0f}s after its restart",
                                    tail(svc.log_path, 40))

    def _event(self, message: str) -> None:
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("a") as fh:
                fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n")
        self.on_event(message)
