"""The training run a gateway serves: live versions, adapters on disk, latest metrics.

Everything here is read, never written: the trainer owns it (``weight_sync.publish`` sets
``agora:{run}:version:{agent}`` and ``agora:{run}:adapter:{agent}``; ``Trainer.report`` appends
to ``metrics.jsonl`` and mirrors a flat summary in the run's state hash).

Where the adapters are: ``AGORA_RUN_DIR/adapters/<agent>/v<N>`` when the gateway knows the run
folder (the launcher says), else the folder of the adapter path the trainer last published in
Redis (compose and k8s, where the gateway mounts the trainer's checkpoint volume at the same
path). Without a run (a gateway started on a config alone) there are no versions to pin.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import redis.asyncio as aioredis

from agora.rollout.stream import RunKeys
from agora.serving.weights import adapter_dir

VERSION_DIR = re.compile(r"^v(\d+)$")


def published_versions_dir(published: str, agent: str) -> Path | None:
    """The folder of ``agent``'s versions from the adapter path the trainer published in Redis,
    if that path has the shape the trainer writes (``<run>/adapters/<agent>/v<N>``,
    agora/serving/weights.py); else None: a path Redis holds is not trusted as it is, since
    the gateway would ask vLLM to load whatever adapter it names."""
    path = Path(published)
    if (".." in path.parts or not VERSION_DIR.match(path.name)
            or path.parent.name != agent or path.parent.parent.name != "adapters"):
        return None
    return path.parent


def last_jsonl_rows(path: Path, count: int, max_bytes: int = 1 << 20) -> list[dict]:
    """The last ``count`` JSON rows of ``path`` (reading at most ``max_bytes`` from its end, so
    a long run's metrics file is not read whole on every request). A torn last line (being
    written right now) is skipped."""
    if count < 1 or not path.is_file():
        return []
    with path.open("rb") as handle:
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(max(0, size - max_bytes))
        lines = handle.read().decode("utf-8", errors="replace").splitlines()
    if size > max_bytes:
        lines = lines[1:]  # probably cut in the middle
    rows = []
    for line in reversed(lines):
        if len(rows) == count:
            break
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict):
            rows.append(row)
    return rows[::-1]


class RunContext:
    def __init__(self, run_id: str | None, run_dir: Path | None,
                 redis: aioredis.Redis | None) -> None:
        self.run_id = run_id
        self.run_dir = run_dir
        self.redis = redis
        self.keys = RunKeys(run_id) if run_id else None

    @property
    def attached(self) -> bool:
        return self.run_dir is not None or (self.keys is not None and self.redis is not None)

    async def live_version(self, agent: str) -> int | None:
        """The version the trainer last published (None: no run, or not published yet)."""
        if self.keys is None or self.redis is None:
            return None
        value = await self.redis.get(self.keys.version(agent))
        return None if value is None else int(value)

    async def versions_dir(self, agent: str) -> Path | None:
        if self.run_dir is not None:
            return adapter_dir(self.run_dir, agent, 0).parent
        if self.keys is None or self.redis is None:
            return None
        published = await self.redis.get(self.keys.adapter_path(agent))
        return published_versions_dir(published, agent) if published else None

    async def versions_on_disk(self, agent: str) -> list[int]:
        folder = await self.versions_dir(agent)
        if folder is None or not folder.is_dir():
            return []
        found = []
        for child in folder.iterdir():
            match = VERSION_DIR.match(child.name)
            if match and (child / "adapter_config.json").is_file():
                found.append(int(match.group(1)))
        return sorted(found)

    async def adapter_path(self, agent: str, version: int) -> Path | None:
        """The saved adapter of ``agent`` at ``version``; None if it is not on disk."""
        folder = await self.versions_dir(agent)
        if folder is None:
            return None
        path = folder / f"v{version}"
        return path if (path / "adapter_config.json").is_file() else None

    async def state(self) -> dict[str, str]:
        """The run's state hash (status, update, ``<agent>:<metric>`` summaries)."""
        if self.keys is None or self.redis is None:
            return {}
        return await self.redis.hgetall(self.keys.state)

    def metrics_rows(self, count: int) -> list[dict]:
        """The trainer's last ``count`` rows of ``metrics.jsonl`` (all stats of each update)."""
        if self.run_dir is None:
            return []
        return last_jsonl_rows(self.run_dir / "metrics.jsonl", count)


def agent_summary_from_state(state: dict[str, str], agent: str) -> dict[str, float]:
    """``<agent>:<metric>`` fields of the run's state hash, as numbers (the trainer's flat
    mirror of its last update, for when the run folder is not readable from here)."""
    prefix = f"{agent}:"
    out = {}
    for key, value in state.items():
        if key.startswith(prefix):
            try:
                out[key.removeprefix(prefix)] = float(value)
            except ValueError:
                continue
    return out
