"""Run one episode: env + one player per seat -> an EpisodeRecord with tokens and logprobs.

Pure with respect to infrastructure: no Redis, no Celery. A player is either an LLM agent (a
PolicyClient talking to vLLM) or a scripted bot; the runner asks whoever holds the current seat,
applies the text, and records the turn. Rewards are not decided here (the reward service does
that from the recorded actions), so the same function serves training, evaluation and the
gateway's play-against-an-agent endpoint.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from agora.agents.bots import Bot
from agora.envs.base import TurnBasedEnv, legal_completions, turn_limit
from agora.rollout.records import EpisodeRecord, Turn
from agora.serving.client import PolicyClient


@dataclass
class LLMPlayer:
    agent: str
    client: PolicyClient
    prefill: str = ""
    # Reads the agent's live policy version (from Redis in workers); recorded per turn so the
    # trainer can bound staleness turn by turn even when a hot-swap lands mid-episode.
    version: Callable[[], int] = lambda: 0

    @property
    def label(self) -> str:
        return self.agent

    @property
    def legal_only(self) -> bool:
        return self.client.sampling.legal_actions_only


@dataclass
class BotPlayer:
    bot: Bot

    @property
    def label(self) -> str:
        return f"bot:{self.bot.name}"


Player = LLMPlayer | BotPlayer



async def run_episode(
    env: TurnBasedEnv,
    players: list[Player],
    *,
    run_id: str,
    episode_id: str,
    seed: int,
    opponent: str = "self",
    max_turns: int | None = None,
) -> EpisodeRecord:
    """``max_turns``: moves before the episode is cut as 'unfinished' (default: the env's
    ``turn_limit``)."""
    if len(players) != env.num_seats:
        raise ValueError(f"{env.name} has {env.num_seats} seats, got {len(players)} players")
    started = time.monotonic()
    env.reset(seed)
    rng = random.Random(seed)
    turns: list[Turn] = []
    versions: dict[str, int] = {}
    for _ in range(max_turns or turn_limit(env)):
        if env.done:
            break
        seat = env.current_seat
        player = players[seat]
        if isinstance(player, BotPlayer):
            text = player.bot.act(env, rng)
            turn = Turn(seat=seat, agent=player.label, role=env.role(seat), text=text)
        else:
            version = player.version()
            versions.setdefault(player.agent, version)
            choices = legal_completions(env, player.prefill) if player.legal_only else None
            gen = await player.client.generate(env.observation(seat), prefill=player.prefill,
                                               choices=choices)
            text = player.prefill + gen.text
            turn = Turn(
                seat=seat,
                agent=player.agent,
                role=env.role(seat),
                text=text,
                policy_version=version,
                prompt_token_ids=gen.prompt_token_ids,
                completion_token_ids=gen.completion_token_ids,
                behaviour_logprobs=gen.logprobs,
                finish_reason=gen.finish_reason,
                choices=choices,
                images=gen.images,
            )
        result = env.step(text)
        turn.legal = result.legal
        turns.append(turn)
    outcome = env.outcome()
    results = [outcome.result_for(s) if env.done else "unfinished" for s in range(env.num_seats)]
    return EpisodeRecord(
        run_id=run_id,
        episode_id=episode_id,
        env=env.name,
        seed=seed,
        opponent=opponent,
        seats=[p.label for p in players],
        policy_versions=versions,
        turns=turns,
        results=results,
        info={"reason": outcome.reason, **outcome.info},
        duration_s=time.monotonic() - started,
    )
