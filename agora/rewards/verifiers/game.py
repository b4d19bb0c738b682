"""Game-outcome verifier: replay the recorded actions under the rules, then assign rewards.

The reward service never trusts the worker's claim of who won: it replays the action texts on a
fresh env. Credit assignment (docs/architecture.md "Learning"): an illegal or unparsable
move gets the penalty on that move alone (the offender's earlier legal moves get 0, because
otherwise nearly every early game ends illegally and every move looks equally bad); a game that
ends normally gives every move of a seat that seat's outcome (win/draw/loss).

Cooperative games (an env with ``team_rewards()``, e.g. Hanabi) reward every legal move with the
team's result instead, even when a teammate forfeits: the team's score so far is what those
moves earned, and the forfeiting move alone gets the penalty. With ``team_credit='to_go'`` (and
an env with ``team_progress()``, the team reward if the game ended now) a legal move earns only
the part of the result made from it on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agora.envs.registry import make_env


class RewardScheme(BaseModel):
    # A misspelt key must not silently fall back to a default, and NaN/inf would come back as
    # JSON null rewards that the worker cannot use.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    win: float = 1.0
    draw: float = 0.0
    loss: float = -1.0
    illegal: float = Field(-1.0, description="reward of the illegal move itself")
    team_credit: Literal["outcome", "to_go"] = Field(
        "outcome", description="cooperative games: every legal move earns the final team "
        "reward ('outcome') or the part of it made from that move on ('to_go')")


class GameVerdict(BaseModel):
    results: list[str] = Field(
        ..., description="per seat: win | loss | draw | illegal | unfinished"
    )
    seat_rewards: list[float]
    turn_rewards: list[float] = Field(..., description="one per recorded action, in order")
    legal: list[bool]
    finished: bool
    reason: str = ""


class InvalidEpisode(ValueError):
    """The actions do not form a game (e.g. moves after the game ended)."""


def verify_game(
    env_name: str, actions: list[str], scheme: RewardScheme, seed: int = 0,
    num_seats: int | None = None, opening: list[str] | None = None,
) -> GameVerdict:
    """``opening``: moves pre-played after ``reset`` (a curriculum's opening, see
    agora/train/curriculum/openings.py); they belong to no turn and get no reward."""
    env = make_env(env_name, num_seats)
    env.reset(seed)
    for index, action in enumerate(opening or []):
        if env.done or not env.step(action).legal:
            raise InvalidEpisode(f"opening move {index} ({action[:20]!r}) is illegal or comes "
                                 "after the game ended")
    if opening and env.done:
        raise InvalidEpisode("the opening ends the game: there is nothing left to play")
    seats_of_turn: list[int] = []
    legal: list[bool] = []
    progress = getattr(env, "team_progress", None)
    team_before: list[float] = []  # the team reward so far, before each action (cooperative)
    for index, action in enumerate(actions):
        if env.done:
            raise InvalidEpisode(f"action {index} comes after the game ended")
        seats_of_turn.append(env.current_seat)
        if callable(progress):
            team_before.append(float(progress()))
        legal.append(env.step(action).legal)
    outcome = env.outcome()
    if not env.done:
        results = ["unfinished"] * env.num_seats
        return GameVerdict(results=results, seat_rewards=[0.0] * env.num_seats,
                           turn_rewards=[0.0] * len(actions), legal=legal, finished=False)
    results = [outcome.result_for(s) for s in range(env.num_seats)]
    by_result = {
        "win": scheme.win, "draw": scheme.draw, "loss": scheme.loss, "illegal": scheme.illegal
    }
    team_rewards = getattr(env, "team_rewards", None)
    if callable(team_rewards):
        team = [float(x) for x in team_rewards()]
        seat_rewards = [scheme.illegal if r == "illegal" else team[s]
                        for s, r in enumerate(results)]
        if scheme.team_credit == "to_go" and team_before:
            earned = [team[seat] - team_before[i] for i, seat in enumerate(seats_of_turn)]
        else:
            earned = [team[seat] for seat in seats_of_turn]
        turn_rewards = [earned[i] if legal[i] else scheme.illegal
                        for i in range(len(seats_of_turn))]
        return GameVerdict(results=results, seat_rewards=seat_rewards,
                           turn_rewards=turn_rewards, legal=legal, finished=True,
                           reason=outcome.reason)
    seat_rewards = [by_result[r] for r in results]
    turn_rewards = []
    for index, seat in enumerate(seats_of_turn):
        if results[seat] == "illegal":
            # Only the move that broke the rules pays; the seat's earlier legal moves get 0.
            turn_rewards.append(scheme.illegal if not legal[index] else 0.0)
        else:
            turn_rewards.append(seat_rewards[seat])
    return GameVerdict(results=results, seat_rewards=seat_rewards, turn_rewards=turn_rewards,
                       legal=legal, finished=True, reason=outcome.reason)
