"""Tic-Tac-Toe rules, the move parser, the prompts, and agreement with TextArena's own env."""

from __future__ import annotations

import itertools
import random
import re

import pytest
from textarena.envs.TicTacToe.env import TicTacToeEnv

from agora.envs.base import TurnBasedEnv
from agora.envs.registry import make_env
from agora.envs.tictactoe import LINES, TicTacToe, parse_move, render_board, winner_of

# A full-board draw; no line is completed along the way.
#  O | X | O
#  O | X | X
#  X | O | O
DRAW = [0, 1, 2, 4, 3, 5, 7, 6, 8]
# Seat 0 completes the 0-4-8 diagonal with the ninth move, filling the board.
WIN_ON_LAST_MOVE = [0, 1, 2, 3, 4, 5, 7, 6, 8]


def play(cells_or_texts: list[int | str]) -> TicTacToe:
    env = TicTacToe()
    env.reset(0)
    for move in cells_or_texts:
        env.step(f"[{move}]" if isinstance(move, int) else move)
    return env


def interleave(seat0: list[int], seat1: list[int]) -> list[int]:
    moves = []
    for a, b in itertools.zip_longest(seat0, seat1):
        moves += [m for m in (a, b) if m is not None]
    return moves


def test_implements_the_env_protocol_and_is_registered():
    env = make_env("tictactoe")
    assert isinstance(env, TicTacToe)
    assert isinstance(env, TurnBasedEnv)
    assert env.num_seats == 2
    with pytest.raises(ValueError, match="unknown environment"):
        make_env("chess")


def test_seat_0_is_o_and_moves_first():
    env = TicTacToe()
    env.reset(0)
    assert env.current_seat == 0
    assert (env.role(0), env.role(1)) == ("O", "X")
    env.step("[4]")
    assert env.board[4] == "O"
    assert env.current_seat == 1
    env.step("[0]")
    assert env.board[0] == "X"
    assert env.current_seat == 0


@pytest.mark.parametrize("line", LINES)
def test_seat_0_wins_by_completing_any_line(line):
    others = [c for c in range(9) if c not in line]
    env = play(interleave(list(line), others[:2]))
    assert env.done
    outcome = env.outcome()
    assert (outcome.winner, outcome.draw, outcome.illegal_seat) == (0, False, None)
    assert outcome.result_for(0) == "win"
    assert outcome.result_for(1) == "loss"
    assert [outcome.info["board"][c] for c in line] == ["O", "O", "O"]


@pytest.mark.parametrize("line", LINES)
def test_seat_1_wins_by_completing_any_line(line):
    others = [c for c in range(9) if c not in line]
    # Seat 0 gets three moves first; pick three that do not make a line themselves.
    filler = next(
        list(trio) for trio in itertools.combinations(others, 3)
        if not winner_of(["O" if c in trio else "" for c in range(9)])
    )
    env = play(interleave(filler, list(line)))
    outcome = env.outcome()
    assert env.done
    assert (outcome.winner, outcome.draw) == (1, False)
    assert outcome.result_for(1) == "win"
    assert outcome.result_for(0) == "loss"


def test_game_is_not_over_before_a_line_or_a_full_board():
    env = play([0, 1, 3, 4])  # O threatens 6, X threatens 7: nothing decided yet
    assert not env.done
    assert env.outcome().winner is None
    assert env.legal_cells() == [2, 5, 6, 7, 8]


def test_full_board_without_a_line_is_a_draw():
    env = TicTacToe()
    env.reset(0)
    for i, cell in enumerate(DRAW):
        assert not env.done, f"game ended early at move {i}"
        assert env.step(f"[{cell}]").legal
    outcome = env.outcome()
    assert env.done
    assert (outcome.winner, outcome.draw, outcome.illegal_seat) == (None, True, None)
    assert outcome.result_for(0) == outcome.result_for(1) == "draw"
    assert all(outcome.info["board"])


def test_line_made_by_the_ninth_move_is_a_win_not_a_draw():
    env = play(WIN_ON_LAST_MOVE)
    assert all(env.board)
    assert (env.outcome().winner, env.outcome().draw) == (0, False)


@pytest.mark.parametrize(
    "text", ["4", "", "I take the centre", "[four]", "(4)", "{4}", "[-1]", "[ ]", "[4.0]"]
)
def test_unparsable_move_forfeits(text):
    env = play([4])  # seat 1 is to move
    result = env.step(text)
    assert (result.legal, result.done) == (False, True)
    outcome = env.outcome()
    assert (outcome.illegal_seat, outcome.winner, outcome.draw) == (1, 0, False)
    assert outcome.result_for(1) == "illegal"
    assert outcome.result_for(0) == "win"
    assert "format" in outcome.reason
    assert env.board == ["", "", "", "", "O", "", "", "", ""]


@pytest.mark.parametrize("cell", [9, 10, 99, 123456789])
def test_out_of_range_cell_forfeits(cell):
    env = TicTacToe()
    env.reset(0)
    result = env.step(f"[{cell}]")
    assert (result.legal, result.done) == (False, True)
    assert (env.outcome().illegal_seat, env.outcome().winner) == (0, 1)
    assert "between 0 and 8" in env.outcome().reason
    assert not any(env.board)


def test_number_too_long_for_int_forfeits_instead_of_raising():
    """int() refuses strings over 4300 digits; a long LLM answer must still be a plain forfeit."""
    env = TicTacToe()
    env.reset(0)
    result = env.step("[" + "7" * 5000 + "]")
    assert (result.legal, result.done) == (False, True)
    assert env.outcome().illegal_seat == 0


@pytest.mark.parametrize("own", [True, False])
def test_occupied_cell_forfeits(own):
    env = play([4, 0])  # seat 0 to move; 4 is its own mark, 0 is the opponent's
    target = 4 if own else 0
    result = env.step(f"[{target}]")
    assert (result.legal, result.done) == (False, True)
    assert env.outcome().illegal_seat == 0
    assert env.outcome().winner == 1
    assert "occupied" in env.outcome().reason
    assert env.board[target] == ("O" if own else "X")  # the occupant stays


def test_forfeit_by_seat_0_after_legal_moves():
    env = play([0, 4, "pass"])
    assert (env.outcome().illegal_seat, env.outcome().winner) == (0, 1)
    assert env.history == ["[0]", "[4]", "pass"]


def test_step_after_the_game_ended_raises():
    env = play(["nonsense"])
    with pytest.raises(RuntimeError):
        env.step("[4]")


def test_reset_clears_the_previous_game():
    env = play([0, 3, 1, 4, 2])
    assert env.done
    env.reset(1)
    assert not env.done
    assert env.board == [""] * 9
    assert env.current_seat == 0
    assert env.history == []
    assert env.outcome().winner is None


def test_reset_with_an_opening_preplays_cells():
    env = TicTacToe()
    env.reset(0, opening=[4, 0])
    assert env.board[4] == "O" and env.board[0] == "X"
    assert env.current_seat == 0
    assert not env.done


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("[4]", 4),
        ("[ 4 ]", 4),
        ("[\t4\n]", 4),
        ("I play [3] or maybe [5]", 3),
        ("[5][3]", 5),
        ("[[4]]", 4),
        ("[07]", 7),
        ("[12]", 12),
        ("[-1] then [2]", 2),  # '-1' is not a cell number, so the first [n] is [2]
        ("4", None),
        ("", None),
        ("[a]", None),
        ("[4", None),
    ],
)
def test_parse_move_takes_the_first_bracketed_number(text, cell):
    assert parse_move(text) == cell


def test_observation_names_the_mark_and_lists_exactly_the_legal_moves():
    env = play([4, 0, 8])
    for seat, mark, other in [(0, "O", "X"), (1, "X", "O")]:
        messages = env.observation(seat)
        assert [m["role"] for m in messages] == ["system", "user"]
        assert f"as {mark} against {other}" in messages[0]["content"]
        user = messages[1]["content"]
        assert f"Your move as {mark}" in user
        listed = re.search(r"Free cells: (.*)", user).group(1)
        assert listed.split(" ") == ["[1]", "[2]", "[3]", "[5]", "[6]", "[7]"]
        assert listed.split(" ") == env.legal_actions()


def test_observation_board_shows_marks_and_free_cell_numbers():
    env = play([4, 0])
    user = env.observation(0)[1]["content"]
    assert "X | 1 | 2\n3 | O | 5\n6 | 7 | 8" in user


# --- Cross-check against TextArena's own TicTacToe-v0 -----------------------------------------

UNPARSABLE = ["4", "", "pass", "[four]", "(4)", "[-1]", "[ ]", "[4.5", "move: 4]"]
TEMPLATES = ["[{}]", "[ {} ]", "I will take [{}].", "[{}] and then [0]", "[\t{}\n]", "[0{}]"]
OUT_OF_RANGE = [9, 10, 42, 100, 123456789]


def random_action(rng: random.Random, board: list[str]) -> str:
    """Mostly legal moves in varied wording, sometimes a bad one (about 1 in 9)."""
    free = [i for i, mark in enumerate(board) if not mark]
    taken = [i for i, mark in enumerate(board) if mark]
    roll = rng.random()
    if roll < 0.04:
        return rng.choice(UNPARSABLE)
    if roll < 0.07:
        return f"[{rng.choice(OUT_OF_RANGE)}]"
    if roll < 0.11 and taken:
        return rng.choice(TEMPLATES).format(rng.choice(taken))
    return rng.choice(TEMPLATES).format(rng.choice(free))


def textarena_env(seed: int) -> TicTacToeEnv:
    env = TicTacToeEnv()
    env.reset(num_players=2, seed=seed)
    # TicTacToeEnv.reset() builds TwoPlayerState with its default error_allowance=1 and takes no
    # argument for it, so the only way to get forfeit-on-first-error is to set it afterwards.
    env.state.error_allowance = 0
    return env


def textarena_outcome(env: TicTacToeEnv) -> tuple[int | None, bool, int | None]:
    """(winner, draw, illegal_seat) read from TextArena's rewards and game_info."""
    rewards, game_info = env.close()
    illegal = [pid for pid in (0, 1) if game_info[pid]["invalid_move"]]
    if rewards == {0: 0, 1: 0}:
        return None, True, None
    winner = max(rewards, key=rewards.get)
    assert sorted(rewards.values()) == [-1, 1]
    return winner, False, illegal[0] if illegal else None


def test_textarena_prompt_agrees_that_player_0_is_o():
    env = textarena_env(0)
    prompt = env.state.observations[0][0][1]
    assert "you will be 'O'" in prompt
    assert "you will be 'X'" in env.state.observations[1][0][1]


def test_textarena_board_rendering_matches_ours():
    ours, theirs = play([4, 0, 8]), textarena_env(0)
    for action in ["[4]", "[0]", "[8]"]:
        theirs.step(action)
    assert theirs._render_board() == render_board(ours.board)


def test_agrees_with_textarena_on_400_random_games():
    """Same actions through both envs give the same board, turn order and outcome.

    TextArena details found on the way (textarena 0.7.4):
    - ``TicTacToeEnv.reset`` hard-codes ``TwoPlayerState(..., error_allowance=1)`` (one retry
      after an invalid move); error_allowance=0 is reached by setting
      ``env.state.error_allowance = 0`` after each reset. With it, an invalid move ends the game
      with rewards {offender: -1, other: +1} and ``game_info[offender]["invalid_move"] = True``.
    - It has no guard against ``step`` after the end (ours raises); and its state's constructor
      calls ``random.seed(seed)`` on the global ``random`` module, so games here use their own
      ``random.Random``.
    - Its prompt lists moves as ``'[0]', '[1]'`` (quoted); ours as ``[0], [1]``.
    """
    tally: dict[str, int] = {}
    for game in range(400):
        rng = random.Random(game)
        ours, theirs = TicTacToe(), textarena_env(game)
        ours.reset(game)
        while not ours.done:
            assert theirs.state.current_player_id == ours.current_seat
            action = random_action(rng, ours.board)
            result = ours.step(action)
            done, _ = theirs.step(action)
            assert done == result.done, (game, ours.history)
            flat = [cell for row in theirs.state.game_state["board"] for cell in row]
            assert flat == ours.board, (game, ours.history)
        outcome = ours.outcome()
        assert textarena_outcome(theirs) == (outcome.winner, outcome.draw, outcome.illegal_seat), (
            game, ours.history,
        )
        if outcome.draw:
            kind = "draw"
        elif outcome.illegal_seat is None:
            kind = f"seat {outcome.winner} wins"
        else:
            kind = next(k for k in ("format", "between", "occupied") if k in outcome.reason)
        tally[kind] = tally.get(kind, 0) + 1
    # Every kind of ending must occur often, or the agreement says little (400 games gave:
    # 20 draws, 157 wins, 101 unparsable, 66 out of range, 56 occupied).
    assert tally.keys() == {"draw", "seat 0 wins", "seat 1 wins", "format", "between", "occupied"}
    assert min(tally.values()) >= 10, tally


@pytest.mark.parametrize(
    "text", ["[٤]", "[４]", "[[4]]", "[ 4 ]", "[-4]", "[4 ]x[5]", "[009]", "[" + "1" * 100 + "]"]
)
def test_odd_first_moves_agree_with_textarena(text):
    """Both use the same regex: e.g. Unicode digits ('٤' is Arabic-Indic four) count as cells."""
    ours, theirs = TicTacToe(), textarena_env(0)
    ours.reset(0)
    result = ours.step(text)
    theirs.step(text)
    flat = [cell for row in theirs.state.game_state["board"] for cell in row]
    assert flat == ours.board
    assert theirs.state.done == result.done
    assert theirs.state.current_player_id == ours.current_seat
