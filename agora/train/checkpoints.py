"""Checkpoints of a run: ``runs/<id>/checkpoints/ckpt-NNNNNN`` (every learner's policy, critic
and optimizers, with the update index and versions), a ``latest`` pointer, the last two kept.

Apart from the loop because this is where the trainer's crash safety lives:
- the stream entries consumed since the last checkpoint are acked only once a checkpoint
  containing their effect is on disk, so a trainer killed mid-update reads them again on
  ``--resume``;
- the checkpoint names those entries itself (``consumed.json``), so a trainer killed after the
  checkpoint but before its XACK does not train on them a second time: the resumed one acks
  them before it reads what is pending;
- a checkpoint is on disk when ``latest`` names it: its files, its folder and the rename are
  fsynced first (a power cut cannot leave a ``latest`` naming a half-written checkpoint);
- a resumed run's versions never go backwards.
"""

from __future__ import annotations

import json
import os
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
    consumed: list[str]  # stream entries whose effect the checkpoint holds


CONSUMED = "consumed.json"


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then every folder (deepest first), ``root`` last."""
    folders = [root]
    for path in root.rglob("*"):
        if path.is_dir():
            folders.append(path)
        elif path.is_file():
            with path.open("rb") as handle:
                os.fsync(handle.fileno())
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        fsync_dir(folder)


def fsync_dir(folder: Path) -> None:
    """Make a folder's entries (a file created or renamed in it) durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Checkpoints:
    """The run's checkpoint folder, and the stream entries its next checkpoint will ack."""

    def __init__(self, run_dir: Path, run_id: str, stream: EpisodeStream) -> None:
        self.root = run_dir / "checkpoints"
        self.run_id = run_id
        self.stream = stream
        self.unacked: list[str] = []  # consumed since the last checkpoint

    def save(self, update_index: int, versions: dict[str, int],
             learners: Mapping[str, Lockstep]) -> Path:
        """Write ``ckpt-<update_index>`` (in a .tmp folder, synced and renamed when whole),
        point ``latest`` at it, ack what it holds, drop all but the last two."""
        name = f"ckpt-{update_index:06d}"
        tmp = self.root / (name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)
        meta = {"update_index": update_index, "versions": versions, "run_id": self.run_id}
        for agent, learner in learners.items():
            learner.save_checkpoint(tmp / agent, meta)
        (tmp / CONSUMED).write_text(json.dumps(self.unacked))
        fsync_tree(tmp)
        final = self.root / name
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        fsync_dir(self.root)
        pointer_tmp = self.root / "latest.tmp"
        with pointer_tmp.open("w") as handle:
            handle.write(name)
            handle.flush()
            os.fsync(handle.fileno())
        pointer_tmp.rename(self.root / "latest")
        fsync_dir(self.root)
        # Only now are the consumed entries safe to forget (a kill before this line: the
        # resumed trainer acks them from consumed.json).
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
        consumed_file = checkpoint / CONSUMED  # (absent in checkpoints of older versions)
        consumed = json.loads(consumed_file.read_text()) if consumed_file.is_file() else []
        return Resumed(checkpoint, int(meta["update_index"]),
                       {k: int(v) for k, v in meta["versions"].items()}, consumed)


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
