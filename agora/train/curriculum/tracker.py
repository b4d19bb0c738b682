"""The trainer's side: score each consumed episode per agent, move levels, report them.

``CurriculumTracker.observe`` is called once per update with the episodes the update consumed.
For every trainable agent it counts the episodes played at the agent's current level (others
are stale: played before the last change, or at a teammate's lower level), applies the
controller's rule and saves the state in Redis, where workers read it for the next episodes.
The level and success rate go to Prometheus (``agora_curriculum_level{agent,task}``,
``agora_curriculum_success_rate{agent,task}``) and, through the returned stats, into
metrics.jsonl and the progress view.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import redis
from prometheus_client import Gauge

from agora.train.curriculum.controller import Rule, observe
from agora.train.curriculum.episode import PAYLOAD_KEY
from agora.train.curriculum.ladders import build_ladder
from agora.train.curriculum.store import CurriculumStore

if TYPE_CHECKING:
    from agora.config.run import RunConfig
    from agora.rollout.records import EpisodeRecord

log = logging.getLogger("agora.train.curriculum")

CURRICULUM_LEVEL = Gauge("agora_curriculum_level", "curriculum level an agent plays a task at "
                         "(0 = easiest)", ["agent", "task"])
CURRICULUM_SUCCESS = Gauge("agora_curriculum_success_rate", "success rate over the curriculum "
                           "window at the current level", ["agent", "task"])

# Env metrics (info["metrics"][agent], agora/rollout/scoring.py) that say whether an episode
# succeeded, in order of preference; an env that reports one is judged by it.
SUCCESS_METRICS = ("success", "task_success", "solved")
_GAME_SCORE = {"win": 1.0, "draw": 0.5}


def success_of(record: EpisodeRecord, agent: str) -> float | None:
    """How well ``agent`` did in the episode, 0..1 (None: it did not play). See
    ``CurriculumConfig`` for the definition per kind of env."""
    seats = [s for s, name in enumerate(record.seats) if name == agent]
    if not seats:
        return None
    scores = record.info.get("scores")  # discussions: [round][seat] correctness
    if isinstance(scores, list) and scores:
        return sum(float(scores[-1][s]) for s in seats) / len(seats)
    metrics = (record.info.get("metrics") or {}).get(agent) or {}
    for key in SUCCESS_METRICS:
        if key in metrics:
            return float(metrics[key])
    results = [record.results[s] if s < len(record.results) else "unfinished" for s in seats]
    if len(seats) == len(record.seats):
        # Self-play of one policy: a win for one seat is a loss for the other, so what the
        # policy can get right is playing the game through without an illegal move.
        return 0.0 if {"illegal", "unfinished"} & set(results) else 1.0
    return sum(_GAME_SCORE.get(r, 0.0) for r in results) / len(results)


class CurriculumTracker:
    def __init__(self, cfg: RunConfig, client: redis.Redis, run_id: str, resume: bool) -> None:
        self.ladder = build_ladder(cfg)
        self.task = self.ladder.task
        self.rule = Rule.from_config(cfg.curriculum, self.ladder.size)
        self.start = cfg.curriculum.start_level
        self.store = CurriculumStore(client, run_id)
        self.agents = [a.name for a in cfg.trainable_agents]
        for agent in self.agents:
            if not resume:
                self.store.reset(agent, self.task, self.start)
            state = self.store.load(agent, self.task, self.start)
            CURRICULUM_LEVEL.labels(agent, self.task).set(state.level)

    @classmethod
    def for_run(cls, cfg: RunConfig, client: redis.Redis, run_id: str,
                resume: bool) -> CurriculumTracker | None:
        return cls(cfg, client, run_id, resume) if cfg.curriculum.enabled else None

    def observe(self, records: list[EpisodeRecord]) -> dict[str, dict[str, float]]:
        """Count the update's episodes; per agent its level, success rate and level changes
        so far (the stats the trainer writes to metrics.jsonl)."""
        out: dict[str, dict[str, float]] = {}
        for agent in self.agents:
            state = self.store.load(agent, self.task, self.start)
            state.level = min(state.level, self.rule.top)
            mine = [r for r in records if (r.info.get(PAYLOAD_KEY) or {}).get("task") == self.task]
            counted = []
            for record, new in zip(mine, self.store.unseen(agent, self.task,
                                                           [r.episode_id for r in mine]),
                                   strict=True):
                played_at = (record.info[PAYLOAD_KEY] or {}).get("level")
                success = success_of(record, agent)
                if not new or played_at != state.level or success is None:
                    continue
                counted.append(record.episode_id)
                window = [*state.window, success][-self.rule.window:]  # what the rule sees
                move = observe(state, success, self.rule)
                if move:
                    log.info("curriculum: %s %s to %s level %d (success %.2f over the last %d)",
                             agent, "promoted" if move > 0 else "demoted", self.task,
                             state.level, sum(window) / len(window), len(window))
            self.store.save(agent, self.task, state, counted)
            CURRICULUM_LEVEL.labels(agent, self.task).set(state.level)
            stats = {"curriculum_level": float(state.level),
                     "curriculum_changes": float(state.changes)}
            if state.success_rate is not None:
                CURRICULUM_SUCCESS.labels(agent, self.task).set(state.success_rate)
                stats["curriculum_success"] = state.success_rate
            out[agent] = stats
        return out

