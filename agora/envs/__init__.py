"""Environment registry: config names to env classes."""

from __future__ import annotations

from agora.envs.base import ChatMessage, Outcome, StepResult, TurnBasedEnv
from agora.envs.tictactoe import TicTacToe

ENVS: dict[str, type] = {"tictactoe": TicTacToe}


def make_env(name: str) -> TurnBasedEnv:
    try:
        return ENVS[name]()
    except KeyError:
        raise ValueError(f"unknown environment '{name}'; known: {sorted(ENVS)}") from None


__all__ = ["ChatMessage", "Outcome", "StepResult", "TurnBasedEnv", "make_env", "ENVS"]
