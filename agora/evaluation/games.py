"""Games (Tic-Tac-Toe, Hanabi): the evaluated snapshots and the scripted bots, all against all.

Competitive games (Tic-Tac-Toe): a round robin. Every pair of players plays ``games`` games,
the first player of the pair moving first in the even-numbered ones; an illegal or unparsable
move forfeits (counted as a loss, and as a forfeit). From the same games: each snapshot's
win/draw/loss against every other player, the matrix of score shares, and TrueSkill ratings.

Cooperative games (Hanabi): nobody beats anybody, so each player plays ``games`` deals beside
each partner (``self`` = itself in every seat, or a scripted bot in the other seats), taking
seat ``g mod seats`` in deal ``g``. A player's number is the mean team score (0-25). Ratings
come from *duplicate* comparisons: two players that played the same deal (seed), in the same
seat, beside the same partner, are compared by their team scores (higher wins, equal draws),
which removes the luck of the deal from the comparison.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

from agora.agents.bots import make_bot
from agora.envs import make_env
from agora.envs.hanabi import MAX_SCORE
from agora.evaluation.context import EvalContext
from agora.evaluation.ratings import Game, trueskill_table
from agora.evaluation.stats import mean_interval, rate
from agora.rollout.records import EpisodeRecord
from agora.rollout.runner import BotPlayer, Player, run_episode

POINTS = {"win": 1.0, "draw": 0.5, "loss": 0.0, "illegal": 0.0}


@dataclass(frozen=True)
class Contestant:
    """A scripted bot (``bot``) or an adapter served under ``served`` for ``agent``."""

    label: str
    bot: str | None = None
    agent: str | None = None
    served: str | None = None

    def player(self, ctx: EvalContext) -> Player:
        if self.bot is not None:
            return BotPlayer(make_bot(self.bot))
        assert self.agent is not None and self.served is not None
        return ctx.llm_player(self.agent, self.served)

    @property
    def is_llm(self) -> bool:
        return self.bot is None


async def _episode(ctx: EvalContext, players: list[Player], seed: int, tag: str
                   ) -> EpisodeRecord:
    env_name = ctx.cfg.environment.name
    async with ctx.gate:
        env = make_env(env_name, num_seats=len(players))
        return await run_episode(env, players, run_id="eval", episode_id=f"eval-{tag}-{seed}",
                                 seed=seed)


def _turns(record: EpisodeRecord, seats: set[int]) -> tuple[int, int]:
    mine = [t for t in record.turns if t.seat in seats]
    return len(mine), sum(t.legal for t in mine)


# --------------------------------------------------------------------------- Tic-Tac-Toe

@dataclass
class Duel:
    """One game between a and b, from a's side."""

    a: str
    b: str
    seat_a: int
    result_a: str
    result_b: str
    a_turns: int
    a_legal: int
    b_turns: int
    b_legal: int


async def play_round_robin(ctx: EvalContext, players: list[Contestant], games: int,
                           seed: int) -> list[Duel]:
    async def one(a: Contestant, b: Contestant, g: int) -> Duel:
        seat_a = g % 2
        seated = [a.player(ctx), b.player(ctx)] if seat_a == 0 else [b.player(ctx),
                                                                      a.player(ctx)]
        record = await _episode(ctx, seated, seed + g, f"{a.label}-{b.label}")
        a_turns, a_legal = _turns(record, {seat_a})
        b_turns, b_legal = _turns(record, {1 - seat_a})
        return Duel(a.label, b.label, seat_a, record.results[seat_a],
                    record.results[1 - seat_a], a_turns, a_legal, b_turns, b_legal)

    return list(await asyncio.gather(*(one(a, b, g) for a, b in combinations(players, 2)
                                       for g in range(games))))


def duel_summary(duels: list[Duel], player: str, opponent: str) -> dict[str, object]:
    """``player``'s record against ``opponent``: rates with 95% Wilson intervals."""
    rows = []  # (own result, opponent's result, own turns, own legal turns)
    for d in duels:
        if (d.a, d.b) == (player, opponent):
            rows.append((d.result_a, d.result_b, d.a_turns, d.a_legal))
        elif (d.b, d.a) == (player, opponent):
            rows.append((d.result_b, d.result_a, d.b_turns, d.b_legal))
    n = len(rows)
    wins = sum(r[0] == "win" for r in rows)
    draws = sum(r[0] == "draw" for r in rows)
    losses = sum(r[0] in ("loss", "illegal") for r in rows)
    turns, legal = sum(r[2] for r in rows), sum(r[3] for r in rows)
    return {
        "player": player, "opponent": opponent, "games": n,
        "win": rate(wins, n), "draw": rate(draws, n), "loss": rate(losses, n),
        "score": (wins + 0.5 * draws) / n if n else None,
        "forfeits": sum(r[0] == "illegal" for r in rows),
        "opponent_forfeits": sum(r[1] == "illegal" for r in rows),
        "legal_rate": legal / turns if turns else None,
    }


def tictactoe_report(duels: list[Duel], players: list[Contestant]) -> dict[str, object]:
    labels = [p.label for p in players]
    llm = [p.label for p in players if p.is_llm]
    head_to_head = [duel_summary(duels, a, b) for a in llm for b in labels if a != b]
    matrix = {a: {b: duel_summary(duels, a, b)["score"] for b in labels if b != a}
              for a in labels}
    rated = [Game(d.a, d.b, POINTS[d.result_a]) for d in duels if d.result_a in POINTS]
    return {"kind": "round_robin", "players": labels, "head_to_head": head_to_head,
            "score_matrix": matrix, "ratings": trueskill_table(labels, rated)}


# --------------------------------------------------------------------------- Hanabi

@dataclass
class Deal:
    player: str
    partner: str
    seed: int
    seat: int
    score: float
    forfeit: bool
    turns: int
    legal: int


async def play_hanabi(ctx: EvalContext, players: list[Contestant], partners: list[str],
                      games: int, seed: int) -> list[Deal]:
    seats = len(ctx.cfg.environment.seats)

    async def one(c: Contestant, partner: str, g: int) -> Deal:
        seat = g % seats
        me = c.player(ctx)
        seated: list[Player] = [me if partner == "self" else BotPlayer(make_bot(partner))
                                for _ in range(seats)]
        seated[seat] = me
        record = await _episode(ctx, seated, seed + g, f"{c.label}-{partner}")
        own = set(range(seats)) if partner == "self" else {seat}
        turns, legal = _turns(record, own)
        forfeit = any(not t.legal for t in record.turns if t.seat in own)
        return Deal(c.label, partner, seed + g, seat, float(record.info.get("score", 0.0)),
                    forfeit, turns, legal)

    return list(await asyncio.gather(*(one(c, p, g) for c in players for p in partners
                                       for g in range(games))))


def hanabi_report(deals: list[Deal], players: list[Contestant], partners: list[str]
                  ) -> dict[str, object]:
    labels = [p.label for p in players]
    rows = []
    for player in labels:
        for partner in partners:
            mine = [d for d in deals if (d.player, d.partner) == (player, partner)]
            turns = sum(d.turns for d in mine)
            rows.append({
                "player": player, "partner": partner, "games": len(mine),
                "score": mean_interval([d.score for d in mine], 0.0, float(MAX_SCORE)),
                "forfeit": rate(sum(d.forfeit for d in mine), len(mine)),
                "legal_rate": sum(d.legal for d in mine) / turns if turns else None,
            })
    boards: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for d in deals:
        boards[(d.partner, d.seed, d.seat)][d.player] = d.score
    rated = []
    for a, b in combinations(labels, 2):
        for scores in boards.values():
            if a in scores and b in scores:
                sa, sb = scores[a], scores[b]
                rated.append(Game(a, b, 1.0 if sa > sb else 0.5 if sa == sb else 0.0))
    return {"kind": "duplicate", "players": labels, "partners": partners, "scores": rows,
            "ratings": trueskill_table(labels, rated)}
