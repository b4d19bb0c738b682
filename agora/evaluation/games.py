"""Games (Tic-Tac-Toe, Hanabi, ...): every game evaluation plays through ``play_games``.

``play_games`` is the one way a game is evaluated: ``games`` games of a player with one other
player (a scripted bot, another snapshot, or ``self``: the player in every seat) in every other
seat, the player taking seat ``g mod seats`` in game ``g``, which plays the held-out seed
``held_out_seed(seed, g)`` (agora.evaluation.seeds: a deck or a bot's dice training never
played). Three reports read its ``Played`` records:

Competitive games (``EnvSpec.evaluation == "round_robin"``): every pair of players plays
``games`` games, the first player of the pair moving first in the even-numbered ones; an illegal
or unparsable move forfeits (counted as a loss, and as a forfeit). From the same games: each
snapshot's win/draw/loss against every other player, the matrix of score shares, and TrueSkill
ratings.

Cooperative games (``"duplicate"``): nobody beats anybody, so each player plays ``games`` deals
beside each partner (``self`` or a scripted bot in the other seats). A player's number is the
mean team score. Ratings come from *duplicate* comparisons: two players that played the same
deal (seed), in the same seat, beside the same partner, are compared by their team scores
(higher wins, equal draws), which removes the luck of the deal from the comparison.

One agent against the config's ``eval.opponents`` (``evaluate``, ``agora demo``'s before/after
table): per opponent, win/draw/loss rates with 95% Wilson intervals, the legal-move rate over
the agent's turns, forfeits, and in a cooperative game the mean team score with its interval.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from itertools import combinations

from agora.config.run import RunConfig
from agora.envs.hanabi import MAX_SCORE
from agora.envs.registry import make_bot
from agora.evaluation.context import Advance, EvalContext, open_http
from agora.evaluation.ratings import Game, trueskill_table
from agora.evaluation.seeds import held_out_seed
from agora.evaluation.stats import mean_interval, rate, wilson
from agora.rollout.records import EpisodeRecord
from agora.rollout.runner import BotPlayer, Player
from agora.rollout.seating import build_env

POINTS = {"win": 1.0, "draw": 0.5, "loss": 0.0, "illegal": 0.0}
SELF = "self"  # the partner that is the player itself, in every seat


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


def partner(label: str) -> Contestant | None:
    """A bot by name, or None for ``self``."""
    return None if label == SELF else Contestant(label, bot=label)


@dataclass
class Played:
    """One game: ``player`` in ``seat``, ``other`` in every other seat (``self``: the player)."""

    player: str
    other: str
    seed: int
    seat: int
    results: list[str]  # per seat
    turns: list[int]  # per seat: moves made
    legal: list[int]  # per seat: legal moves made
    score: float | None = None  # a cooperative game's team score

    @classmethod
    def of(cls, record: EpisodeRecord, player: str, other: str, seat: int) -> Played:
        seats = len(record.results)
        turns, legal = [0] * seats, [0] * seats
        for t in record.turns:
            turns[t.seat] += 1
            legal[t.seat] += t.legal
        score = record.info.get("score")
        return cls(player, other, record.seed, seat, list(record.results), turns, legal,
                   None if score is None else float(score))

    def seats_of(self, label: str) -> list[int]:
        """The seats ``label`` filled: the player's one (every seat in ``self`` games), or the
        other player's, every other one."""
        everyone = range(len(self.results))
        if self.other == SELF:
            return list(everyone)
        return [self.seat] if label == self.player else [s for s in everyone if s != self.seat]

    def moves(self, label: str) -> tuple[int, int]:
        """(moves, legal moves) of ``label``."""
        seats = self.seats_of(label)
        return sum(self.turns[s] for s in seats), sum(self.legal[s] for s in seats)

    def forfeited(self, label: str) -> bool:
        """Whether ``label`` lost by an illegal or unparsable move (in any of its seats)."""
        return any(self.results[s] == "illegal" for s in self.seats_of(label))

    @property
    def result(self) -> str:
        """The player's result, from its seat."""
        return self.results[self.seat]


async def play_games(ctx: EvalContext, player: Contestant, other: Contestant | None,
                     games: int, seed: int, advance: Advance = lambda: None) -> list[Played]:
    """``games`` games of ``player`` with ``other`` (None: itself) in every other seat."""
    seats = len(ctx.cfg.environment.seats)
    other_label = other.label if other is not None else SELF

    async def one(g: int) -> Played:
        seat = g % seats
        me = player.player(ctx)
        seated = [me if other is None else other.player(ctx) for _ in range(seats)]
        seated[seat] = me
        # Built as in training (the run's options: an image view stays an image view).
        game_seed = held_out_seed(seed, g)
        env = build_env(ctx.cfg, {"seed": game_seed})
        record = await ctx.play(env, seated, f"eval-{player.label}-{other_label}-{game_seed}",
                                game_seed)
        advance()
        return Played.of(record, player.label, other_label, seat)

    return list(await asyncio.gather(*(one(g) for g in range(games))))


async def _play_pairings(ctx: EvalContext, pairs: list[tuple[Contestant, Contestant | None]],
                         games: int, seed: int, phase: str) -> list[Played]:
    """Every pair's games, concurrently, in the order of ``pairs`` (ratings depend on it)."""
    advance = ctx.start_phase(phase, len(pairs) * games)
    played = await asyncio.gather(*(play_games(ctx, a, b, games, seed, advance)
                                    for a, b in pairs))
    return [p for games_of_pair in played for p in games_of_pair]


# --------------------------------------------------------------------------- round robin

async def play_round_robin(ctx: EvalContext, players: list[Contestant], games: int,
                           seed: int) -> list[Played]:
    pairs: list[tuple[Contestant, Contestant | None]] = list(combinations(players, 2))
    return await _play_pairings(ctx, pairs, games, seed, f"round robin, {len(players)} players")


def duel_summary(played: list[Played], player: str, opponent: str) -> dict[str, object]:
    """``player``'s record against ``opponent``: rates with 95% Wilson intervals."""
    rows = []  # (own result, opponent's result, own moves, own legal moves)
    for p in played:
        if {p.player, p.other} == {player, opponent} and player != opponent:
            own, theirs = p.seats_of(player)[0], p.seats_of(opponent)[0]
            rows.append((p.results[own], p.results[theirs], *p.moves(player)))
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


def tictactoe_report(played: list[Played], players: list[Contestant]) -> dict[str, object]:
    labels = [p.label for p in players]
    llm = [p.label for p in players if p.is_llm]
    head_to_head = [duel_summary(played, a, b) for a in llm for b in labels if a != b]
    matrix = {a: {b: duel_summary(played, a, b)["score"] for b in labels if b != a}
              for a in labels}
    rated = [Game(p.player, p.other, POINTS[p.result]) for p in played if p.result in POINTS]
    return {"kind": "round_robin", "players": labels, "head_to_head": head_to_head,
            "score_matrix": matrix, "ratings": trueskill_table(labels, rated)}


# --------------------------------------------------------------------------- duplicate deals

async def play_hanabi(ctx: EvalContext, players: list[Contestant], partners: list[str],
                      games: int, seed: int) -> list[Played]:
    pairs = [(c, partner(p)) for c in players for p in partners]
    return await _play_pairings(ctx, pairs, games, seed,
                                f"deals, {len(players)} players x {len(partners)} partners")


def hanabi_report(played: list[Played], players: list[Contestant], partners: list[str]
                  ) -> dict[str, object]:
    labels = [p.label for p in players]
    rows = []
    for player in labels:
        for other in partners:
            mine = [p for p in played if (p.player, p.other) == (player, other)]
            moves = [p.moves(player) for p in mine]
            turns = sum(m[0] for m in moves)
            rows.append({
                "player": player, "partner": other, "games": len(mine),
                "score": mean_interval([p.score or 0.0 for p in mine], 0.0, float(MAX_SCORE)),
                "forfeit": rate(sum(p.forfeited(player) for p in mine), len(mine)),
                "legal_rate": sum(m[1] for m in moves) / turns if turns else None,
            })
    boards: dict[tuple[str, int, int], dict[str, float]] = defaultdict(dict)
    for p in played:
        boards[(p.other, p.seed, p.seat)][p.player] = p.score or 0.0
    rated = []
    for a, b in combinations(labels, 2):
        for scores in boards.values():
            if a in scores and b in scores:
                sa, sb = scores[a], scores[b]
                rated.append(Game(a, b, 1.0 if sa > sb else 0.5 if sa == sb else 0.0))
    return {"kind": "duplicate", "players": labels, "partners": partners, "scores": rows,
            "ratings": trueskill_table(labels, rated)}


# --------------------------------------------------------------------------- one agent vs bots

@dataclass
class MatchResult:
    """One agent's games against one opponent: counts the demo's before/after table reads."""

    opponent: str
    games: int
    wins: int
    draws: int
    losses: int
    forfeits: int
    llm_turns: int
    legal_turns: int
    scores: list[float] = field(default_factory=list)  # cooperative games: team scores

    @classmethod
    def of(cls, opponent: str, played: list[Played]) -> MatchResult:
        """The agent's record over its games against ``opponent`` (all seats in ``self``)."""
        moves = [p.moves(p.player) for p in played]
        return cls(opponent, len(played),
                   wins=sum(p.result == "win" for p in played),
                   draws=sum(p.result == "draw" for p in played),
                   losses=sum(p.result in ("loss", "illegal") for p in played),
                   forfeits=sum(p.forfeited(p.player) for p in played),
                   llm_turns=sum(m[0] for m in moves), legal_turns=sum(m[1] for m in moves),
                   scores=[p.score for p in played if p.score is not None])

    @property
    def legal_rate(self) -> float:
        return self.legal_turns / self.llm_turns if self.llm_turns else 0.0

    def rate(self, what: str) -> float:
        return getattr(self, what) / self.games if self.games else 0.0

    def as_dict(self) -> dict[str, object]:
        return {
            "opponent": self.opponent, "games": self.games, "win": self.rate("wins"),
            "draw": self.rate("draws"), "loss": self.rate("losses"),
            "win_ci95": wilson(self.wins, self.games), "forfeits": self.forfeits,
            "legal_rate": self.legal_rate,
            **(self.score_summary() if self.scores else {}),
        }

    def score_summary(self) -> dict[str, object]:
        summary = mean_interval(self.scores, low=0.0)
        return {"score": summary["mean"], "score_ci95": summary["ci95"]}


async def play_matches(ctx: EvalContext, agent: str, served: str, opponents: list[str],
                       games: int, seed: int = 0) -> dict[str, MatchResult]:
    """``games`` games of ``agent`` (as ``served``) against each opponent, concurrently."""
    me = Contestant(agent, agent=agent, served=served)
    played = await asyncio.gather(*(
        play_games(ctx, me, partner(opp), games, seed,
                   ctx.start_phase(f"{served} vs {opp}", games))
        for opp in opponents))
    return {opp: MatchResult.of(opp, p) for opp, p in zip(opponents, played, strict=True)}


def evaluate(cfg: RunConfig, agent: str, adapter: str, games: int | None = None,
             opponents: list[str] | None = None, concurrency: int = 16
             ) -> dict[str, MatchResult]:
    """``agent`` served as ``adapter`` against ``opponents`` (default: ``eval.opponents``) on
    the servers ``cfg`` points at."""
    async def main() -> dict[str, MatchResult]:
        async with open_http(concurrency) as http:
            ctx = EvalContext(cfg, http, concurrency)
            return await play_matches(ctx, agent, adapter,
                                      opponents or list(cfg.eval.opponents),
                                      games or cfg.eval.games)

    return asyncio.run(main())
