"""The trainer's side of the opponent pool: frozen snapshots of the learners, with Elo ratings.

A snapshot costs nothing to make: the trainer already saves every version's adapter in its
own folder (``adapters/<agent>/v<N>``, see ``weight_sync``), so a snapshot is a name
(``<agent>@v<N>``) for one of those folders, added to an ``OpponentPool`` at v0 and every
``pool.snapshot_every`` updates, for every trainable agent that has a seat (a league when
there are several: one pool, every rating on one scale).

A pool episode has one live learner (the payload's ``learner_seat``); every other seat is a
snapshot: of that seat's agent when it is a learner (alice meets bob's past versions), else of
the live learner itself (self-play seats, and the seats of context agents, as with one
learner). The payload carries the snapshot drawn for each such seat (``snapshots``: seat ->
name, agent, path, version); the worker loads that adapter into its agent's vLLM server under
the snapshot's name if it is not there yet (``seating.ensure_adapter``) and seats it.

Ratings: after each update the trainer scores the live learner of every pool episode it
consumed against each snapshot in it (a game's win/draw/loss; otherwise the higher mean reward
wins) and updates both Elo ratings; ``agora_pool_rating{agent, player}`` exports them (agent:
whose snapshot, or the learner itself), and ``pool.sampling: pfsp`` draws by them. The pool is
saved as ``opponent_pool.json`` in the run folder after every change, so ``--resume``
continues with it.
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
        seated = set(cfg.environment.seats)
        self.agents = [a.name for a in cfg.trainable_agents if a.name in seated]
        if not self.agents:
            raise ValueError("an opponent pool needs a trainable agent in a seat")
        self.seats = list(cfg.environment.seats)
        self.cfg = cfg.environment.pool
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

    def maybe_add(self, update_index: int, agent: str, version: int,
                  adapter_path: Path) -> bool:
        """Snapshot ``agent``'s ``version`` if ``update_index`` is on the schedule."""
        name = snapshot_name(agent, version)
        if update_index % self.cfg.snapshot_every or name in self.pool.players:
            return False
        self.pool.add_snapshot(name, str(adapter_path), version)
        self.pool.save(self.path)
        log.info("opponent pool: added %s (%d of %s)", name,
                 len(self.pool.snapshots(agent)), agent)
        return True

    def draw(self, rng: random.Random, learner_seat: int) -> dict[str, dict]:
        """The snapshot in each seat but the live learner's (seat index as a string, as JSON
        keeps it), as the payload carries them: one draw per agent, so the seats of one agent
        (self-play with three seats) hold the same snapshot."""
        learner = self.seats[learner_seat]
        drawn: dict[str, dict] = {}
        seats: dict[str, dict] = {}
        for seat, name in enumerate(self.seats):
            if seat == learner_seat:
                continue
            owner = name if name in self.agents else learner
            if owner not in drawn:
                snap = self.pool.sample(rng, self.cfg.sampling, latest_prob=self.cfg.latest_prob,
                                        against=learner, power=self.cfg.pfsp_power, owner=owner)
                drawn[owner] = {"name": snap.name, "agent": owner, "path": snap.path,
                                "version": snap.version}
            seats[str(seat)] = drawn[owner]
        return seats

    def record(self, records: list[EpisodeRecord]) -> int:
        """Elo updates for the pool episodes among ``records`` (the live learner against each
        snapshot it met); returns how many games were rated."""
        rated = 0
        for record in records:
            snaps = record.info.get("snapshots")
            if record.opponent != "pool" or not isinstance(snaps, dict):
                continue
            live = [s for s in record.seats if s in self.agents]
            if not live:
                continue
            for name in sorted({str(s["name"]) for s in snaps.values() if isinstance(s, dict)}):
                score = learner_score(record, live[0], name)
                if score is None:
                    continue
                self.pool.update(live[0], name, score)
                rated += 1
        if rated:
            self.pool.save(self.path)
            self.export_ratings()
        return rated

    def export_ratings(self) -> None:
        """Every snapshot's rating (and each learner's) on the trainer's /metrics; an evicted
        snapshot's series goes with it."""
        POOL_RATINGS.clear()
        for snap in self.pool.snapshots():
            POOL_RATINGS.labels(snap.owner, snap.name).set(snap.rating)
        for agent in self.agents:
            POOL_RATINGS.labels(agent, agent).set(self.learner_rating(agent))

    def learner_rating(self, agent: str) -> float:
        return self.pool.player(agent).rating


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
