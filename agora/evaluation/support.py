"""Measure a policy on the support task straight through vLLM: task success, tool use, handoffs.

One served model (the base, ``base``, or a trained adapter's name) plays all three desks, as in
``configs/support_tools.yaml``; episodes run concurrently so vLLM can batch them. No Redis,
Celery or reward service: the support task's scorer needs none (the truth is in the episode).
Used for the before/after numbers of a run: ``agora support-eval CONFIG --level 1``. Episodes
are played through the evaluation's ``EvalContext`` like every other evaluation's.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from agora.config.run import RunConfig
from agora.envs.support import support_scores
from agora.envs.support_options import build_support_env
from agora.envs.support_tasks import make_task, task_split
from agora.evaluation.context import EvalContext, open_http
from agora.evaluation.stats import wilson
from agora.serving.client import PolicyAdmin
from agora.serving.model_folders import resolve_model
from agora.serving.vllm_server import SERVED_BASE_NAME, vllm_service


@dataclass
class SupportEval:
    level: int
    episodes: int = 0
    successes: int = 0
    calls: int = 0
    accurate_calls: int = 0
    llm_turns: int = 0
    legal_turns: int = 0
    handed_off: int = 0
    answered: int = 0
    marked: int = 0
    examples: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        n = max(1, self.episodes)
        return {
            "level": self.level, "episodes": self.episodes,
            "success": self.successes / n, "success_ci95": wilson(self.successes, self.episodes),
            "tool_accuracy": self.accurate_calls / self.calls if self.calls else None,
            "calls_per_episode": self.calls / n,
            "legal_rate": self.legal_turns / max(1, self.llm_turns),
            "handoff_rate": self.handed_off / n, "answered_rate": self.answered / n,
            "answer_tag_rate": self.marked / n,
        }


def eval_seeds(level: int, episodes: int, seed: int, split: str | None) -> list[int]:
    """``episodes`` seeds from ``seed`` on; with ``split``, only seeds whose task is in it."""
    seeds, candidate = [], seed
    while len(seeds) < episodes:
        if split is None or task_split(make_task(level, candidate).question) == split:
            seeds.append(candidate)
        candidate += 1
    return seeds


async def play_support(ctx: EvalContext, agent: str, served: str, episodes: int, level: int,
                       seed: int = 30_000, split: str | None = None) -> SupportEval:
    opts = getattr(ctx.cfg.environment, "support", None)  # only a support config has it
    if opts is None:
        raise ValueError("the config's environment is not 'support'")
    seeds = eval_seeds(level, episodes, seed, split)
    result = SupportEval(level)
    advance = ctx.start_phase(f"support level {level}", episodes)

    async def one(index: int) -> None:
        env = build_support_env(opts, {"seed": seeds[index]})
        env.level = level
        player = ctx.llm_player(agent, served)
        record = await ctx.play(env, [player] * 3, f"support-eval-{index}", seeds[index],
                                run_id="support-eval")
        advance()
        info = record.info
        scores = support_scores(info)
        result.episodes += 1
        result.successes += bool(scores["success"])
        result.calls += int(scores["calls"])
        result.accurate_calls += int(scores["accurate_calls"])
        result.llm_turns += len(record.turns)
        result.legal_turns += sum(t.legal for t in record.turns)
        result.handed_off += bool(info["handoffs"])
        result.answered += info["answer"] is not None
        result.marked += bool(info["answer_marked"])
        if len(result.examples) < 3:
            result.examples.append({"question": info["question"], "truth": info["truth"],
                                    "turns": [t.text for t in record.turns]})

    await asyncio.gather(*(one(i) for i in range(episodes)))
    return result


@contextmanager
def policy_server(cfg: RunConfig, agent: str, port: int | None = None) -> Iterator[RunConfig]:
    """vLLM on the agent's base model for the duration (the config's port unless ``port``);
    yields the config pointing at it."""
    base_key = cfg.agent(agent).base
    model = cfg.models[base_key].model_copy(update={"port": port or cfg.models[base_key].port})
    served = cfg.model_copy(deep=True)
    served.models[base_key] = model
    logs = Path(tempfile.mkdtemp(prefix="agora-support-eval-"))
    svc = vllm_service(resolve_model(model.model), model, cfg.services.host, logs / "vllm.log")
    svc.start()
    try:
        svc.wait_healthy(cfg.services.health_timeout_s)
        yield served
    finally:
        svc.stop()


def evaluate_support(cfg: RunConfig, episodes: int, levels: list[int], agent: str | None = None,
                     served: str = SERVED_BASE_NAME, split: str | None = None,
                     concurrency: int = 8) -> list[SupportEval]:
    """``episodes`` per level with ``served`` (a running server at the config's URL); with
    ``split`` ('train' or 'test', see ``support_tasks.task_split``) on that share only."""
    name = agent or cfg.agents[0].name

    async def main() -> list[SupportEval]:
        async with open_http(concurrency) as http:
            ctx = EvalContext(cfg, http, concurrency)
            return [await play_support(ctx, name, served, episodes, level, split=split)
                    for level in levels]

    return asyncio.run(main())


def run_support_eval(cfg: RunConfig, episodes: int, levels: list[int],
                     adapter: Path | None = None, port: int | None = None,
                     policy_url: str | None = None, split: str | None = None
                     ) -> list[SupportEval]:
    """The config's first agent, as the base model or ``adapter`` (a LoRA folder, loaded as
    ``support-eval``), on a vLLM started here (on ``port``) or the one at ``policy_url``."""
    agent = cfg.agents[0].name
    if policy_url:
        cfg = cfg.model_copy(deep=True)
        host, _, url_port = policy_url.rstrip("/").split("//")[-1].rpartition(":")
        cfg.services.hosts["policy"] = host
        cfg.models[cfg.agent(agent).base].port = int(url_port)
    with nullcontext(cfg) if policy_url else policy_server(cfg, agent, port) as served_cfg:
        served = SERVED_BASE_NAME
        if adapter is not None:
            served = "support-eval"
            PolicyAdmin(served_cfg.policy_url(agent)).load_adapter(served, str(adapter))
        return evaluate_support(served_cfg, episodes, levels, agent, served, split)
