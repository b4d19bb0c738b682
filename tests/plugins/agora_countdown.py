"""Countdown: a whole agora environment in one file, as a user would add one.

Two players take turns taking 1 or 2 from a counter; whoever takes the last one wins. The file
holds the env (agora.envs.base.TurnBasedEnv), a scripted bot, and the ``SPEC`` that tells agora
everything else (seat count, bots, how it is evaluated and played in the gateway). It is
registered like an installed package's env, through the ``agora.envs`` entry point group
(tests/integration/test_env_plugin.py writes that metadata); nothing in agora names it.
"""

from __future__ import annotations

import random
import re

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.spec import DefaultPlay, EnvSpec

MOVE = re.compile(r"\[\s*([12])\s*\]")


class Countdown:
    name = "countdown"
    num_seats = 2

    def __init__(self) -> None:
        self.reset(0)

    def reset(self, seed: int = 0) -> None:
        self.left = 5 + seed % 3
        self.history: list[int] = []
        self._seat = 0
        self._outcome: Outcome | None = None

    @property
    def current_seat(self) -> int:
        return self._seat

    @property
    def done(self) -> bool:
        return self._outcome is not None

    def role(self, seat: int) -> str:
        return ("first", "second")[seat]

    def legal_actions(self) -> list[str]:
        return [f"[{n}]" for n in (1, 2) if n <= self.left]

    def observation(self, seat: int) -> list[ChatMessage]:
        return [{"role": "system", "content": "Take 1 or 2 from the counter; whoever takes the "
                                              "last one wins. Answer [1] or [2]."},
                {"role": "user", "content": f"The counter is at {self.left}. Your move?"}]

    def step(self, action: str) -> StepResult:
        match = MOVE.search(action)
        take = int(match.group(1)) if match else 0
        if take == 0 or take > self.left:
            self._outcome = Outcome(winner=1 - self._seat, draw=False, illegal_seat=self._seat,
                                    reason=f"illegal move {action!r}")
            return StepResult(legal=False, done=True, reason=self._outcome.reason)
        self.left -= take
        self.history.append(take)
        if self.left == 0:
            self._outcome = Outcome(winner=self._seat, draw=False, reason="took the last one")
            return StepResult(legal=True, done=True)
        self._seat = 1 - self._seat
        return StepResult(legal=True, done=False)

    def outcome(self) -> Outcome:
        return self._outcome or Outcome(winner=None, draw=False, reason="unfinished")


class CountdownBot:
    """Leaves the counter at a multiple of 3 when it can (the winning strategy)."""

    name = "countdown_bot"

    def act(self, env: Countdown, rng: random.Random) -> str:
        take = env.left % 3 or rng.choice([1, 2][: env.left])
        return f"[{take}]"


SPEC = EnvSpec("countdown", seats=(2, 2), make=lambda seats: Countdown(),
               bots={"countdown_bot": CountdownBot}, evaluation="round_robin",
               play=DefaultPlay("[", 4, ("]",)))
