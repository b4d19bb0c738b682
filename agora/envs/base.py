"""The turn-based multi-agent environment protocol (docs/architecture.md "Environments").

Text in, text out: at each step one seat (``current_seat``) is asked to act; the env renders that
seat's view as chat messages, takes the agent's raw text back and applies it. The rollout runner
only ever talks to this protocol, so a new game or a debate is a new class, not a new runner.

An env never decides rewards: it reports what happened (``Outcome``). Turning outcomes into
rewards is the reward service's job, which replays the actions to check them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

# An OpenAI chat message: ``content`` is text, or a list of content parts (text and, for envs
# seen as images, ``image_url`` parts: agora/envs/images.py).
ChatMessage = dict[str, Any]


@dataclass
class StepResult:
    """What applying one action did."""

    legal: bool
    done: bool
    reason: str = ""


@dataclass
class Outcome:
    """How an episode ended, per seat. ``winner`` is None for a draw or an unfinished game."""

    winner: int | None
    draw: bool
    illegal_seat: int | None = None  # the seat that forfeited by an illegal or unparsable move
    reason: str = ""
    info: dict[str, object] = field(default_factory=dict)

    def result_for(self, seat: int) -> str:
        """'win' | 'loss' | 'draw' | 'illegal' from one seat's point of view."""
        if self.illegal_seat == seat:
            return "illegal"
        if self.draw:
            return "draw"
        return "win" if self.winner == seat else "loss"


@runtime_checkable
class TurnBasedEnv(Protocol):
    name: str
    num_seats: int

    def reset(self, seed: int) -> None: ...

    @property
    def current_seat(self) -> int: ...

    @property
    def done(self) -> bool: ...

    def observation(self, seat: int) -> list[ChatMessage]:
        """The chat messages that seat ``seat`` sees before acting."""
        ...

    def step(self, action: str) -> StepResult:
        """Apply the current seat's raw text action."""
        ...

    def outcome(self) -> Outcome: ...

    def role(self, seat: int) -> str:
        """The seat's role name (a mark, a debater's name), shown in records and metrics."""
        ...

    def legal_actions(self) -> list[str]:
        """Canonical action strings legal now (scripted bots use these)."""
        ...


DEFAULT_TURN_LIMIT = 64


def turn_limit(env: TurnBasedEnv) -> int:
    """How many moves an episode may take before the runner stops it as 'unfinished' (no
    reward). An env whose games run longer declares ``max_episode_turns``: a 2-player Hanabi
    game between scripted bots takes ~74 moves, and a cut game would be scored 0 in training
    and left out of evaluation."""
    return int(getattr(env, "max_episode_turns", DEFAULT_TURN_LIMIT))


def legal_completions(env: TurnBasedEnv, prefill: str) -> list[str] | None:
    """The env's legal actions as completions of ``prefill``; None (free text) when the env
    lists none now or none starts with the prefill."""
    choices = [a[len(prefill):] for a in env.legal_actions() if a.startswith(prefill)]
    return [c for c in choices if c] or None
