"""Scripted opponents: the random bot is legal, the minimax bot is perfect."""

from __future__ import annotations

import random

import pytest

from agora.agents.bots import (
    CANONICAL_ORDER,
    CanonicalMinimaxBot,
    MinimaxBot,
    RandomBot,
    WinningMinimaxBot,
    _minimax_value,
)
from agora.envs.registry import make_bot, spec
from agora.envs.tictactoe import MARKS, TicTacToe


def board_env(o_cells: list[int], x_cells: list[int]) -> TicTacToe:
    """A game in progress with these marks; seat 0 ('O') moves when the counts are equal."""
    assert len(o_cells) - len(x_cells) in (0, 1)
    opening = []
    for i in range(len(o_cells)):
        opening.append(o_cells[i])
        if i < len(x_cells):
            opening.append(x_cells[i])
    env = TicTacToe()
    env.reset(0, opening=opening)
    assert not env.done
    return env


def play_game(bots: dict[int, object], seed: int) -> TicTacToe:
    env = TicTacToe()
    env.reset(seed)
    rng = random.Random(seed)
    while not env.done:
        action = bots[env.current_seat].act(env, rng)
        assert action in env.legal_actions()
        assert env.step(action).legal
    return env


def test_make_bot_builds_each_bot_by_name():
    assert isinstance(make_bot("random"), RandomBot)
    assert isinstance(make_bot("minimax"), MinimaxBot)
    assert make_bot("minimax").name == "minimax"
    with pytest.raises(ValueError, match="unknown bot 'alphazero'"):
        make_bot("alphazero")


def test_random_bot_only_plays_legal_moves():
    bot = RandomBot()
    for seed in range(200):
        env = play_game({0: bot, 1: bot}, seed)
        assert env.outcome().illegal_seat is None


def test_random_bot_plays_every_free_cell_sometimes():
    """It samples the legal moves rather than always picking, say, the first one."""
    env = board_env([4], [0])
    rng = random.Random(0)
    seen = {RandomBot().act(env, rng) for _ in range(200)}
    assert seen == set(env.legal_actions())


@pytest.mark.parametrize(("minimax_seat", "min_win_rate"), [(0, 0.93), (1, 0.70)])
def test_minimax_never_loses_to_random_and_usually_wins(minimax_seat, min_win_rate):
    """Measured over 200 games: about 97% wins moving first and about 80% moving second."""
    bots = {minimax_seat: MinimaxBot(), 1 - minimax_seat: RandomBot()}
    results = [
        play_game(bots, seed).outcome().result_for(minimax_seat) for seed in range(200)
    ]
    assert results.count("loss") == 0
    assert results.count("illegal") == 0
    assert results.count("win") / len(results) >= min_win_rate


def test_minimax_against_itself_always_draws():
    bot = MinimaxBot()
    outcomes = [play_game({0: bot, 1: bot}, seed).outcome() for seed in range(50)]
    assert all(o.draw for o in outcomes)
    # Ties between equally good moves are broken at random, so the games are not all the same.
    assert len({tuple(o.info["board"]) for o in outcomes}) > 1


@pytest.mark.parametrize("minimax_seat", [0, 1])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_minimax_never_loses_against_any_sequence_of_replies(minimax_seat, seed):
    """Exhaustive: the opponent tries every legal move at every turn of the game tree."""
    bot, rng = MinimaxBot(), random.Random(seed)
    leaves = 0

    def explore(opening: list[int]) -> None:
        nonlocal leaves
        env = TicTacToe()
        env.reset(0, opening=opening)
        if env.done:
            leaves += 1
            assert env.outcome().result_for(minimax_seat) in ("win", "draw"), opening
            return
        if env.current_seat == minimax_seat:
            cell = int(bot.act(env, rng).strip("[]"))
            explore(opening + [cell])
        else:
            for cell in env.legal_cells():
                explore(opening + [cell])

    explore([])
    assert leaves > 50


def test_minimax_takes_an_immediate_win():
    """O can win now at 2; cells 0, 1, 3 and 4 also win by force, but later.

     . | . | .
     . | . | O
     X | X | O
    """
    env = board_env([5, 8], [6, 7])
    bot = MinimaxBot()
    assert {bot.act(env, random.Random(seed)) for seed in range(30)} == {"[2]"}


def test_minimax_takes_its_own_win_rather_than_blocking():
    """X to move: both X and O have two in a row; X should win at 5, not block at 2."""
    env = board_env([0, 1, 8], [3, 4])
    assert env.current_seat == 1
    assert {MinimaxBot().act(env, random.Random(seed)) for seed in range(30)} == {"[5]"}


def test_minimax_blocks_an_immediate_loss():
    """X to move; O threatens 0-1-2, so 2 is the only move that does not lose."""
    env = board_env([0, 1], [4])
    assert {MinimaxBot().act(env, random.Random(seed)) for seed in range(30)} == {"[2]"}


def test_minimax_blocks_even_in_a_lost_position():
    """X to move, lost whatever it does (after X blocks at 2, O forks with 4). Blocking still
    makes O work for it; a bot that sees every losing move as equal would often not block.

     . | . | .
     . | . | O
     . | X | O
    """
    env = board_env([5, 8], [7])
    assert {MinimaxBot().act(env, random.Random(seed)) for seed in range(30)} == {"[2]"}


def _best_cells(env: TicTacToe) -> set[int]:
    mark, other = MARKS[env.current_seat], MARKS[1 - env.current_seat]
    sign = 1 if mark == "X" else -1
    board = tuple(env.board)
    scores = {i: sign * _minimax_value(board[:i] + (mark,) + board[i + 1:], other)
              for i in env.legal_cells()}
    return {i for i, s in scores.items() if s == max(scores.values())}


def test_canonical_minimax_plays_one_best_move_per_position_centre_first():
    """The demonstrator-only minimax: the same move whatever the random stream, always one of
    minimax's best, the first of them in centre-corners-edges order."""
    bot = CanonicalMinimaxBot()
    env = TicTacToe()
    env.reset(0)
    assert {bot.act(env, random.Random(seed)) for seed in range(20)} == {"[4]"}
    positions = 0
    for seed in range(60):  # positions a random opponent leads to, both seats
        env, rng = TicTacToe(), random.Random(seed)
        env.reset(seed)
        while not env.done:
            if env.current_seat == seed % 2:
                best = _best_cells(env)
                moves = {bot.act(env, random.Random(s)) for s in range(5)}
                assert moves == {f"[{min(best, key=CANONICAL_ORDER.index)}]"}
                positions += 1
                env.step(moves.pop())
            else:
                env.step(RandomBot().act(env, rng))
        assert env.outcome().result_for(seed % 2) in ("win", "draw")
    assert positions > 150


def test_canonical_minimax_demonstrates_but_is_never_an_opponent():
    tictactoe = spec("tictactoe")
    assert "minimax_canonical" in tictactoe.demonstrators
    assert isinstance(tictactoe.bot("minimax_canonical"), CanonicalMinimaxBot)
    assert "minimax_canonical" not in tictactoe.bots  # not trained or evaluated against
    with pytest.raises(ValueError, match="unknown bot 'minimax_canonical'"):
        make_bot("minimax_canonical")


def exact_outcomes(bot, bot_seat: int, opening: tuple[int, ...] = ()) -> dict[str, float]:
    """The exact chance of each result for ``bot`` against a uniformly random opponent: the
    bot's (deterministic) move where it is to play, every reply weighted alike otherwise."""
    env = TicTacToe()
    env.reset(0, opening=list(opening))
    if env.done:
        return {r: float(env.outcome().result_for(bot_seat) == r) for r in ("win", "draw", "loss")}
    if env.current_seat == bot_seat:
        cell = int(bot.act(env, random.Random(0)).strip("[]"))
        return exact_outcomes(bot, bot_seat, (*opening, cell))
    branches = [exact_outcomes(bot, bot_seat, (*opening, cell)) for cell in env.legal_cells()]
    return {r: sum(b[r] for b in branches) / len(branches) for r in ("win", "draw", "loss")}


def test_the_winning_minimax_wins_more_often_against_random_and_still_never_loses():
    """Exact over the game tree, both seats averaged: minimax_canonical wins 90.6% against a
    random player (97.4% moving first, 83.8% second), minimax_winning 95.6% (99.5%, 91.6%);
    neither ever loses."""
    def averaged(bot) -> dict[str, float]:
        by_seat = [exact_outcomes(bot, seat) for seat in (0, 1)]
        return {r: (by_seat[0][r] + by_seat[1][r]) / 2 for r in ("win", "draw", "loss")}

    canonical, winning = averaged(CanonicalMinimaxBot()), averaged(WinningMinimaxBot())
    assert canonical["loss"] == winning["loss"] == 0.0
    assert canonical["win"] == pytest.approx(0.906, abs=0.001)
    assert winning["win"] == pytest.approx(0.956, abs=0.001)


@pytest.mark.parametrize("seat", [0, 1])
def test_the_winning_minimax_never_loses_against_any_sequence_of_replies(seat):
    """Exhaustive: every legal reply at every turn; one move per position, always one that
    keeps minimax's outcome."""
    bot = WinningMinimaxBot()
    results = set()

    def explore(opening: tuple[int, ...]) -> None:
        env = TicTacToe()
        env.reset(0, opening=list(opening))
        if env.done:
            results.add(env.outcome().result_for(seat))
            return
        if env.current_seat == seat:
            moves = {bot.act(env, random.Random(s)) for s in range(3)}
            assert len(moves) == 1 and int(moves.pop().strip("[]")) in _best_outcome_cells(env)
            explore((*opening, int(bot.act(env, random.Random(0)).strip("[]"))))
        else:
            for cell in env.legal_cells():
                explore((*opening, cell))

    explore(())
    assert results <= {"win", "draw"} and "win" in results


def _best_outcome_cells(env: TicTacToe) -> set[int]:
    """The cells whose perfect-play outcome (win / draw / loss) is the best available."""
    mark, other = MARKS[env.current_seat], MARKS[1 - env.current_seat]
    board, sign = tuple(env.board), (1 if MARKS[env.current_seat] == "X" else -1)
    outcome = {i: (lambda v: (v > 0) - (v < 0))(
        sign * _minimax_value(board[:i] + (mark,) + board[i + 1:], other))
        for i in env.legal_cells()}
    return {i for i, o in outcome.items() if o == max(outcome.values())}


def test_the_winning_minimax_demonstrates_but_is_never_an_opponent():
    tictactoe = spec("tictactoe")
    assert "minimax_winning" in tictactoe.demonstrators
    assert isinstance(tictactoe.bot("minimax_winning"), WinningMinimaxBot)
    assert "minimax_winning" not in tictactoe.bots
