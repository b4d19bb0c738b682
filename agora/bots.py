"""Scripted opponents: fixed strategies to train against and to measure progress by.

A bot sees the env itself (not the text prompt) and returns an action string, so it never
makes an illegal move. ``random`` is the weak baseline the demo's win rate is measured on;
``minimax`` plays Tic-Tac-Toe perfectly (it never loses), so the best a learner can do
against it is draw.
"""

from __future__ import annotations

import random
from functools import cache
from typing import Protocol

from agora.envs.tictactoe import MARKS, TicTacToe, winner_of


class Bot(Protocol):
    name: str

    def act(self, env: TicTacToe, rng: random.Random) -> str: ...


class RandomBot:
    name = "random"

    def act(self, env: TicTacToe, rng: random.Random) -> str:
        return rng.choice(env.legal_actions())


@cache
def _minimax_value(board: tuple[str, ...], to_move: str) -> int:
    """Game value for 'X' with perfect play from ``board``: > 0 win, 0 draw, < 0 loss.

    The size is 1 + the cells left empty at the end, so a sooner win scores higher and a later
    loss less badly. Without it every forced win ties with winning now (the bot might not take
    an immediate win) and, in a lost position, every move ties (it might not block a threat).
    """
    won = winner_of(list(board))
    if won:
        score = 1 + board.count("")
        return score if won == "X" else -score
    free = [i for i, m in enumerate(board) if not m]
    if not free:
        return 0
    other = "O" if to_move == "X" else "X"
    values = [
        _minimax_value(board[:i] + (to_move,) + board[i + 1 :], other) for i in free
    ]
    return max(values) if to_move == "X" else min(values)


class MinimaxBot:
    """Perfect play; ties between equally good moves are broken at random for variety."""

    name = "minimax"

    def act(self, env: TicTacToe, rng: random.Random) -> str:
        mark = MARKS[env.current_seat]
        other = MARKS[1 - env.current_seat]
        board = tuple(env.board)
        sign = 1 if mark == "X" else -1
        scored = [
            (sign * _minimax_value(board[:i] + (mark,) + board[i + 1 :], other), i)
            for i in env.legal_cells()
        ]
        best = max(score for score, _ in scored)
        return f"[{rng.choice([i for score, i in scored if score == best])}]"


BOTS: dict[str, type] = {"random": RandomBot, "minimax": MinimaxBot}


def make_bot(name: str) -> Bot:
    try:
        return BOTS[name]()
    except KeyError:
        raise ValueError(f"unknown bot '{name}'; known: {sorted(BOTS)}") from None
