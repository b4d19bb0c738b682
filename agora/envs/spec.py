"""What an environment tells the rest of agora about itself: one ``EnvSpec`` per env.

An env module ends with its ``SPEC``; ``agora/envs/registry.py`` collects them (the built-in
envs and those other packages register under the ``agora.envs`` entry point group). The config,
the rollout worker, the scorers, the evaluation and the gateway read an env's facts and builders
from its spec, so adding an env is one file (``tests/plugins/agora_toy_env`` shows one).

References to code that would import the config or the rollout layer (an env's scorer, its
scripted bots) are ``"module:attribute"`` strings, loaded on first use: an env module stays
importable from the config module without an import circle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict

from agora.envs.base import TurnBasedEnv


class EnvOptions(BaseModel):
    """Base of an env's options, the config section named after it (``environment.<name>``):
    unknown keys and NaN/inf refused, as in every config section."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass(frozen=True)
class DefaultPlay:
    """How an agent plays this env when its own run trained on another (the gateway's
    episodes): the assistant turn's prefill and the sampling limits."""

    prefill: str
    max_tokens: int
    stop: tuple[str, ...]


# How an env is evaluated (agora/evaluation/runner.py): games against bots and snapshots in a
# round robin (win/draw/loss), a cooperative game dealt the same to every partner ("duplicate"),
# discussions on held-out tasks, or scored episodes against context agents.
Evaluation = Literal["round_robin", "duplicate", "discussion", "episodes"]


@dataclass(frozen=True)
class EnvSpec:
    name: str
    # Player counts it allows (inclusive); ``roles`` fixes the count where it is given.
    seats: tuple[int, int]
    # A fresh env with n seats and default options (the reward service's replays, the
    # gateway's episodes, bots); None: every episode needs the config's input (a task).
    make: Callable[[int], TurnBasedEnv] | None = None
    # The episode's env from the config's environment section and the trainer's episode
    # payload (seed, task, level); None: ``make(len(section.seats))``.
    build: Callable[[Any, dict], TurnBasedEnv] | None = None
    # Its options (the section ``environment.<name>``, filled with defaults when left out).
    options: type[EnvOptions] | type[BaseModel] | None = None
    # The seats' roles given the options, where a role decides who may sit there (code_debug's
    # author and fixer); the seat count is then the roles' count.
    roles: Callable[[Any], list[str]] | None = None
    # Scripted bots that can fill the other seats (name -> class or "module:Class"): a game.
    # They are opponents in training ("environment.opponents") and evaluation ("eval.opponents").
    bots: dict[str, Callable[[], Any] | str] = field(default_factory=dict)
    # Who demonstrates it for warm starts (agora/train/warm_start.py): bot or context agent
    # names (each seat takes the first that fits its role, unless the warm start names one),
    # or "task_answer" (the task's ground truth).
    demonstrators: tuple[str, ...] = ()
    # Scripted players that only demonstrate, never opponents in training or evaluation
    # (name -> class or "module:Class"), for ``demonstrators`` to name.
    demonstrator_bots: dict[str, Callable[[], Any] | str] = field(default_factory=dict)
    # Its game tree is small and has no chance in it (Tic-Tac-Toe: the demonstrator meets at
    # most a few hundred positions): a warm start may demonstrate every position instead of
    # sampling games (``agora warm-start --every-position``).
    enumerable: bool = False
    # The whole table wins or loses together, with a running team score (reward.team_credit).
    cooperative: bool = False
    # Seats may be scripted context agents (``context:<name>``).
    context_seats: bool = False
    # reward.verifier values that score it (the first is the default); a game's is
    # "game_outcome": the reward service replays it.
    verifiers: tuple[str, ...] = ("game_outcome",)
    # The worker's scorer, "module:function" taking (cfg, record, judge) -> Scored
    # (agora/rollout/scoring.py); None: the reward service's verifier scores it.
    scorer: str | None = None
    # Per-agent metrics its scorer reports (name -> what it is): the trainer shows each one's
    # mean over the agent's last 100 episodes in metrics.jsonl, Prometheus and the progress view.
    metrics: dict[str, str] = field(default_factory=dict)
    # The metric that says an episode's task was done, if it has one (``agora eval`` reports
    # it as "success").
    success_metric: str | None = None
    # How it is evaluated (see Evaluation); None: ``agora eval`` refuses it.
    evaluation: Evaluation | None = None
    # Evaluation needs the judge service / the reward service's sandbox.
    judged: bool = False
    sandboxed: bool = False
    # Extra checks of the config's environment section (raise ValueError with the reason).
    check: Callable[[Any], None] | None = None
    # It can show its state as an image (``environment.observation: image | both``; the
    # env's constructor takes ``observation``, agora/envs/images.py).
    images: bool = False
    # How the gateway plays it for an agent trained elsewhere (None: it cannot).
    play: DefaultPlay | None = None

    @property
    def is_game(self) -> bool:
        """Scored by replaying it (win/draw/loss or a team score), with scripted bots."""
        return bool(self.bots)

    def seat_roles(self, options: Any) -> list[str] | None:
        return self.roles(options) if self.roles is not None else None

    def bot(self, name: str) -> Any:
        """A fresh scripted bot of this env (an opponent or a demonstrator-only bot)."""
        return load({**self.bots, **self.demonstrator_bots}[name])()

    def load_scorer(self) -> Callable | None:
        return load(self.scorer) if self.scorer else None


def load(ref: Any) -> Any:
    """``"package.module:attribute"`` -> the attribute; anything else is returned as is."""
    if not isinstance(ref, str):
        return ref
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def _known_rubric(name: str) -> str:
    """A named judge rubric (agora/judge/rubrics.py), or ValueError listing them."""
    # Imported here, not at the top: the judge package's settings import the config.
    from agora.judge.rubrics import NAMED_RUBRICS

    if name not in NAMED_RUBRICS:
        raise ValueError(f"unknown rubric '{name}'; built-in rubrics: {sorted(NAMED_RUBRICS)}")
    return name


# An options field naming a judge rubric, checked against the built-in ones.
RubricName = Annotated[str, AfterValidator(_known_rubric)]
