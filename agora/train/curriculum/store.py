"""Curriculum state in Redis: one level per (agent, task), written by the trainer, read by
rollout workers when they build an episode.

Keys, per (agent, task), under the run's prefix:

* ``agora:{run}:curriculum:{agent}:{task}``: hash with ``level``, ``played`` (episodes at it
  since it was set), ``changes`` and ``demoted:{L}`` (times demoted from level L: the backoff);
* ``...:window``: list of the last successes at the level (floats, oldest first);
* ``...:seen``: set of the episode ids already counted, so a trainer resumed after a crash,
  which re-reads the entries it had not acknowledged, does not count them twice.

The trainer is the only writer (one ``MULTI`` per update), so reads never see half an update.
The run's Redis persists to its folder, so levels survive ``agora up --resume`` as well as a
trainer restart.
"""

from __future__ import annotations

import redis

from agora.train.curriculum.controller import LevelState

DEMOTED = "demoted:"  # hash field prefix: demotions per level


class CurriculumStore:
    def __init__(self, client: redis.Redis, run_id: str) -> None:
        self.r = client
        self.run_id = run_id

    def key(self, agent: str, task: str) -> str:
        return f"agora:{self.run_id}:curriculum:{agent}:{task}"

    # --- workers -----------------------------------------------------------------------------
    def level(self, agent: str, task: str, default: int, top: int) -> int:
        """The agent's live level at ``task`` (``default`` before the trainer set one), within
        ``0..top`` even if the config's ladder got shorter since it was written."""
        raw = self.r.hget(self.key(agent, task), "level")
        level = default if raw is None else int(raw)
        return max(0, min(top, level))

    # --- trainer -----------------------------------------------------------------------------
    def load(self, agent: str, task: str, default: int) -> LevelState:
        key = self.key(agent, task)
        pipe = self.r.pipeline(transaction=True)
        pipe.hgetall(key)
        pipe.lrange(key + ":window", 0, -1)
        fields, window = pipe.execute()
        fields = {_s(k): int(v) for k, v in fields.items()}
        if "level" not in fields:
            return LevelState(level=default)
        demotions = {int(name.removeprefix(DEMOTED)): count for name, count in fields.items()
                     if name.startswith(DEMOTED)}
        return LevelState(level=fields["level"], window=[float(x) for x in window],
                          played=fields.get("played", 0), changes=fields.get("changes", 0),
                          demotions=demotions)

    def unseen(self, agent: str, task: str, episode_ids: list[str]) -> list[bool]:
        """For each id, whether it has not been counted for this (agent, task) yet."""
        if not episode_ids:
            return []
        seen = self.r.smismember(self.key(agent, task) + ":seen", episode_ids)
        return [not flag for flag in seen]

    def save(self, agent: str, task: str, state: LevelState, counted: list[str]) -> None:
        key = self.key(agent, task)
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(key, mapping={"level": state.level, "played": state.played,
                                "changes": state.changes,
                                **{f"{DEMOTED}{lv}": n for lv, n in state.demotions.items()}})
        pipe.delete(key + ":window")
        if state.window:
            pipe.rpush(key + ":window", *state.window)
        if counted:
            pipe.sadd(key + ":seen", *counted)
        pipe.execute()

    def reset(self, agent: str, task: str, level: int) -> None:
        """A fresh run: forget any state a reused run id left, start at ``level``."""
        key = self.key(agent, task)
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(key, key + ":window", key + ":seen")
        pipe.hset(key, mapping={"level": level, "played": 0, "changes": 0})
        pipe.execute()


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
