"""What a difficulty level means for each task: a ladder of levels, easiest first.

A ladder answers three questions: how many levels the task has, what a level's parameters
are (shown in records), and how an episode is shaped at a level. The worker asks it when it
builds an episode (``episode.py``):

* ``tictactoe``: an opening is pre-played (``openings.py``): win in one, endgame, midgame, then
  the empty board, which is the real game;
* a reasoning-gym discussion: the question is drawn with the level's dataset knobs. Datasets
  with a curriculum of their own in reasoning-gym (``basic_arithmetic``: number of terms and of
  digits) use it, through its ``set_global_level``/``generate_configuration``; ``gsm_symbolic``
  has none (its only knob, ``difficulty``, must stay 1.0), so its levels bound the number of
  calculation steps of the worked solution (``=`` signs in ``answer_cot``: 2, 3, 4, any);
  ``curriculum.knobs`` gives any dataset a ladder of explicit knobs;
* an env that takes its own ``level``: the tool-use ``support`` task (curriculum levels 0-2 are
  its levels 1-3: one lookup, lookup + arithmetic, two lookups + arithmetic); ``ENV_LEVELS``
  below is the extension point for more: a level count and how a level reaches the env.

Ladders are cheap to build except reasoning-gym's (importing it takes ~5 s); a worker builds one
per config and keeps it (``ladder_for`` is cached on the config's JSON).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agora.data.base import Task, TaskError, jsonable
from agora.train.curriculum.openings import OPENING_LEVELS, opening

if TYPE_CHECKING:
    from agora.config.run import RunConfig
    from agora.data.specs import ReasoningGymSpec
    from agora.envs.base import TurnBasedEnv


class Ladder(Protocol):
    task: str  # the name levels are kept under (Redis keys, metrics labels)

    @property
    def size(self) -> int: ...

    def params(self, level: int) -> dict[str, Any]:
        """What changes at ``level`` (recorded with every episode played at it)."""
        ...

    def shape(self, payload: dict, level: int) -> dict:
        """Payload fields that set up an episode at ``level`` (merged into the payload)."""
        ...

    def shape_env(self, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
        """The episode's env as the level wants it (the same env if nothing changes)."""
        ...


# --- Tic-Tac-Toe --------------------------------------------------------------------------------

@dataclass(frozen=True)
class TicTacToeLadder:
    task: str = "tictactoe"

    @property
    def size(self) -> int:
        return len(OPENING_LEVELS)

    def params(self, level: int) -> dict[str, Any]:
        spec = OPENING_LEVELS[level]
        return {"opening": spec.name, "pre_placed": list(spec.moves)}

    def shape(self, payload: dict, level: int) -> dict:
        # Against a bot or a snapshot the learner's seat moves after the opening; in self-play
        # ``learner_seat`` is a fair coin (episode_payload draws it either way).
        mover = int(payload.get("learner_seat", 0)) % 2
        cells = opening(level, mover, int(payload["seed"]))
        return {"opening": [f"[{cell}]" for cell in cells]}

    def shape_env(self, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
        actions = payload.get("opening") or []
        return OpeningEnv(env, list(actions)) if actions else env


class OpeningEnv:
    """An env whose ``reset`` also plays ``actions`` (not recorded as anyone's turns); every
    other attribute is the wrapped env's, so runners and bots see the env itself."""

    def __init__(self, env: TurnBasedEnv, actions: list[str]) -> None:
        self._env = env
        self.opening = actions

    def reset(self, seed: int) -> None:
        self._env.reset(seed)
        for index, action in enumerate(self.opening):
            if self._env.done or not self._env.step(action).legal:
                raise ValueError(f"opening move {index} ({action!r}) is not legal")
        if self._env.done:
            raise ValueError("the opening ends the game")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)


# --- reasoning-gym ------------------------------------------------------------------------------

def reasoning_steps(task: Task) -> int:
    """Calculation steps of a reasoning-gym task's worked solution (``=`` in ``answer_cot``)."""
    cot = task.metadata.get("rg_entry", {}).get("answer_cot", "")
    return str(cot).count("=")


# gsm_symbolic: the most calculation steps a question may need at each level (None: any).
GSM_STEP_BOUNDS: tuple[int | None, ...] = (2, 3, 4, None)
_SCAN = 2000  # items tried for one question within a level's step bound


@dataclass(frozen=True)
class KnobLadder:
    """Reasoning-gym knobs per level, merged over the spec's own ``config``."""

    spec: ReasoningGymSpec
    knobs: tuple[dict[str, Any], ...]

    @property
    def task(self) -> str:
        return self.spec.name

    @property
    def size(self) -> int:
        return len(self.knobs)

    def params(self, level: int) -> dict[str, Any]:
        return dict(self.knobs[level])

    def level_spec(self, level: int) -> ReasoningGymSpec:
        return self.spec.model_copy(update={"config": {**self.spec.config, **self.knobs[level]},
                                            "difficulty": level})

    def shape(self, payload: dict, level: int) -> dict:
        from agora.data.rgym import train_task_at

        task = train_task_at(self.level_spec(level), int(payload["seed"]))
        return {"task": task.model_dump(mode="json")}

    def shape_env(self, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
        return env


@dataclass(frozen=True)
class StepsLadder:
    """Questions filtered by how many calculation steps their solution takes."""

    spec: ReasoningGymSpec
    bounds: tuple[int | None, ...] = GSM_STEP_BOUNDS

    @property
    def task(self) -> str:
        return self.spec.name

    @property
    def size(self) -> int:
        return len(self.bounds)

    def params(self, level: int) -> dict[str, Any]:
        return {"max_steps": self.bounds[level]}

    def shape(self, payload: dict, level: int) -> dict:
        from agora.data.rgym import train_task_at

        bound = self.bounds[level]
        start = int(payload["seed"])
        for offset in range(min(_SCAN, self.spec.size)):
            task = train_task_at(self.spec, start + offset)
            if bound is None or reasoning_steps(task) <= bound:
                task = task.model_copy(update={"difficulty": level})
                return {"task": task.model_dump(mode="json")}
        raise TaskError(f"{self.spec.name}: no question of at most {bound} steps among "
                        f"{min(_SCAN, self.spec.size)} train items")

    def shape_env(self, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
        return env


def reasoning_gym_knobs(name: str, config: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The knobs of each level of reasoning-gym's own curriculum for ``name`` (None if it has
    none): every attribute at the global level, as ``generate_configuration`` sets them."""
    from reasoning_gym.coaching.attributes import RangeAttributeDefinition
    from reasoning_gym.factory import create_curriculum, has_curriculum

    if not has_curriculum(name):
        return None
    curriculum = create_curriculum(name)
    attributes = list(curriculum.attributes.values())
    fields = [name for attr in attributes for name in (
        (attr.lower_field_name, attr.upper_field_name)
        if isinstance(attr, RangeAttributeDefinition) else (attr.field_name,))]
    levels = []
    for level in range(max(len(attr.levels) for attr in attributes)):
        curriculum.set_global_level(level)
        try:
            generated = curriculum.generate_configuration(defaults=dict(config))
        except (TypeError, ValueError, AssertionError) as err:
            raise CurriculumError(f"environment.task.config: reasoning-gym's {name} rejects "
                                  f"{config}: {err}") from err
        levels.append(jsonable({f: getattr(generated, f) for f in fields}))
    return levels


# --- envs with a level of their own -------------------------------------------------------------

@dataclass(frozen=True)
class EnvLevels:
    """An env that takes its difficulty as a ``level`` int: how many it has and how one is set.
    ``apply`` returns the env to play (the default sets ``env.level`` before ``reset``)."""

    size: int
    apply: Callable[[Any, int], Any] = field(default=lambda env, level: _set_level(env, level))


def _set_level(env: Any, level: int) -> Any:
    env.level = level
    return env


# Envs with a level of their own register here (``EnvLevels(size=<level count>)``, or an
# ``apply`` that rebuilds the env at the level); the curriculum drives them like the ladders
# above. The tool-use support task (agora/envs/support.py) is one.
def _support_level(env: Any, level: int) -> Any:
    """The support env's levels are 1-3 (``SupportEnv.level``: 1 lookup; + arithmetic; two
    lookups + arithmetic); the curriculum counts from 0."""
    env.level = level + 1
    return env


ENV_LEVELS: dict[str, EnvLevels] = {"support": EnvLevels(size=3, apply=_support_level)}


@dataclass(frozen=True)
class EnvLevelLadder:
    task: str
    levels: EnvLevels

    @property
    def size(self) -> int:
        return self.levels.size

    def params(self, level: int) -> dict[str, Any]:
        return {"level": level}

    def shape(self, payload: dict, level: int) -> dict:
        return {"env_level": level}

    def shape_env(self, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
        return self.levels.apply(env, int(payload["env_level"]))


# --- choosing and checking ----------------------------------------------------------------------

@dataclass(frozen=True)
class Trimmed:
    """The first ``size`` levels of a ladder (``curriculum.levels``)."""

    inner: Ladder
    size: int

    @property
    def task(self) -> str:
        return self.inner.task

    def params(self, level: int) -> dict[str, Any]:
        return self.inner.params(level)

    def shape(self, payload: dict, level: int) -> dict:
        return self.inner.shape(payload, level)

    def shape_env(self, env: TurnBasedEnv, payload: dict) -> TurnBasedEnv:
        return self.inner.shape_env(env, payload)


class CurriculumError(ValueError):
    """A curriculum that does not fit its task; the message names the field at fault."""


def build_ladder(cfg: RunConfig) -> Ladder:
    """The ladder of the run's task, cut to ``curriculum.levels``; ``CurriculumError`` if the
    config asks for levels the task does not have."""
    settings = cfg.curriculum
    env = cfg.environment
    ladder: Ladder
    if env.name == "tictactoe":
        ladder = TicTacToeLadder()
    elif env.name in ENV_LEVELS:
        ladder = EnvLevelLadder(env.name, ENV_LEVELS[env.name])
    elif env.name == "discussion" and env.task is not None and env.task.source == "reasoning_gym":
        ladder = _reasoning_gym_ladder(env.task, settings.knobs)
    else:
        raise CurriculumError(f"curriculum: environment '{env.name}' has no difficulty levels "
                              "here (see agora/train/curriculum/ladders.py, ENV_LEVELS)")
    if settings.levels is not None:
        if settings.levels > ladder.size:
            raise CurriculumError(f"curriculum.levels: {ladder.task} has {ladder.size} levels, "
                                  f"not {settings.levels}")
        ladder = Trimmed(ladder, settings.levels)
    if settings.start_level >= ladder.size:
        raise CurriculumError(f"curriculum.start_level: {ladder.task} has levels 0-"
                              f"{ladder.size - 1}, not {settings.start_level}")
    return ladder


def _reasoning_gym_ladder(spec: ReasoningGymSpec, knobs: list[dict] | None) -> Ladder:
    if knobs is None:
        built_in = reasoning_gym_knobs(spec.name, spec.config)
        if built_in is not None:
            return KnobLadder(spec, tuple(built_in))
        if spec.name == "gsm_symbolic":
            return StepsLadder(spec)
        raise CurriculumError(f"curriculum: reasoning-gym's '{spec.name}' has no curriculum of "
                              "its own; give curriculum.knobs (one dict of its knobs per level)")
    return KnobLadder(spec, tuple(jsonable(k) for k in knobs))


@functools.lru_cache(maxsize=8)
def _cached_ladder(config_json: str) -> Ladder:
    from agora.config.run import parse_config

    return build_ladder(parse_config(json.loads(config_json), "<curriculum>"))


def ladder_for(cfg: RunConfig) -> Ladder:
    """``build_ladder``, built once per config in a process (workers call it per episode)."""
    return _cached_ladder(cfg.model_dump_json())


def ladder_problem(cfg: RunConfig) -> str | None:
    """Why the run's curriculum cannot start (None if it can): the ladder is built and one
    episode is shaped at every level, so bad knobs fail before any process starts."""
    if not cfg.curriculum.enabled:
        return None
    try:
        ladder = build_ladder(cfg)
        for level in range(ladder.size):
            ladder.shape({"seed": 0, "learner_seat": 0}, level)
    except (CurriculumError, TaskError) as err:
        return str(err)
    return None
