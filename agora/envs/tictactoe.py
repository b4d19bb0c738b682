"""Tic-Tac-Toe on TextArena's rules (``TicTacToe-v0``), with forfeit on the first bad move.

Same as TextArena: cells 0-8 row by row, an action is the first ``[n]`` in the text, seat 0 plays
'O' and moves first, seat 1 plays 'X', three in a row wins, a full board draws. One difference,
by design: TextArena lets a player retry after an invalid move (``error_allowance=1``); here an
illegal or unparsable move forfeits at once (``error_allowance=0``), because the learner must pay
for it on the move that caused it. tests/unit/test_tictactoe.py replays games through TextArena's
own env to keep the two in agreement.

The prompt is shorter than TextArena's (every token costs CPU time in rollouts and updates) but
carries the same facts: your mark, the board with free cells numbered, the legal moves.
"""

from __future__ import annotations

import random
import re

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.images import ObservationMode, grid_image, image_part, png_data_url, text_part
from agora.envs.spec import DefaultPlay, EnvSpec

MOVE_PATTERN = re.compile(r"\[\s*(\d+)\s*\]")
LINES = [(0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8), (2, 4, 6)]
MARKS = ("O", "X")  # seat 0 is 'O' and moves first, as in TextArena


def parse_move(text: str) -> int | None:
    """The cell named by the first ``[n]`` in ``text``; None when there is none.

    Raises ValueError when ``n`` has more digits than ``int()`` converts (over 4300).
    """
    match = MOVE_PATTERN.search(text)
    return int(match.group(1)) if match else None


def winner_of(board: list[str]) -> str | None:
    for a, b, c in LINES:
        if board[a] and board[a] == board[b] == board[c]:
            return board[a]
    return None


def compact_board(board: list[str]) -> str:
    """The board for prompts: rows like ``O | 1 | 2`` (free cells show their number)."""
    return "\n".join(
        " | ".join(board[r * 3 + c] or str(r * 3 + c) for c in range(3)) for r in range(3)
    )


def render_board(board: list[str]) -> str:
    """TextArena's rendering, for people (the CLI and logs)."""
    rows = []
    for r in range(3):
        rows.append("|".join(f" {board[r * 3 + c] or r * 3 + c} " for c in range(3)))
    return "\n---+---+---\n".join(rows)


class TicTacToe:
    """Two seats, alternating; forfeit on the first illegal move."""

    name = "tictactoe"
    num_seats = 2

    def __init__(self, observation: ObservationMode = "text") -> None:
        self.observation_mode = observation  # text | image | both (agora/envs/images.py)
        self.board: list[str] = [""] * 9
        self._seat = 0
        self._done = False
        self._outcome = Outcome(winner=None, draw=False)
        self.history: list[str] = []

    def reset(self, seed: int = 0, opening: list[int] | None = None) -> None:
        """Start a new game; ``opening`` pre-plays cells (curriculum / eval openings)."""
        self.board = [""] * 9
        self._seat = 0
        self._done = False
        self._outcome = Outcome(winner=None, draw=False)
        self.history = []
        self.rng = random.Random(seed)
        for cell in opening or []:
            self.step(f"[{cell}]")

    @property
    def current_seat(self) -> int:
        return self._seat

    @property
    def done(self) -> bool:
        return self._done

    def role(self, seat: int) -> str:
        return MARKS[seat]

    def legal_cells(self) -> list[int]:
        return [i for i, mark in enumerate(self.board) if not mark]

    def legal_actions(self) -> list[str]:
        return [f"[{i}]" for i in self.legal_cells()]

    def observation(self, seat: int) -> list[ChatMessage]:
        # Measured on untrained SmolLM2-135M with the "[" prefill (160 random positions): this
        # 111-token prompt gave 69% legal moves, TextArena-like wording (146 tokens) 64%, a
        # 77-token terse one 59%. Prompt tokens are most of the PPO update's cost.
        mark, other = MARKS[seat], MARKS[1 - seat]
        system = (
            f"You play Tic-Tac-Toe as {mark} against {other}. Get three {mark} in a row to win. "
            "Reply with the number of a free cell in brackets, like [4]."
        )
        moves = f"Free cells: {' '.join(self.legal_actions())}\nYour move as {mark}:"
        if self.observation_mode == "text":
            user = f"Board:\n{compact_board(self.board)}\n{moves}"
            return [{"role": "system", "content": system}, {"role": "user", "content": user}]
        # The picture shows the marks and, in free cells, their numbers.
        picture = png_data_url(grid_image([m or str(i) for i, m in enumerate(self.board)], 3))
        board_text = (f"Board:\n{compact_board(self.board)}\n"
                      if self.observation_mode == "both" else "Board:")
        parts = [text_part(board_text), image_part(picture), text_part("\n" + moves)]
        return [{"role": "system", "content": system}, {"role": "user", "content": parts}]

    def step(self, action: str) -> StepResult:
        if self._done:
            raise RuntimeError("step() on a finished game")
        seat = self._seat
        self.history.append(action)
        try:
            cell = parse_move(action)
        except ValueError:  # more digits than int() converts (4300): far off the board anyway
            return self._forfeit(seat, "the cell number is not between 0 and 8")
        if cell is None:
            return self._forfeit(seat, "the move does not follow the [n] format")
        if not 0 <= cell <= 8:
            return self._forfeit(seat, f"cell {cell} is not between 0 and 8")
        if self.board[cell]:
            return self._forfeit(seat, f"cell {cell} is already occupied")
        self.board[cell] = MARKS[seat]
        if winner_of(self.board):
            self._finish(Outcome(winner=seat, draw=False, reason=f"seat {seat} has three in a row"))
        elif all(self.board):
            self._finish(Outcome(winner=None, draw=True, reason="the board is full"))
        else:
            self._seat = 1 - seat
        return StepResult(legal=True, done=self._done, reason=self._outcome.reason)

    def outcome(self) -> Outcome:
        return self._outcome

    def _forfeit(self, seat: int, reason: str) -> StepResult:
        self._finish(Outcome(winner=1 - seat, draw=False, illegal_seat=seat, reason=reason))
        return StepResult(legal=False, done=True, reason=reason)

    def _finish(self, outcome: Outcome) -> None:
        self._done = True
        outcome.info["board"] = list(self.board)
        self._outcome = outcome


SPEC = EnvSpec(
    "tictactoe", seats=(2, 2), make=lambda seats: TicTacToe(),
    build=lambda section, payload: TicTacToe(observation=section.observation), images=True,
    bots={"random": "agora.agents.bots:RandomBot", "minimax": "agora.agents.bots:MinimaxBot"},
    demonstrators=("minimax", "minimax_canonical", "minimax_winning"),
    demonstrator_bots={"minimax_canonical": "agora.agents.bots:CanonicalMinimaxBot",
                       "minimax_winning": "agora.agents.bots:WinningMinimaxBot"},
    enumerable=True, evaluation="round_robin", play=DefaultPlay("[", 6, ("]",)))
