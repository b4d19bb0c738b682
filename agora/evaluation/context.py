"""What every evaluation part shares: the (retargeted) config, one HTTP client, a gate on
concurrent episodes, and LLM players for served adapter names."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from agora.config.run import RunConfig
from agora.rollout.runner import LLMPlayer
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model


@dataclass
class EvalContext:
    cfg: RunConfig  # pointed at the evaluation's servers (serving.EvalServices.start)
    http: httpx.AsyncClient
    concurrency: int = 16
    gate: asyncio.Semaphore = field(init=False)

    def __post_init__(self) -> None:
        self.gate = asyncio.Semaphore(self.concurrency)

    def client(self, agent: str, served: str) -> PolicyClient:
        """Ask ``served`` (an adapter name, or ``base``) with ``agent``'s sampling settings."""
        agent_cfg = self.cfg.agent(agent)
        tokenizer = load_tokenizer(resolve_model(self.cfg.models[agent_cfg.base].model))
        return PolicyClient(self.cfg.policy_url(agent), served, tokenizer, agent_cfg.sampling,
                            http=self.http)

    def llm_player(self, agent: str, served: str) -> LLMPlayer:
        return LLMPlayer(agent, self.client(agent, served), prefill=self.cfg.environment.prefill)


def open_http(concurrency: int) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=concurrency * 2))
