"""Publishing a new policy version: adapter on disk -> hot-swap into vLLM -> version in Redis.

Order matters: vLLM serves the new weights *before* Redis says the version is live, so a worker
that reads version v+1 is never answered by weights older than v+1 (it may be answered by newer
ones between the two steps, which only makes a turn look one version staler than it is).
Every version keeps its own folder (``adapters/<agent>/v<N>``) so pinned versions stay servable.
"""

from __future__ import annotations

import time
from pathlib import Path

from agora.policy_client import PolicyAdmin
from agora.stream import EpisodeStream


def adapter_dir(run_dir: Path, agent: str, version: int) -> Path:
    return run_dir / "adapters" / agent / f"v{version}"


def publish(
    admin: PolicyAdmin, stream: EpisodeStream, agent: str, version: int, path: Path
) -> float:
    """Hot-swap ``path`` in as ``agent`` and mark ``version`` live; returns the swap seconds."""
    started = time.perf_counter()
    admin.load_adapter(agent, str(path))
    stream.set_version(agent, version, str(path))
    return time.perf_counter() - started
