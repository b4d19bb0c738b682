"""The ``curriculum:`` section of a run config.

Kept out of ``agora.config.run`` (which only imports it) so the curriculum's knobs and their checks
sit beside the code that reads them. Only checks that need no heavy import happen here; how many
levels a reasoning-gym dataset's own curriculum has is checked by ``ladders.ladder_problem``
before a run starts (``import reasoning_gym`` costs ~5 s, which config validation should not).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Environments with difficulty levels, and for a discussion the task sources that have them.
CURRICULUM_ENVS = ("tictactoe", "discussion", "support")
CURRICULUM_TASK_SOURCES = ("reasoning_gym",)


class CurriculumConfig(BaseModel):
    """Promote an agent to the next level when its success rate over the last ``window``
    episodes at its level reaches ``promote_at``; demote it when the rate falls below
    ``demote_below``; never change a level before ``min_episodes`` episodes were played at it,
    and wait ``backoff`` times longer before each new promotion to a level the agent was
    demoted from (``controller.py`` says why).

    Success of one episode for one agent (0..1, ``tracker.success_of``): a discussion's
    last-round correctness; an env's own success metric where it reports one; in a game
    against others, win = 1 and draw = 0.5; in a game the agent plays against itself (a shared
    policy in every seat), finishing without an illegal move.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = False
    levels: int | None = Field(None, ge=2, description="use the task's first N levels (easiest "
                               "first); default: all of them")
    start_level: int = Field(0, ge=0)
    window: int = Field(32, ge=1, le=10_000, description="episodes in the success rate")
    promote_at: float = Field(0.8, ge=0.0, le=1.0)
    demote_below: float = Field(0.2, ge=0.0, le=1.0)
    min_episodes: int | None = Field(None, ge=1, le=100_000, description="episodes at a level "
                                     "before it may change again; default: window")
    backoff: float = Field(2.0, ge=1.0, le=16.0, description="each demotion from a level "
                           "multiplies the episodes needed before promotion to it again by "
                           "this (1: no backoff)")
    # Reasoning-gym tasks only: one dict of dataset knobs per level, easiest first, replacing
    # the built-in ladder (e.g. [{max_terms: 2}, {max_terms: 4}]).
    knobs: list[dict[str, Any]] | None = Field(None, min_length=2)

    @model_validator(mode="after")
    def _consistent(self) -> CurriculumConfig:
        if self.demote_below > self.promote_at:
            raise ValueError(f"demote_below ({self.demote_below}) must not exceed promote_at "
                             f"({self.promote_at}): the band between them keeps a level steady")
        if self.knobs is not None and self.levels is not None:
            raise ValueError("levels: give levels or knobs, not both (knobs sets one level "
                             "per entry)")
        count = len(self.knobs) if self.knobs is not None else self.levels
        if count is not None and self.start_level >= count:
            raise ValueError(f"start_level: {self.start_level} is not below the number of "
                             f"levels ({count})")
        return self

    @property
    def patience(self) -> int:
        """Episodes at a level before it may change (hysteresis)."""
        return self.min_episodes or self.window


def fit_problem(curriculum: CurriculumConfig, env_name: str, task_source: str | None) -> str | None:
    """Why this curriculum cannot drive this environment (None if it can); the message names
    the field at fault, as config errors do."""
    if not curriculum.enabled:
        return None
    if env_name not in CURRICULUM_ENVS:
        return (f"curriculum: environment '{env_name}' has no difficulty levels (curricula "
                f"exist for {list(CURRICULUM_ENVS)})")
    if env_name == "discussion" and task_source not in CURRICULUM_TASK_SOURCES:
        return (f"curriculum: a discussion on '{task_source}' tasks has no difficulty levels "
                "(only reasoning_gym tasks do)")
    if curriculum.knobs is not None and env_name != "discussion":
        return f"curriculum.knobs: reasoning-gym knobs, but the environment is '{env_name}'"
    return None
