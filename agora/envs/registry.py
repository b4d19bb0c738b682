"""Every environment agora knows, by name: the built-in envs' specs and those other packages
register under the ``agora.envs`` entry point group (``[project.entry-points."agora.envs"]
mygame = "my_package.my_env:SPEC"``), so a new env is one file, in or outside this repository.

The config, the rollout worker, the scorers, the evaluation and the gateway read an env's facts
and builders from here (``spec(name)``); the tables below are views for the code that asks one
question of every env (which are games, which take context agents, ...).
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points

from agora.envs.base import TurnBasedEnv
from agora.envs.spec import EnvSpec

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "agora.envs"
BUILTIN_MODULES = ("agora.envs.tictactoe", "agora.envs.hanabi", "agora.envs.discussion",
                   "agora.envs.negotiation", "agora.envs.story", "agora.envs.code_debug",
                   "agora.envs.support_options", "agora.envs.research")


def _builtin_specs() -> list[EnvSpec]:
    return [importlib.import_module(module).SPEC for module in BUILTIN_MODULES]


def _plugin_specs(builtin: set[str]) -> list[EnvSpec]:
    """The specs installed packages register; one that fails to load or takes a built-in's
    name is skipped with a warning rather than breaking every env."""
    found = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            spec = point.load()
        except Exception as err:  # a broken plugin must not take the built-in envs down
            log.warning("env plugin %s (%s) failed to load: %s", point.name, point.value, err)
            continue
        if not isinstance(spec, EnvSpec) or spec.name in builtin:
            log.warning("env plugin %s: not an EnvSpec or a built-in env's name; skipped",
                        point.value)
            continue
        found.append(spec)
    return found


BUILTIN: tuple[EnvSpec, ...] = tuple(_builtin_specs())
SPECS: tuple[EnvSpec, ...] = BUILTIN + tuple(_plugin_specs({s.name for s in BUILTIN}))
REGISTRY: dict[str, EnvSpec] = {s.name: s for s in SPECS}
ENV_NAMES: tuple[str, ...] = tuple(REGISTRY)


def spec(name: str) -> EnvSpec:
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown environment '{name}'; known: {list(ENV_NAMES)}") from None


def make_env(name: str, num_seats: int | None = None) -> TurnBasedEnv:
    """A fresh env with default options; ``num_seats`` picks the player count of games that
    have several (default: the fewest)."""
    env_spec = spec(name)
    if env_spec.make is None:
        raise ValueError(f"{name}: every episode needs its run config's input; build it from "
                         "the config (agora.rollout.seating.build_env)")
    low, high = env_spec.seats
    seats = low if num_seats is None else num_seats
    if not low <= seats <= high:
        size = str(low) if low == high else f"{low}-{high}"
        raise ValueError(f"{name} has {size} seats, got {seats}")
    return env_spec.make(seats)


def make_bot(name: str):
    """A fresh scripted bot by name, whichever game it plays (``agora.agents.bots``)."""
    for env_spec in SPECS:
        if name in env_spec.bots:
            return env_spec.bot(name)
    raise ValueError(f"unknown bot '{name}'; known: {sorted(GAME_BOTS_ALL)}")


# Views the rest of the code reads.
GAME_BOTS: dict[str, tuple[str, ...]] = {s.name: tuple(s.bots) for s in SPECS if s.bots}
GAME_BOTS_ALL: tuple[str, ...] = tuple(b for bots in GAME_BOTS.values() for b in bots)
COOPERATIVE_GAMES: tuple[str, ...] = tuple(s.name for s in SPECS if s.cooperative)
CONTEXT_ENVS: tuple[str, ...] = tuple(s.name for s in SPECS if s.context_seats)
DRAWN_ENVS: tuple[str, ...] = tuple(s.name for s in SPECS if s.images)  # observation: image
ENV_VERIFIERS: dict[str, tuple[str, ...]] = {s.name: s.verifiers for s in SPECS}
ENV_METRICS: dict[str, dict[str, str]] = {s.name: s.metrics for s in SPECS if s.metrics}
