"""The ``workers``, ``services``, ``judge`` and ``eval`` sections: where the stack runs and how it
is evaluated."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from agora.config.base import StrictModel


class WorkersConfig(StrictModel):
    count: int = Field(1, ge=1, le=64)
    concurrency: int = Field(8, ge=1, le=256, description="episodes in flight per worker")
    # Episodes queued ahead of the trainer; bounded so rollouts never run far past max_staleness.
    queue_ahead: int = Field(64, ge=1)
    # Seconds after which a task taken by a dead worker goes back to the queue.
    visibility_timeout: int = Field(60, ge=5)
    # Seconds the trainer, its budget spent, waits for the episodes still in flight (sending
    # again any the broker lost), so the run ends with each one it sent accounted for.
    settle_s: float = Field(30.0, ge=0, le=3600)
    # Prometheus metrics of worker i on metrics_port + i (embedded stack); null: none.
    metrics_port: int | None = Field(8210, ge=1024, le=65535 - 64)

    def metrics_ports(self) -> list[int]:
        return [] if self.metrics_port is None else [
            self.metrics_port + i for i in range(self.count)]


class ServicesConfig(StrictModel):
    host: str = "127.0.0.1"
    redis_port: int = Field(6390, ge=1024, le=65535)
    reward_port: int = Field(8201, ge=1024, le=65535)
    gateway_port: int = Field(8200, ge=1024, le=65535)
    trainer_metrics_port: int = Field(8202, ge=1024, le=65535)
    # Seconds the finished trainer keeps its metrics endpoint up before it exits, so that
    # Prometheus (scraping every 5 s) records the last updates' values instead of losing them.
    trainer_final_scrape_s: float = Field(12.0, ge=0, le=600)
    judge_port: int = Field(8203, ge=1024, le=65535)
    health_timeout_s: float = Field(300.0, gt=0)
    # `agora up` restarts a crashed policy server or embedded Redis this many times (each) before
    # it stops everything (agora/stack/supervisor.py); other services stop everything at once.
    restarts: int = Field(3, ge=0, le=100)
    # Where a service is reached when it is not at `host`: compose and k8s give each service its
    # own DNS name (keys: the names of RunConfig.all_ports(), or `policy` for every policy
    # server). `host` stays the address the trainer binds its metrics to (0.0.0.0 in a
    # container). Usually set by the deployment via AGORA_SERVICES (agora/stack/deployment.py).
    hosts: dict[str, str] = Field(default_factory=dict)


class JudgeConfig(StrictModel):
    """The judge service of the embedded stack (see agora/judge/settings.py for its env)."""

    # 'rubric': deterministic text-feature scores (no model). 'llm': ask a model through an
    # OpenAI-compatible server: `model` names a key of `models` (its policy server's base
    # model judges, locally) unless `base_url` points at another server.
    backend: Literal["rubric", "llm"] = "rubric"
    model: str | None = None
    base_url: str | None = None
    served_model: str = Field("base", description="model name to ask for at base_url")
    # The judge model reasons before its verdict; a small local model on a CPU pays for every
    # token of it, in every judged turn.
    max_tokens: int = Field(512, ge=1, description="generation budget per judge model call")
    # A judge model too small to follow the verdict format (SmolLM2-135M: not one parseable
    # preference verdict in 512) answers through vLLM's structured outputs instead: only the verdict
    # or score lines can be sampled, no reasoning. Needs a vLLM judge server.
    constrained: bool = Field(False, description="verdict / score lines only (vLLM)")
    # Read the verdict from the judge model's next-token probabilities (G-Eval) instead of its
    # sampled text: a graded preference and score where a small model's sampled verdict is a
    # constant (agora/judge/llm.py). One token per verdict, so max_tokens does not matter.
    logprobs: bool = Field(False, description="verdicts from next-token probabilities")

    @model_validator(mode="after")
    def _model_reading_needs_a_model(self) -> JudgeConfig:
        for name in ("constrained", "logprobs"):
            if getattr(self, name) and self.backend != "llm":
                raise ValueError(f"judge.{name} changes how a judge model is read: it needs "
                                 "judge.backend: llm")
        return self


class EvalConfig(StrictModel):
    games: int = Field(200, ge=1)
    tasks: int = Field(100, ge=1, description="held-out tasks per discussion evaluation")
    # Scripted bots of the game (GAME_BOTS), or "self": the agent in every seat (for
    # cooperative games, e.g. Hanabi's self-play score).
    opponents: list[str] = Field(default_factory=lambda: ["random", "minimax"])
    # Training samples at the agents' own temperature (PPO needs the spread); a user who queries
    # the trained agent may decode greedily instead, and the two readings differ most where the
    # policy is unsure (a Tic-Tac-Toe warm start that puts half its mass on the right move).
    temperature: float | None = Field(
        None, ge=0.0, le=5.0, description="sampling temperature of every evaluated agent "
        "(0 = greedy); None = each agent's own sampling.temperature, as in training")

