"""Single- vs multi-agent training with the same budget (``agora compare``).

The question MAPoRL asks: does training an agent *in a discussion* make it better than training
it alone for the same time? Both arms start from the same base and adapter settings:

* single-agent: the config's first trainable agent, alone, one round (answer once);
* multi-agent: the config as written (N agents, T rounds of answer-read-revise).

Each arm trains for ``minutes`` through the full stack, then is evaluated on the same held-out
tasks: the single agent answering alone, and the discussion after turn 1 and after the last turn.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agora.config.run import RunConfig, parse_config
from agora.evaluation.rounds import DiscussionResult, evaluate_discussion
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
