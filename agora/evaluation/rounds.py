"""Evaluate agents in a discussion on held-out tasks: accuracy after each round.

The numbers MAPoRL reports: accuracy after turn 1 (every agent answering alone) and after the
last turn (after reading each other), here per round and averaged over the agents. Episodes run
straight through the policy servers, concurrently so vLLM can batch them, and answers are checked
in-process by the same verifiers the reward service uses (no service needed).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx

from agora.config.run import RunConfig
from agora.data import Task, load_tasks
from agora.envs.discussion import Discussion, DiscussionTask
from agora.evaluation.stats import wilson
from agora.rewards.verifiers.math import verify_math
from agora.rewards.verifiers.nli import verify_nli
from agora.rollout.runner import LLMPlayer, run_episode
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model


@dataclass
class DiscussionResult:
    rounds: int
    seats: int
    tasks: int = 0
    # correct[r][s]: how many tasks seat s answered right in round r
    correct: list[list[int]] = field(default_factory=list)
    parsable: int = 0
    answers: int = 0

    def __post_init__(self) -> None:
        if not self.correct:
            self.correct = [[0] * self.seats for _ in range(self.rounds)]

    def accuracy(self, round_index: int) -> float:
        answers = self.tasks * self.seats
        return sum(self.correct[round_index]) / answers if answers else 0.0

    def as_dict(self) -> dict[str, object]:
        n = self.tasks * self.seats
        return {
            "tasks": self.tasks,
            "accuracy_by_round": [round(self.accuracy(r), 4) for r in range(self.rounds)],
            "turn1": self.accuracy(0),
            "last": self.accuracy(self.rounds - 1),
            "last_ci95": wilson(sum(self.correct[-1]), n),
            "parsable_rate": self.parsable / self.answers if self.answers else 0.0,
        }


def is_correct(text: str, task: Task) -> tuple[bool, bool]:
    """(correct, parsable) by the task's own verifier."""
    if task.kind == "nli":
        verdict = verify_nli(text, task)
        return verdict.correct, verdict.parsable
    verdict = verify_math(text, task)
    return verdict.correct, verdict.extracted is not None


async def run_discussions(
    cfg: RunConfig, adapters: dict[str, str], tasks: list[Task], seats: list[str] | None = None,
    rounds: int | None = None, concurrency: int = 8,
) -> DiscussionResult:
    """Discuss every task once. ``adapters`` maps each seated agent to the adapter name to ask
    for (its latest, or a pinned version like ``alice-v0``)."""
    seats = seats or list(cfg.environment.seats)
    rounds = rounds or cfg.environment.rounds
    result = DiscussionResult(rounds=rounds, seats=len(seats))
    limits = httpx.Limits(max_connections=concurrency * len(seats))
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        clients = {}
        for agent in dict.fromkeys(seats):
            agent_cfg = cfg.agent(agent)
            tokenizer = load_tokenizer(resolve_model(cfg.models[agent_cfg.base].model))
            clients[agent] = PolicyClient(cfg.policy_url(agent), adapters[agent], tokenizer,
                                          agent_cfg.sampling, http=http)
        gate = asyncio.Semaphore(concurrency)

        async def one(index: int, task: Task) -> None:
            env = Discussion(DiscussionTask(task.task_id, task.kind, task.question),
                             num_agents=len(seats), rounds=rounds)
            players = [LLMPlayer(a, clients[a], prefill=cfg.environment.prefill) for a in seats]
            async with gate:
                record = await run_episode(env, players, run_id="eval",
                                           episode_id=f"eval-{index}", seed=index)
            result.tasks += 1
            for turn_index, turn in enumerate(record.turns):
                r, seat = divmod(turn_index, len(seats))
                correct, parsable = await asyncio.to_thread(is_correct, turn.text, task)
                result.correct[r][seat] += correct
                result.parsable += parsable
                result.answers += 1

        await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks)))
    return result


def evaluate_discussion(
    cfg: RunConfig, adapters: dict[str, str], limit: int | None = None,
    seats: list[str] | None = None, rounds: int | None = None,
) -> DiscussionResult:
    """Accuracy per round on the config's held-out (test) tasks."""
    if cfg.environment.task is None:
        raise ValueError("environment.task: no task source to evaluate on")
    tasks = load_tasks(cfg.environment.task, split="test", limit=limit or cfg.eval.tasks)
    return asyncio.run(run_discussions(cfg, adapters, tasks, seats, rounds))
