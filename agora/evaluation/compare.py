"""Single- vs multi-agent training with the same budget (``agora compare``).

The question MAPoRL asks: does training an agent *in a discussion* make it better than training
it alone for the same time? Both arms start from the same base and adapter settings:

* single-agent: the config's first trainable agent, alone, one round (answer once);
* multi-agent: the config as written (N agents, T rounds of answer-read-revise).

Each arm trains for ``minutes`` through the full stack, then is evaluated on the same held-out
tasks: the single agent answering alone, and the discussion after turn 1 and after the last turn.
The held-out numbers are MAPoRL's: accuracy after each round (``DiscussionResult``) of one
discussion per task, played and verified by the evaluation's discussion loop
(``discussion.sample_discussions``, the one ``agora eval`` samples pass@k from).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from agora.config.run import RunConfig, parse_config
from agora.data import load_tasks
from agora.evaluation.context import EvalContext, open_http
from agora.evaluation.discussion import Answer, sample_discussions
from agora.evaluation.stats import wilson
from agora.serving.vllm_server import SERVED_BASE_NAME


def single_agent_config(cfg: RunConfig) -> RunConfig:
    """The same learner alone: one seat, one round, the other agents dropped."""
    learner = cfg.trainable_agents[0]
    data = cfg.model_dump(mode="json")
    data["name"] = f"{cfg.name}-single"
    data["agents"] = [learner.model_dump(mode="json")]
    data["environment"] = {**data["environment"], "seats": [learner.name], "rounds": 1}
    return parse_config(data, "<single-agent arm>")


def with_budget(cfg: RunConfig, minutes: float | None, updates: int | None) -> RunConfig:
    """The same config with each arm's training budget: wall-clock ``minutes`` (the arms get
    the same CPU time; the discussion's costlier updates mean fewer of them), or ``updates``
    of every learner (the arms see the same number of PPO steps, however long they take)."""
    if minutes is not None and updates is not None:
        raise ValueError("give --minutes or --updates, not both")
    data = cfg.model_dump(mode="json")
    if minutes is not None:
        data["trainer"]["max_minutes"] = minutes
    if updates is not None:
        data["trainer"]["max_updates"] = updates
        data["trainer"]["max_minutes"] = None
    return parse_config(data, "<compare budget>")


def multi_agent_config(cfg: RunConfig) -> RunConfig:
    data = cfg.model_dump(mode="json")
    data["name"] = f"{cfg.name}-multi"
    return parse_config(data, "<multi-agent arm>")


@dataclass
class DiscussionResult:
    """Accuracy after each round of one discussion per held-out task (an arm's before/after)."""

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

    @classmethod
    def of(cls, answers: list[list[list[list[Answer]]]], rounds: int, seats: int
           ) -> DiscussionResult:
        """From ``sample_discussions``' answers[task][sample][round][seat], every sample
        counted as a task of its own (``evaluate_discussion`` samples one)."""
        result = cls(rounds=rounds, seats=seats)
        for grid in (sample for task in answers for sample in task):
            result.tasks += 1
            for r, row in enumerate(grid):
                for seat, answer in enumerate(row):
                    result.correct[r][seat] += answer.correct
                    result.parsable += answer.parsable
                    result.answers += 1
        return result

    def accuracy(self, round_index: int) -> float:
        answers = self.tasks * self.seats
        return sum(self.correct[round_index]) / answers if answers else 0.0

    def as_dict(self) -> dict[str, object]:
        n = self.tasks * self.seats
        return {
            "tasks": self.tasks,
            "accuracy_by_round": [round(self.accuracy(r), 4) for r in range(self.rounds)],
            "answers": n,  # tasks x seats: the intervals' trials
            "turn1": self.accuracy(0),
            "turn1_ci95": wilson(sum(self.correct[0]), n),
            "last": self.accuracy(self.rounds - 1),
            "last_ci95": wilson(sum(self.correct[-1]), n),
            "parsable_rate": self.parsable / self.answers if self.answers else 0.0,
        }


def evaluate_discussion(cfg: RunConfig, adapters: dict[str, str], limit: int | None = None,
                        concurrency: int = 8) -> DiscussionResult:
    """Accuracy per round on the config's held-out (test) tasks, one discussion each;
    ``adapters`` maps each seated agent to the adapter name to ask for (its latest, or a
    pinned version like ``alice-v0``)."""
    if cfg.environment.task is None:
        raise ValueError("environment.task: no task source to evaluate on")
    tasks = load_tasks(cfg.environment.task, split="test", limit=limit or cfg.eval.tasks)

    async def main() -> DiscussionResult:
        async with open_http(concurrency) as http:
            ctx = EvalContext(cfg, http, concurrency)
            answers = await sample_discussions(ctx, adapters, tasks, k=1)
        return DiscussionResult.of(answers, cfg.environment.rounds, len(cfg.environment.seats))

    return asyncio.run(main())


@dataclass
class ArmResult:
    label: str
    run_dir: Path
    before: DiscussionResult
    after: DiscussionResult

    def updates(self) -> int:
        """PPO updates the arm's run made (its metrics log has one row per update)."""
        path = self.run_dir / "metrics.jsonl"
        return len(path.read_text().splitlines()) if path.is_file() else 0

    def curve(self, agent: str) -> list[tuple[float, float]]:
        """(minutes, last-round training accuracy over the last 100 episodes) per update."""
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return []
        points = []
        for line in path.read_text().splitlines():
            row = json.loads(line)
            stats = row["agents"].get(agent, {})
            if "accuracy_last" in stats:
                points.append((row["elapsed_s"] / 60, stats["accuracy_last"]))
        return points


def evaluate_arm(cfg: RunConfig, tasks: int | None) -> tuple[DiscussionResult, DiscussionResult]:
    """(base model, trained adapters) on the held-out tasks; the servers must be up."""
    seats = list(dict.fromkeys(cfg.environment.seats))
    before = evaluate_discussion(cfg, {a: SERVED_BASE_NAME for a in seats}, limit=tasks)
    after = evaluate_discussion(cfg, {a: a for a in seats}, limit=tasks)
    return before, after


def sample_curve(points: list[tuple[float, float]], count: int = 6) -> list[tuple[float, float]]:
    if len(points) <= count:
        return points
    step = (len(points) - 1) / (count - 1)
    return [points[round(i * step)] for i in range(count)]
