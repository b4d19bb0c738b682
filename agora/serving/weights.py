"""Publishing a new policy version: adapter on disk -> hot-swap into vLLM -> version in Redis.

A full-weight agent (``finetune: full``) has a policy server of its own, serving the run's copy
of its weights (``live_weights_dir``): a new version's files replace those (one rename each),
then vLLM reloads them in place (``/collective_rpc reload_weights``, its own API) and drops
prefix-cache blocks computed with the old weights. A server that restarts reads the same folder,
so it comes back with the live version. Only the live version is servable (vLLM holds one set
of weights): pinned versions are for LoRA agents.

Order matters: vLLM serves the new weights *before* Redis says the version is live, so a worker
that reads version v+1 is never answered by weights older than v+1 (it may be answered by newer
ones between the two steps, which only makes a turn look one version staler than it is).
Every version keeps its own folder (``adapters/<agent>/v<N>``) so pinned versions stay servable.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from agora.rollout.stream import EpisodeStream
from agora.serving.client import PolicyAdmin


def adapter_dir(run_dir: Path, agent: str, version: int) -> Path:
    return run_dir / "adapters" / agent / f"v{version}"


def live_weights_dir(run_dir: Path, agent: str) -> Path:
    """The folder a full-weight agent's policy server serves."""
    return run_dir / "weights" / agent / "live"


def staged_weights_dir(run_dir: Path, agent: str, version: int) -> Path:
    """Where a full-weight version is written before it replaces the live files."""
    return run_dir / "weights" / agent / f"v{version}"


def policy_dir(run_dir: Path, agent: str, version: int, full_weights: bool) -> Path:
    return (staged_weights_dir if full_weights else adapter_dir)(run_dir, agent, version)


def prepare_live_weights(base: Path, live: Path, fresh: bool) -> Path:
    """The live folder of a full-weight agent before its server starts: a copy of the base
    (hard links where the file system allows: files are only ever replaced, never written in
    place), kept as it is when resuming (it holds the last published version)."""
    if live.is_dir() and not fresh:
        return live
    shutil.rmtree(live, ignore_errors=True)
    tmp = live.with_name(live.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:  # another file system
            shutil.copy2(src, dst)

    shutil.copytree(base, tmp, copy_function=link_or_copy)
    tmp.rename(live)
    return live


def install_weights(staged: Path, live: Path) -> None:
    """Replace the live files with a staged version's (each file one atomic rename), then drop
    weight files the new version does not have; the staged folder is used up."""
    live.mkdir(parents=True, exist_ok=True)
    names = set()
    for item in staged.iterdir():
        os.replace(item, live / item.name)
        names.add(item.name)
    for old in live.glob("*.safetensors*"):
        if old.name not in names:
            old.unlink()
    staged.rmdir()


def publish(
    admin: PolicyAdmin, stream: EpisodeStream, agent: str, version: int, path: Path,
    live: Path | None = None,
) -> float:
    """Hot-swap ``path`` in as ``agent`` and mark ``version`` live; returns the swap seconds.
    ``live``: a full-weight agent's served folder; ``path`` is then a staged model folder."""
    started = time.perf_counter()
    if live is None:
        admin.load_adapter(agent, str(path))
    else:
        install_weights(path, live)
        admin.reload_weights()
        path = live
    stream.set_version(agent, version, str(path))
    return time.perf_counter() - started
