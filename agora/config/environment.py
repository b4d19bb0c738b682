"""The ``environment`` section: which env, who sits where, against whom; plus the env's own
options under its name (``environment.negotiation: {...}``).

The section is a union discriminated by ``name`` over the registered envs
(agora/envs/registry.py): ``environment_model(name)`` is the env's own model, the common fields
below plus its options section, built from its ``EnvSpec``. It is dispatched by hand (a
``before`` validator in ``RunConfig``) rather than with pydantic's ``Field(discriminator=...)``,
because that union would be fixed when this module is imported and an env registered later by a
plugin could never be named; the error paths are the same (``environment.negotiation.max_rounds``).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import Field, ValidationInfo, create_model, field_validator, model_validator

from agora.config.base import StrictModel
from agora.data.specs import TaskSpec
from agora.envs.images import ObservationMode
from agora.envs.registry import DRAWN_ENVS, ENV_NAMES, GAME_BOTS_ALL, REGISTRY, spec
from agora.envs.spec import EnvSpec

DEFAULT_ENV = "tictactoe"


class PoolConfig(StrictModel):
    """Frozen snapshots of the learners as opponents (``opponents: {pool: w}``;
    agora/train/snapshots.py).

    The trainer adds each seated learner's adapter as a snapshot at v0 and every
    ``snapshot_every`` updates, keeps each learner's newest ``max_snapshots``, rates all on one
    Elo scale, and draws (``sampling`` as in ``OpponentPool.sample``) for each pool episode one
    live learner and, for every other seat, a snapshot of that seat's agent (a learner's) or of
    the live learner (anyone else's seat); the worker serves each from vLLM under its own LoRA
    name (``<agent>@v<version>``)."""

    snapshot_every: int = Field(5, ge=1, description="trainer updates between snapshots")
    max_snapshots: int = Field(8, ge=1, le=64)
    # latest: the newest with latest_prob, else any; uniform; recency (newer more often);
    # pfsp: prioritised fictitious self-play, the snapshots the learner does not beat (by
    # their Elo) more often, weight (1 - p_win) ** pfsp_power.
    sampling: Literal["latest", "uniform", "recency", "pfsp"] = "latest"
    latest_prob: float = Field(0.5, ge=0.0, le=1.0)
    pfsp_power: float = Field(2.0, ge=0.0, le=10.0, description="pfsp: 0 uniform, higher "
                              "focuses on the hardest snapshots")


class EnvironmentConfig(StrictModel):
    """Which env (``name``), who sits where and against whom. The env's own options go in a
    section named after it (``environment.negotiation``, below), filled with its defaults when
    left out; another env's section is refused."""

    # One of the registered envs (agora/envs/registry.py).
    name: str = DEFAULT_ENV
    # Which agent sits in each seat for self-play episodes (a shared policy repeats its name).
    # In a discussion, one seat per discussing agent. In negotiation/story/code_debug/support a
    # seat may be a scripted context agent: ``context:<name>`` (a key of the run's
    # ``context_agents``).
    seats: list[str] = Field(..., min_length=1)
    # Fraction of episodes played against each opponent: "self" (the seats above), a scripted
    # bot name ("random", "minimax"; games only), or "pool" (frozen snapshots of the learners
    # in every other seat, see ``pool``). Against a bot or the pool the learner takes a random
    # one of the learners' seats.
    opponents: dict[str, float] = Field(default_factory=lambda: {"self": 1.0})
    illegal_move_penalty: float = -1.0
    prefill: str = Field("[", description="text the assistant turn starts with")
    # Discussions: answer-read-revise rounds, and where the questions come from.
    rounds: int = Field(2, ge=1, le=10)
    task: TaskSpec | None = None
    # Math discussions: how an agent gives its answer (agora/rewards/verifiers/program.py).
    # text: a written final answer. program: a Python block whose last printed line is the
    # answer, run in the reward service's sandbox. either: a program when it writes one.
    answer: Literal["text", "program", "either"] = "text"
    pool: PoolConfig = Field(default_factory=PoolConfig)
    # What each seat sees of the state (docs/vlm.md): text, image (a picture of the board in
    # place of its text drawing) or both. Image views need vision-language agents and an env
    # that draws itself (tictactoe, hanabi).
    observation: ObservationMode = "text"

    @field_validator("seats")
    @classmethod
    def _seat_count(cls, seats: list[str], info: ValidationInfo) -> list[str]:
        """Within the env's range (an env with roles is checked on its options, below)."""
        name = info.data.get("name")
        env = REGISTRY.get(name) if isinstance(name, str) else None
        if env is not None and env.roles is None:
            _check_count(name, seats, *env.seats)
        return seats

    @field_validator("opponents")
    @classmethod
    def _check_opponents(cls, opponents: dict[str, float]) -> dict[str, float]:
        known = {"self", "pool", *GAME_BOTS_ALL}
        unknown = set(opponents) - known
        if unknown:
            raise ValueError(f"unknown opponent(s) {sorted(unknown)}; choose from {sorted(known)}")
        if any(w < 0 for w in opponents.values()) or sum(opponents.values()) <= 0:
            raise ValueError("opponent weights must be >= 0 and not all zero")
        return opponents

    @model_validator(mode="after")
    def _env_needs(self) -> EnvironmentConfig:
        env = self.spec
        if env.check is not None:
            env.check(self)
        if self.observation != "text" and not env.images:
            raise ValueError(f"observation: {self.name} is shown as text only; envs that draw "
                             f"themselves as images: {list(DRAWN_ENVS)}")
        if env.bots and set(self.opponents) - {"self", "pool", *env.bots}:
            raise ValueError(f"opponents: {self.name}'s bots are {list(env.bots)}")
        if not env.bots and set(self.opponents) - {"self", "pool"}:
            raise ValueError(f"opponents: {self.name} plays against 'self' (the seats, context "
                             "agents included) or 'pool'; game bots play games only")
        roles = env.seat_roles(self.options)
        if roles is not None:
            _check_count(f"seats: {self.name} ({', '.join(roles)})", self.seats, len(roles),
                         len(roles))
        return self

    @property
    def spec(self) -> EnvSpec:
        return spec(self.name)

    @property
    def options(self) -> Any:
        """The env's options section (None for an env without options)."""
        return getattr(self, self.name, None) if self.spec.options is not None else None

    def seat_roles(self) -> list[str | None]:
        """Each seat's role where it constrains who may sit there (code_debug's author and
        fixer), else None."""
        roles = self.spec.seat_roles(self.options)
        return list(roles) if roles is not None else [None] * len(self.seats)


def _check_count(what: str, seats: list[str], low: int, high: int) -> None:
    if not low <= len(seats) <= high:
        size = str(low) if low == high else f"{low}-{high}"
        raise ValueError(f"{what} has {size} seats, got {len(seats)}")


@functools.cache
def environment_model(name: str) -> type[EnvironmentConfig]:
    """The environment section of env ``name``: ``name`` fixed to it, and its options under
    its name, filled with their defaults when left out."""
    env = spec(name)
    fields: dict[str, Any] = {"name": (Literal[name], name)}  # type: ignore[valid-type]
    if env.options is not None:
        fields[name] = (env.options, Field(default_factory=env.options))
    title = "".join(part.title() for part in name.split("_")) + "Environment"
    return create_model(title, __base__=EnvironmentConfig, __module__=__name__, **fields)


def environment_of(data: object) -> object:
    """Dispatch a raw environment section to its env's model (RunConfig's before validator):
    an unknown name, or another env's options section, is named in the error."""
    if not isinstance(data, dict):
        return data  # pydantic reports the wrong type, or takes a model as it is
    name = data.get("name", DEFAULT_ENV)
    if not isinstance(name, str) or name not in REGISTRY:
        raise ValueError(f"name: unknown environment {name!r}; known: {list(ENV_NAMES)}")
    for key in data:
        if key != name and key in REGISTRY and REGISTRY[key].options is not None:
            raise ValueError(f"{key}: options of '{key}', but environment.name is '{name}'")
    return environment_model(name).model_validate(data)


def environment_json_schema() -> dict:
    """The section's JSON schema as the union it is (``oneOf``, discriminated by ``name``)."""
    variants = {name: environment_model(name).model_json_schema() for name in ENV_NAMES}
    return {"oneOf": list(variants.values()),
            "discriminator": {"propertyName": "name"}}

