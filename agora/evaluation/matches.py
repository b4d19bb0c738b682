"""Evaluate an agent (a served adapter) against scripted bots, straight through vLLM.

Games alternate seats (half first to move, half second) and run concurrently so vLLM can batch
them. Reported per opponent: win/draw/loss rates with 95% Wilson intervals, the legal-move rate
over the agent's turns, and how many losses were forfeits by an illegal move; in a cooperative
game (Hanabi) the mean team score with its 95% interval.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from agora.agents.bots import make_bot
from agora.config.run import RunConfig
from agora.envs import make_env
from agora.evaluation.stats import wilson
from agora.rollout.runner import BotPlayer, LLMPlayer, run_episode
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model


@dataclass
class MatchResult:
    opponent: str
    games: int
    wins: int
    draws: int
    losses: int
    forfeits: int
    llm_turns: int
    legal_turns: int
    scores: list[float] = field(default_factory=list)  # cooperative games: team scores

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
        # Imported here: agora.evaluation's package imports this module.
        from agora.evaluation.stats import mean_interval

        summary = mean_interval(self.scores, low=0.0)
        return {"score": summary["mean"], "score_ci95": summary["ci95"]}


async def play_matches(
    cfg: RunConfig, agent: str, adapter: str, opponent: str, games: int,
    concurrency: int = 16, seed: int = 10_000,
) -> MatchResult:
    agent_cfg = cfg.agent(agent)
    tokenizer = load_tokenizer(resolve_model(cfg.models[agent_cfg.base].model))
    limits = httpx.Limits(max_connections=concurrency)
    result = MatchResult(opponent, 0, 0, 0, 0, 0, 0, 0)
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        client = PolicyClient(cfg.policy_url(agent), adapter, tokenizer, agent_cfg.sampling,
                              http=http)
        gate = asyncio.Semaphore(concurrency)

        seats = len(cfg.environment.seats)

        async def one(game: int) -> None:
            seat = game % seats
            me = LLMPlayer(agent, client, prefill=cfg.environment.prefill)
            # "self": the agent in every seat (a cooperative game's self-play score).
            players: list = [me if opponent == "self" else BotPlayer(make_bot(opponent))
                             for _ in range(seats)]
            players[seat] = me
            async with gate:
                env = make_env(cfg.environment.name, num_seats=seats)
                record = await run_episode(env, players,
                                           run_id="eval", episode_id=f"eval-{game}",
                                           seed=seed + game, opponent=opponent)
            outcome = record.results[seat]
            result.games += 1
            result.wins += outcome == "win"
            result.draws += outcome == "draw"
            result.losses += outcome in ("loss", "illegal")
            # In "self" games every seat is the agent: a forfeit by any seat is the agent's.
            mine_results = record.results if opponent == "self" else [outcome]
            result.forfeits += "illegal" in mine_results
            if "score" in record.info:
                result.scores.append(float(record.info["score"]))
            mine = [t for t in record.turns if t.seat == seat or opponent == "self"]
            result.llm_turns += len(mine)
            result.legal_turns += sum(t.legal for t in mine)

        await asyncio.gather(*(one(g) for g in range(games)))
    return result


def evaluate(cfg: RunConfig, agent: str, adapter: str, games: int | None = None,
             opponents: list[str] | None = None) -> dict[str, MatchResult]:
    games = games or cfg.eval.games
    return {
        opp: asyncio.run(play_matches(cfg, agent, adapter, opp, games))
        for opp in (opponents or list(cfg.eval.opponents))
    }
