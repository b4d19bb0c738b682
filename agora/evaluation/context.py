"""What every evaluation part shares: the (retargeted) config, one HTTP client, a gate on
concurrent episodes, LLM players for served adapter names, and progress per phase.

Every evaluation (``agora eval``, ``demo``'s before/after, ``compare``'s held-out accuracy,
``support-eval``) plays its episodes through ``EvalContext.play``, so the concurrency limit and
the progress report are the same everywhere. Progress is a callback: a phase starts with its
name and episode count and gets back the function to call per finished episode
(``terminal_progress`` draws rich bars with it; the default draws nothing).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx

from agora.config.agents import SamplingConfig
from agora.config.run import RunConfig
from agora.envs.base import TurnBasedEnv
from agora.rollout.records import EpisodeRecord
from agora.rollout.runner import LLMPlayer, Player, run_episode
from agora.sandbox.remote import code_runs_at
from agora.serving.auth import vllm_headers
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model

Advance = Callable[[], None]
# (phase name, episodes in it) -> the function to call once per finished episode.
StartPhase = Callable[[str, int], Advance]


def no_progress(_name: str, _total: int) -> Advance:
    return lambda: None


def evaluation_sampling(cfg: RunConfig, agent: str) -> SamplingConfig:
    """``agent``'s sampling settings with the evaluation's temperature, when it has one."""
    sampling = cfg.agent(agent).sampling
    if cfg.eval.temperature is None:
        return sampling
    return sampling.model_copy(update={"temperature": cfg.eval.temperature})


@dataclass
class EvalContext:
    cfg: RunConfig  # pointed at the evaluation's servers (serving.EvalServices.start)
    http: httpx.AsyncClient
    concurrency: int = 16
    start_phase: StartPhase = no_progress
    gate: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.gate = asyncio.Semaphore(self.concurrency)

    def client(self, agent: str, served: str) -> PolicyClient:
        """Ask ``served`` (an adapter name, or ``base``) with ``agent``'s sampling settings,
        at ``eval.temperature`` when the config sets one."""
        agent_cfg = self.cfg.agent(agent)
        tokenizer = load_tokenizer(resolve_model(self.cfg.models[agent_cfg.base].model))
        return PolicyClient(self.cfg.policy_url(agent), served, tokenizer,
                            evaluation_sampling(self.cfg, agent), http=self.http)

    def llm_player(self, agent: str, served: str) -> LLMPlayer:
        return LLMPlayer(agent, self.client(agent, served), prefill=self.cfg.environment.prefill)

    async def play(self, env: TurnBasedEnv, players: list[Player], episode_id: str, seed: int,
                   run_id: str = "eval", max_turns: int | None = None) -> EpisodeRecord:
        """One episode, at most ``concurrency`` at a time (vLLM batches the ones in flight)."""
        async with self.gate:
            # Tool code of a sandboxed env runs in the evaluation's reward service, as in
            # training (agora/sandbox/remote.py); this process never runs model code.
            sandbox = (self.cfg.service_url("reward") if self.cfg.environment.spec.sandboxed
                       else None)
            with code_runs_at(sandbox):
                return await run_episode(env, players, run_id=run_id, episode_id=episode_id,
                                         seed=seed, max_turns=max_turns)


def open_http(concurrency: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency * 2),
                             headers=vllm_headers())


@contextmanager
def terminal_progress() -> Iterator[StartPhase]:
    """A rich bar per phase (episodes done of total) on stderr when it is a terminal, as the
    TRL stages show theirs; elsewhere (logs, CI, tests) nothing."""
    if not sys.stderr.isatty():
        yield no_progress
        return
    # Imported here: only a terminal needs it.
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    bars = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True))

    def start(name: str, total: int) -> Advance:
        task = bars.add_task(name, total=total)
        return lambda: bars.advance(task)

    with bars:
        yield start
