"""Checkpoints of a run: ``runs/<id>/checkpoints/ckpt-NNNNNN`` (every learner's policy, critic
and optimizers, with the update index and versions), a ``latest`` pointer, the last two kept.

Apart from the loop because this is where the trainer's crash safety lives: the stream entries
consumed since the last checkpoint are acked only once a checkpoint containing their effect is
on disk, so a trainer killed mid-update reads them again on ``--resume``; and a resumed run's
versions never go backwards.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agora.algos.distributed import Lockstep
from agora.rollout.stream import EpisodeStream


@dataclass
class Resumed:
    """Where a resumed run picks up: the checkpoint, its update index and its versions."""

    path: Path
    update_index: int
    versions: dict[str, int]


class Checkpoints:
    """The run's checkpoint folder, and the stream entries its next checkpoint will ack."""

    def __init__(self, run_dir: Path, run_id: str, stream: EpisodeStream) -> None:
        self.root = run_dir / "checkpoints"
        self.run_id = run_id
        self.stream = stream
        self.unacked: list[str] = []  # consumed since the last checkpoint

    def save(self, update_index: int, versions: dict[str, int],
             learners: Mapping[str, Lockstep]) -> Path:
        """Write ``ckpt-<update_index>`` (in a .tmp folder, renamed when whole), point
        ``latest`` at it, ack what it holds, drop all but the last two."""
        name = f"ckpt-{update_index:06d}"
        tmp = self.root / (name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        meta = {"update_index": update_index, "versions": versions, "run_id": self.run_id}
        for agent, learner in learners.items():
            learner.save_checkpoint(tmp / agent, meta)
        final = self.root / name
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        pointer_tmp = self.root / "latest.tmp"
        pointer_tmp.write_text(name)
        pointer_tmp.rename(self.root / "latest")
        # Only now are the consumed entries safe to forget.
        self.stream.ack(self.unacked)
        self.unacked = []
        for old in sorted(self.root.glob("ckpt-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def latest(self) -> Path | None:
        pointer = self.root / "latest"
        if not pointer.is_file():
            return None
        path = self.root / pointer.read_text().strip()
        return path if path.is_dir() else None

    def resume(self, learners: Mapping[str, Lockstep]) -> Resumed | None:
        """Load the latest checkpoint into ``learners``; None if there is none."""
        checkpoint = self.latest()
        if checkpoint is None:
            return None
        meta = {}
        for name, learner in learners.items():
            meta = learner.load_checkpoint(checkpoint / name)
        return Resumed(checkpoint, int(meta["update_index"]),
                       {k: int(v) for k, v in meta["versions"].items()})


def first_version(agent: str, resumed: Resumed | None, stream: EpisodeStream) -> int:
    """The version ``agent``'s weights are published under at start: 0 on a fresh run, else the
    checkpoint's, unless Redis is already ahead of it (updates after the checkpoint were
    published before the crash): never go backwards, republish under a higher number."""
    if resumed is None:
        return 0
    live = stream.get_version(agent)
    version = resumed.versions.get(agent, 0)
    if live > version:
        version = live + 1
    return version
