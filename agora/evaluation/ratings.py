"""TrueSkill ratings of every evaluated player (snapshots and scripted bots) from a round robin.

Why TrueSkill (the ``trueskill`` package) and not the opponent pool's running Elo
(``agora.agents.context.OpponentPool``): a rating table from one evaluation should come with
its uncertainty, and TrueSkill keeps a sigma per player, so the table can rank by the
conservative skill ``mu - 3 sigma`` (a player with few or noisy games is not ranked high by
luck). TrueSkill updates game by game, so the order of the games matters a little; the games
are fed interleaved across pairings (game 1 of every pairing, then game 2, ...) so that no
pairing's games all land before or after the others'.

The draw probability TrueSkill assumes is the observed share of drawn games (kept within
[0.01, 0.9]): Tic-Tac-Toe between good players is mostly draws, and a fixed 10% would read
every draw as a surprise.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import trueskill


@dataclass(frozen=True)
class Game:
    """One rated comparison: ``score_a`` is 1 (a won), 0.5 (draw) or 0 (b won)."""

    a: str
    b: str
    score_a: float


def interleave(games: list[Game]) -> list[Game]:
    """Game 1 of every pairing, then game 2 of every pairing, ... (pairings in first-seen
    order, each pairing's games in their own order)."""
    by_pair: dict[frozenset[str], list[Game]] = defaultdict(list)
    for game in games:
        by_pair[frozenset((game.a, game.b))].append(game)
    queues = list(by_pair.values())
    out: list[Game] = []
    for index in range(max((len(q) for q in queues), default=0)):
        out.extend(q[index] for q in queues if index < len(q))
    return out


def trueskill_table(players: list[str], games: list[Game]) -> list[dict[str, object]]:
    """One row per player (every player listed, even without games), best first by
    ``mu - 3 sigma``: mu, sigma, conservative, games, and score = points / games (win 1,
    draw 0.5) over all its rated games."""
    for game in games:
        if game.a == game.b or not 0.0 <= game.score_a <= 1.0:
            raise ValueError(f"bad rated game {game}")
        if game.a not in players or game.b not in players:
            raise ValueError(f"rated game {game} has a player not in {players}")
    draws = sum(g.score_a == 0.5 for g in games)
    draw_p = min(0.9, max(0.01, draws / len(games))) if games else 0.1
    env = trueskill.TrueSkill(draw_probability=draw_p, backend=None)
    ratings = {p: env.create_rating() for p in players}
    points: dict[str, float] = defaultdict(float)
    played: dict[str, int] = defaultdict(int)
    for game in interleave(games):
        ra, rb = ratings[game.a], ratings[game.b]
        if game.score_a == 0.5:
            ra, rb = trueskill.rate_1vs1(ra, rb, drawn=True, env=env)
        elif game.score_a > 0.5:
            ra, rb = trueskill.rate_1vs1(ra, rb, env=env)
        else:
            rb, ra = trueskill.rate_1vs1(rb, ra, env=env)
        ratings[game.a], ratings[game.b] = ra, rb
        points[game.a] += game.score_a
        points[game.b] += 1.0 - game.score_a
        played[game.a] += 1
        played[game.b] += 1
    rows = [{
        "player": p,
        "mu": ratings[p].mu,
        "sigma": ratings[p].sigma,
        "conservative": env.expose(ratings[p]),
        "games": played[p],
        "score": points[p] / played[p] if played[p] else None,
    } for p in players]
    rows.sort(key=lambda r: -float(r["conservative"]))  # type: ignore[arg-type]
    return rows
