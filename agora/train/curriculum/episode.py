"""The rollout worker's side: read the level, shape the episode at it, label the record.

Called from the rollout task (``agora/rollout/worker.py``) in three places: ``prepare`` before
the env is built (reads the level from Redis, adds the level's payload fields: an opening, a
question drawn with the level's knobs, an env level), ``shape_env`` on the built env, and
``label`` on the finished record (``info["curriculum"]``, which the trainer reads back).

An episode has one level. When several trainable agents share it (a discussion between two
learners), it is played at the lowest of their levels, so no one is pushed past what it has
mastered; the trainer counts it only for agents whose level it was (``tracker.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from agora.train.curriculum.ladders import ladder_for
from agora.train.curriculum.store import CurriculumStore

if TYPE_CHECKING:
    from agora.config.run import RunConfig
    from agora.envs.base import TurnBasedEnv
    from agora.rollout.records import EpisodeRecord

PAYLOAD_KEY = "curriculum"


def learners_in_episode(cfg: RunConfig, payload: dict) -> list[str]:
    """The trainable agents seated in this episode (all trainable agents if none is)."""
    from agora.rollout.seating import seat_names

    trainable = [a.name for a in cfg.trainable_agents]
    seated = [name for name in dict.fromkeys(seat_names(cfg, payload)) if name in trainable]
    return seated or trainable


def prepare(cfg: RunConfig, payload: dict, client: redis.Redis) -> dict:
    """The payload with the episode's level and what it changes (a new dict; the same one if
    the run has no curriculum or the payload was prepared already). A task Celery redelivers
    carries the original payload, so it reads the level again: it is played at the live one."""
    if not cfg.curriculum.enabled or PAYLOAD_KEY in payload:
        return payload
    ladder = ladder_for(cfg)
    store = CurriculumStore(client, payload["run_id"])
    top = ladder.size - 1
    levels = {agent: store.level(agent, ladder.task, cfg.curriculum.start_level, top)
              for agent in learners_in_episode(cfg, payload)}
    level = min(levels.values(), default=min(cfg.curriculum.start_level, top))
    info = {"task": ladder.task, "level": level, "levels": ladder.size, "agents": levels,
            "params": ladder.params(level)}
    return {**payload, **ladder.shape(payload, level), PAYLOAD_KEY: info}


def shape_env(cfg: RunConfig, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
    if PAYLOAD_KEY not in payload:
        return env
    return ladder_for(cfg).shape_env(env, payload)


def label(record: EpisodeRecord, payload: dict) -> None:
    """Record the level the episode was played at (and the opening it started from)."""
    if PAYLOAD_KEY not in payload:
        return
    record.info[PAYLOAD_KEY] = payload[PAYLOAD_KEY]
    if payload.get("opening"):
        record.info["opening"] = list(payload["opening"])


def verification_fields(payload: dict) -> dict:
    """Extra fields of a game's reward-service request: the opening it must replay first."""
    return {"opening": list(payload["opening"])} if payload.get("opening") else {}
