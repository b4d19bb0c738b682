"""Keep every agent's current adapter loaded in its policy server, across server restarts.

vLLM holds runtime-loaded LoRA adapters in memory only: a policy server that crashed and was
started again (by the launcher's supervisor, agora/stack/supervisor.py, or by Kubernetes) serves the
base model alone and answers 404 for every agent's name. Rollout workers wait on that 404
(``PolicyClient(adapter_wait_s=...)``); the trainer is the one process that knows each agent's
current version and adapter folder, so it loads them again. Detection is vLLM's own
``/v1/models`` listing, polled by a daemon thread: it catches a restart nobody announced (a pod
rescheduled, an operator's restart) as well as the launcher's, without a channel between the
two.

Publishing a new version goes through the same lock, so a re-load never puts an older adapter
back over a newer one: vLLM always holds the weights of the version Redis calls live, the
contract of agora/weight_sync.py. A re-load keeps the version number (same weights, same
folder), so versions never move because of a restart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from agora.ops.metrics import TRAINER_ADAPTER_RELOADS
from agora.rollout.stream import EpisodeStream
from agora.serving.client import PolicyAdmin, PolicyServerError, PolicyUnavailable
from agora.serving.weights import publish

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LiveAdapter:
    version: int
    path: str


@dataclass(frozen=True)
class Reload:
    agent: str
    version: int
    server: str


class AdapterKeeper:
    """Publishes new versions and re-loads current ones into a server that lost them."""

    def __init__(self, stream: EpisodeStream, admins: Mapping[str, PolicyAdmin],
                 period_s: float = 2.0, live_weights: Mapping[str, Path] | None = None) -> None:
        self.stream = stream
        self.admins = dict(admins)  # agent -> the admin client of its policy server
        # Full-weight agents -> the folder their server serves (agora/serving/weights.py). Such a
        # server restarts from that folder, with the live weights: nothing to restore.
        self.live_weights = dict(live_weights or {})
        self.period_s = period_s
        self.live: dict[str, LiveAdapter] = {}
        self.reloads: list[Reload] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for agent in self.admins:
            # A labelled counter is only exported once its label exists: start every agent's at
            # 0 so "no reload yet" is a scraped 0, not a missing series (dashboards, alerts).
            TRAINER_ADAPTER_RELOADS.labels(agent)

    def publish(self, agent: str, version: int, path: Path) -> float:
        """Hot-swap ``path`` in as ``agent``, mark ``version`` live, remember both; returns the
        swap seconds (agora.serving.weights.publish)."""
        with self._lock:
            live = self.live_weights.get(agent)
            seconds = publish(self.admins[agent], self.stream, agent, version, path, live)
            self.live[agent] = LiveAdapter(version, str(live or path))
        return seconds

    def restore_missing(self) -> list[Reload]:
        """One pass: for each policy server that is up, load again every published adapter it
        does not list. A server that is down or still starting is skipped (next pass)."""
        done: list[Reload] = []
        by_server: dict[str, list[str]] = {}
        for agent, admin in self.admins.items():
            by_server.setdefault(admin.base_url, []).append(agent)
        for server, agents in by_server.items():
            try:
                served = set(self.admins[agents[0]].models(timeout_s=10))
            except (httpx.HTTPError, ValueError, KeyError):
                continue
            for agent in agents:
                if agent in served or agent in self.live_weights:
                    continue
                with self._lock:
                    live = self.live.get(agent)
                    if live is None:  # never published: nothing to restore yet
                        continue
                    try:
                        self.admins[agent].load_adapter(agent, live.path)
                    except (PolicyServerError, PolicyUnavailable, httpx.HTTPError) as err:
                        log.warning("re-loading %s v%d into %s failed (%s); next pass retries",
                                    agent, live.version, server, err)
                        continue
                reload = Reload(agent, live.version, server)
                done.append(reload)
                self.reloads.append(reload)
                TRAINER_ADAPTER_RELOADS.labels(agent).inc()
                log.warning("policy server %s had lost adapter %s: re-loaded v%d from %s",
                            server, agent, live.version, live.path)
        return done

    # --- the background thread ------------------------------------------------------------
    def start(self) -> AdapterKeeper:
        self._thread = threading.Thread(target=self._loop, name="adapter-keeper", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.restore_missing()
            except Exception:  # a bug here must not take the trainer down with it
                log.exception("adapter keeper pass failed")
