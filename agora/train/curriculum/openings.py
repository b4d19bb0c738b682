"""Tic-Tac-Toe openings by difficulty: pre-placed moves, after which a chosen seat moves.

Level 0 is the easiest: the seat to move can win at once. Then fewer moves are pre-placed at
each level (fewer decisions left means fewer chances to go wrong), up to the empty board, which
is the real game. Openings are drawn by random legal play from the episode's seed, so a worker
and anyone replaying the episode get the same one; the side to move is fixed by the count's
parity (seat 0, 'O', moves first), so it is the learner's seat in games against a bot.

Written here rather than taken from TextArena: its Tic-Tac-Toe has no notion of openings.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from agora.envs.tictactoe import LINES, MARKS, TicTacToe, winner_of


@dataclass(frozen=True)
class OpeningLevel:
    name: str
    # Pre-placed moves when seat 0 / seat 1 moves next (even counts leave seat 0 to move).
    moves: tuple[int, int]
    # True: the seat to move has a winning cell; False: it has none (not a one-move puzzle).
    win_in_one: bool


OPENING_LEVELS: tuple[OpeningLevel, ...] = (
    OpeningLevel("win in one", (4, 5), True),
    OpeningLevel("endgame", (4, 5), False),
    OpeningLevel("midgame", (2, 3), False),
    OpeningLevel("full game", (0, 0), False),
)
_TRIES = 10_000  # every level is found within a few dozen draws; this bounds a logic error


def winning_cells(board: list[str], mark: str) -> list[int]:
    """Free cells that complete a line of ``mark``."""
    cells = set()
    for line in LINES:
        marks = [board[i] for i in line]
        if marks.count(mark) == 2 and marks.count("") == 1:
            cells.add(line[marks.index("")])
    return sorted(cells)


def opening(level: int, mover: int, seed: int) -> list[int]:
    """Cells to pre-play at ``level`` so that seat ``mover`` moves next (deterministic in
    ``seed``). The game is never over after them."""
    spec = OPENING_LEVELS[level]
    count = spec.moves[mover]
    if count == 0:
        return []
    rng = random.Random(f"tictactoe-opening:{level}:{mover}:{seed}")
    for _ in range(_TRIES):
        cells = rng.sample(range(9), count)
        board = [""] * 9
        for turn, cell in enumerate(cells):
            board[cell] = MARKS[turn % 2]
        if winner_of(board):
            continue
        if bool(winning_cells(board, MARKS[mover])) == spec.win_in_one:
            return cells
    raise RuntimeError(f"no Tic-Tac-Toe opening found for level {level}, seat {mover}")


def check_opening(cells: list[int], mover: int) -> TicTacToe:
    """Replay an opening on a fresh board (raises if a move is illegal, the game ends, or the
    wrong seat is left to move); returns the game. An empty opening is the real game, where
    seat 0 moves first whoever the learner is."""
    game = TicTacToe()
    game.reset(0, opening=cells)
    if game.done or (cells and game.current_seat != mover):
        raise ValueError(f"opening {cells} does not leave seat {mover} to move")
    return game
