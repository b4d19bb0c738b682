"""Environment registry: config names to env classes."""

from __future__ import annotations

from agora.envs.base import ChatMessage, Outcome, StepResult, TurnBasedEnv
from agora.envs.hanabi import Hanabi
from agora.envs.tictactoe import TicTacToe

# "hanabi" is the 2-player game; Hanabi(num_players=3..5) builds the others.
ENVS: dict[str, type] = {"tictactoe": TicTacToe, "hanabi": Hanabi}


# Games whose number of seats is a constructor argument (the rest have a fixed number).
SEATS_ARGUMENT: dict[str, str] = {"hanabi": "num_players"}


def make_env(name: str, num_seats: int | None = None) -> TurnBasedEnv:
    """A fresh env; ``num_seats`` picks the player count of games that have several."""
    try:
        cls = ENVS[name]
    except KeyError:
        raise ValueError(f"unknown environment '{name}'; known: {sorted(ENVS)}") from None
    if num_seats is not None and name in SEATS_ARGUMENT:
        return cls(**{SEATS_ARGUMENT[name]: num_seats})
    env = cls()
    if num_seats is not None and num_seats != env.num_seats:
        raise ValueError(f"{name} has {env.num_seats} seats, got {num_seats}")
    return env


__all__ = ["ChatMessage", "Outcome", "StepResult", "TurnBasedEnv", "make_env", "ENVS"]
