"""The trainer's side of the opponent pool: frozen snapshots of the learner, with Elo ratings.

A snapshot costs nothing to make: the trainer already saves every version's adapter in its
own folder (``adapters/<agent>/v<N>``, see ``weight_sync``), so a snapshot is a name
(``<agent>@v<N>``) for one of those folders, added to an ``OpponentPool`` at v0 and every
``pool.snapshot_every`` updates. Each pool episode's payload carries the snapshot the trainer
drew for it (name, path, version); the worker loads that adapter into the learner's vLLM server
under the snapshot's name if it is not there yet (``seating.ensure_adapter``) and seats it.

Ratings: after each update the trainer scores the learner against the snapshot of every pool
episode it consumed (a game's win/draw/loss; otherwise the higher mean reward wins) and updates
both Elo ratings; ``agora_pool_rating{agent, player}`` exports them, and ``pool.sampling:
pfsp`` draws by them. The pool (snapshots and ratings) is saved as ``opponent_pool.json`` in the run
folder after every change, so ``--resume`` continues with it.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

from agora.agents.context import OpponentPool
from agora.config.run import RunConfig
from agora.ops.metrics import POOL_RATINGS
from agora.rollout.records import EpisodeRecord

log = logging.getLogger(__name__)

GAME_SCORES = {"win": 1.0, "draw": 0.5, "loss": 0.0, "illegal": 0.0}


def snapshot_name(agent: str, version: int) -> str:
    return f"{agent}@v{version}"


class SnapshotPool:
    def __init__(self, cfg: RunConfig, path: Path) -> None:
        if cfg.learner is None:
            raise ValueError("an opponent pool needs a trainable agent in a seat")
        self.cfg = cfg.environment.pool
        self.agent = cfg.learner
        self.path = path
        if path.is_file():
            self.pool = OpponentPool.load(path)
        else:
            self.pool = OpponentPool(max_snapshots=self.cfg.max_snapshots)

    @classmethod
    def for_run(cls, cfg: RunConfig, run_dir: Path) -> SnapshotPool | None:
        """The run's pool, or None when no episode plays against it."""
        if "pool" not in cfg.environment.opponents:
            return None
        return cls(cfg, run_dir / "opponent_pool.json")

    def maybe_add(self, update_index: int, version: int, adapter_path: Path) -> bool:
        """Snapshot the learner's ``version`` if ``update_index`` is on the schedule."""
        name = snapshot_name(self.agent, version)
        if update_index % self.cfg.snapshot_every or name in self.pool.players:
            return False
        self.pool.add_snapshot(name, str(adapter_path), version)
        self.pool.save(self.path)
        log.info("opponent pool: added %s (%d snapshots)", name, len(self.pool.snapshots()))
        return True

    def draw(self, rng: random.Random) -> dict:
        """The snapshot an episode plays against, as the payload carries it."""
        snap = self.pool.sample(rng, self.cfg.sampling, latest_prob=self.cfg.latest_prob,
                                against=self.agent, power=self.cfg.pfsp_power)
        return {"name": snap.name, "path": snap.path, "version": snap.version}

    def record(self, records: list[EpisodeRecord]) -> int:
        """Elo updates for the pool episodes among ``records``; returns how many were rated."""
        rated = 0
        for record in records:
            snap = record.info.get("snapshot")
            if record.opponent != "pool" or not isinstance(snap, dict):
                continue
            score = learner_score(record, self.agent, str(snap["name"]))
            if score is None:
                continue
            self.pool.update(self.agent, str(snap["name"]), score)
            rated += 1
        if rated:
            self.pool.save(self.path)
            self.export_ratings()
        return rated

    def export_ratings(self) -> None:
        """Every snapshot's rating (and the learner's) on the trainer's /metrics; an evicted
        snapshot's series goes with it."""
        POOL_RATINGS.clear()
        for snap in self.pool.snapshots():
            POOL_RATINGS.labels(self.agent, snap.name).set(snap.rating)
        POOL_RATINGS.labels(self.agent, self.agent).set(self.learner_rating)

    @property
    def learner_rating(self) -> float:
        return self.pool.player(self.agent).rating


def learner_score(record: EpisodeRecord, learner: str, snapshot: str) -> float | None:
    """1 / 0.5 / 0 for the learner against the snapshot: a game's result from the learner's
    seat, otherwise the comparison of their mean rewards (None if either never played)."""
    seats = [s for s, name in enumerate(record.seats) if name == learner]
    if seats and seats[0] < len(record.results) and record.results[seats[0]] in GAME_SCORES:
        return GAME_SCORES[record.results[seats[0]]]
    if learner not in record.rewards or snapshot not in record.rewards:
        return None
    mine, theirs = record.rewards[learner], record.rewards[snapshot]
    return 1.0 if mine > theirs else 0.5 if mine == theirs else 0.0
