"""Single- vs multi-agent training with the same budget (``agora compare``).

The question MAPoRL asks: does training an agent *with other learning agents* make it better
than training it alone for the same budget? Both arms start from the same base and adapter
settings and train through the full stack; what "alone" means depends on the env
(``arm_configs``):

- discussion: alone = the first learner alone, one round; together = the config as written;
  each arm is evaluated in its own format.
- code_debug: alone = the fixer alone on the bug list (``mode: fixer``); together = the config
  (pair mode: it repairs its author's code).
- negotiation, story, ...: alone = the learner against the config's scripted partners;
  together = every scripted seat taken by a learning copy of the learner.

A discussion arm is scored as MAPoRL scores it: accuracy after each round (``DiscussionResult``)
of one discussion per held-out task (``discussion.sample_discussions``, which ``agora eval``
samples pass@k from). Every other arm is scored by ``agora eval``'s episodes evaluation of the
learner's v0 (before) and latest version (after) on the config as written, so both arms face the
same partners on the same seeds.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path

from agora.config.agents import CONTEXT_PREFIX
from agora.config.run import RunConfig, parse_config
from agora.data import load_tasks
from agora.evaluation.context import EvalContext, open_http
from agora.evaluation.discussion import Answer, sample_discussions
from agora.evaluation.runner import EvalOptions, run_evaluation
from agora.evaluation.stats import wilson
from agora.evaluation.target import EvalInputError, EvalTarget, run_versions
from agora.serving.vllm_server import SERVED_BASE_NAME


class CompareInputError(ValueError):
    """The config has no single-agent reading; the message says why and what would have one."""


PEER_SUFFIX = "-peer"  # a learning copy of the learner, in a seat a scripted agent held


def compared_learner(cfg: RunConfig) -> str:
    """The agent both arms train and both are scored on."""
    learner = cfg.learner
    if learner is None:
        raise CompareInputError("agents: no trainable agent has a seat, so there is nothing to "
                                "train in either arm")
    return learner


def single_agent_config(cfg: RunConfig) -> RunConfig:
    """The same learner without learning partners (see the module table)."""
    learner = compared_learner(cfg)
    env = cfg.environment
    data = cfg.model_dump(mode="json")
    data["name"] = f"{cfg.name}-single"
    if env.spec.evaluation == "discussion":  # alone: one seat, one round
        data["agents"] = [cfg.agent(learner).model_dump(mode="json")]
        data["environment"] = {**data["environment"], "seats": [learner], "rounds": 1}
    elif env.name == "code_debug":  # the fixer alone, repairing the bug list's code
        if env.options.mode != "pair":
            raise CompareInputError("environment.code_debug.mode: 'fixer' is already the "
                                    "single-agent reading; compare starts from a pair config")
        data["agents"] = [cfg.agent(learner).model_dump(mode="json")]
        data["context_agents"] = {}
        data["environment"] = {**data["environment"], "seats": [learner],
                               "code_debug": {**data["environment"]["code_debug"],
                                              "mode": "fixer"}}
    else:  # the config as written: the learner among scripted partners
        if not any(s.startswith(CONTEXT_PREFIX) for s in env.seats):
            raise CompareInputError(
                f"environment.seats: {env.seats}: compare's single-agent arm trains the learner "
                f"against scripted partners, and no seat holds one (seat a context agent, "
                f"'{CONTEXT_PREFIX}<name>', beside '{learner}')")
        if len(cfg.trainable_agents) > 1:
            raise CompareInputError(
                f"agents: {[a.name for a in cfg.trainable_agents]} all train; compare's "
                f"single-agent arm needs '{learner}' as the only learner, with scripted partners")
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
    """The config as written, except in a context-seat env other than code_debug: there each
    scripted seat is taken by a learning copy of the learner (``<learner>-peer``, its own
    adapter, the same settings and warm start)."""
    data = cfg.model_dump(mode="json")
    data["name"] = f"{cfg.name}-multi"
    env = cfg.environment
    if env.spec.evaluation != "discussion" and env.name != "code_debug":
        learner = cfg.agent(compared_learner(cfg))
        peer = {**learner.model_dump(mode="json"), "name": f"{learner.name}{PEER_SUFFIX}"}
        data["agents"] = [*data["agents"], peer]
        data["environment"] = {**data["environment"], "seats": [
            peer["name"] if s.startswith(CONTEXT_PREFIX) else s for s in env.seats]}
    return parse_config(data, "<multi-agent arm>")


def arm_configs(cfg: RunConfig) -> list[tuple[str, RunConfig]]:
    """[("single-agent", ...), ("multi-agent", ...)]; CompareInputError if the env has no
    single-agent reading."""
    spec = cfg.environment.spec
    if spec.is_game or spec.evaluation is None:
        what = "a game against bots and itself" if spec.is_game else "not evaluated"
        raise CompareInputError(
            f"environment.name: {cfg.environment.name} is {what}; compare needs a discussion "
            "or an env with scripted partners (negotiation, story, code_debug)")
    return [("single-agent", single_agent_config(cfg)), ("multi-agent", multi_agent_config(cfg))]


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
    """One arm: its run folder and its learner's held-out scores before and after training
    (``DiscussionResult.as_dict()`` for a discussion, else ``agora eval``'s metrics of the
    learner: deals, utility, tests passed, ...)."""

    label: str
    run_dir: Path
    before: dict
    after: dict
    evaluation: str = "discussion"  # or "episodes"
    eval_dir: Path | None = None

    def updates(self) -> int:
        """PPO updates the arm's run made (its metrics log has one row per update)."""
        path = self.run_dir / "metrics.jsonl"
        return len(path.read_text().splitlines()) if path.is_file() else 0

    def curve(self, agent: str, key: str = "accuracy_last") -> list[tuple[float, float]]:
        """(minutes, the learner's training ``key`` over its last 100 episodes) per update:
        a discussion's last-round accuracy, else its reward."""
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return []
        points = []
        for line in path.read_text().splitlines():
            row = json.loads(line)
            stats = row["agents"].get(agent, {})
            if key in stats:
                points.append((row["elapsed_s"] / 60, stats[key]))
        return points

    def summary(self, learner: str) -> dict:
        """The arm's entry of compare.json."""
        key = "accuracy_last" if self.evaluation == "discussion" else "reward_mean"
        return {"run_dir": str(self.run_dir), "updates": self.updates(),
                "evaluation": self.evaluation, "learner": learner,
                **({"eval_dir": str(self.eval_dir)} if self.eval_dir else {}),
                "before": self.before, "after": self.after, "curve_metric": key,
                "curve": self.curve(learner, key)}


def evaluate_arm(cfg: RunConfig, tasks: int | None) -> tuple[dict, dict]:
    """A discussion arm's (base model, trained adapters) on the held-out tasks; the servers
    must be up."""
    seats = list(dict.fromkeys(cfg.environment.seats))
    before = evaluate_discussion(cfg, {a: SERVED_BASE_NAME for a in seats}, limit=tasks)
    after = evaluate_discussion(cfg, {a: a for a in seats}, limit=tasks)
    return before.as_dict(), after.as_dict()


def evaluate_episodes_arm(evaluation_cfg: RunConfig, run_dir: Path, learner: str,
                          options: EvalOptions) -> tuple[dict, dict, Path]:
    """The learner's v0 (before) and latest version (after) of the arm in ``run_dir``, played
    by ``agora eval``'s episodes evaluation on ``evaluation_cfg`` (the config as written, the
    same for both arms); returns (before, after, the evaluation's folder)."""
    versions = run_versions(run_dir, learner)
    if not versions:
        raise EvalInputError(f"{run_dir}: the arm published no adapter of '{learner}'")
    target = EvalTarget(cfg=evaluation_cfg, kind="run", source=run_dir, run_dir=run_dir,
                        versions={learner: versions})
    report, out_dir = run_evaluation(target, options)
    policies = report["sections"]["episodes"]["policies"]
    return (policies["baseline"]["agents"][learner], policies["evaluated"]["agents"][learner],
            out_dir)


def sample_curve(points: list[tuple[float, float]], count: int = 6) -> list[tuple[float, float]]:
    if len(points) <= count:
        return points
    step = (len(points) - 1) / (count - 1)
    return [points[round(i * step)] for i in range(count)]
