"""Stage (e): actor and critic take turns on held-out problems; the paper's metrics.

One episode per test problem: the actor answers; then, ``turns - 1`` times, the critic reviews
the latest answer and the actor refines it given that feedback (Markov prompts, see
``prompts.py``). Both are served by vLLM: the base model for ``--stage base``, else the stage's
two LoRA adapters loaded at runtime. Episodes run concurrently so vLLM batches them. Writes
``<run>/eval/<stage>.json`` (metrics, see ``metrics.py``) and ``<stage>.transcripts.jsonl``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

import httpx

from agora.data import Task, load_tasks
from agora.reflection.clients import Agents, check, generate
from agora.reflection.config import STAGES, ReflectionConfig
from agora.reflection.critic_effects import critic_effects
from agora.reflection.program_critic import critic_feedback
from agora.reflection.prompts import (
    CriticCheck,
    actor_messages,
    critic_messages,
    parse_verdict,
    refine_messages,
)
from agora.reflection.records import Transcript, Turn, write_rows
from agora.reflection.scores import reflection_metrics
from agora.reflection.server import evaluation_name, role_stages, served_adapters
from agora.serving.auth import vllm_headers
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model


async def run_episode(agents: Agents, task: Task, turns: int, max_chars: int,
                      stop_on_approval: bool = False,
                      critic_check: CriticCheck = "text") -> Transcript:
    """One problem, ``turns`` actor answers; ``critic_check``: how the critic checks."""
    answer = await generate(agents.actor, actor_messages(task.question))
    checked = await check(answer, task)
    history = [Turn(answer=answer, extracted=checked.extracted, correct=checked.correct)]
    while len(history) < turns:
        last = history[-1]
        if last.carried:  # approved earlier: the answer stands
            history.append(last.model_copy())
            continue
        written = await generate(agents.critic,
                                 critic_messages(task.question, last.answer, max_chars,
                                                 critic_check))
        feedback = await critic_feedback(written, last.extracted, critic_check)
        verdict = parse_verdict(feedback)
        if stop_on_approval and verdict == "correct":
            history.append(last.model_copy(update={"feedback": feedback, "verdict": verdict,
                                                   "carried": True}))
            continue
        answer = await generate(agents.actor, refine_messages(task.question, last.answer,
                                                              feedback, max_chars))
        checked = await check(answer, task)
        history.append(Turn(answer=answer, extracted=checked.extracted, correct=checked.correct,
                            feedback=feedback, verdict=verdict))
    return Transcript(task_id=task.task_id, question=task.question, reference=task.answer,
                      turns=history)


async def _episodes(cfg: ReflectionConfig, url: str, names: dict[str, str],
                    tasks: list[Task], log: Callable[[str], None]) -> list[Transcript]:
    limits = httpx.Limits(max_connections=cfg.eval.concurrency)
    async with httpx.AsyncClient(timeout=600, limits=limits, headers=vllm_headers()) as http:
        tokenizer = load_tokenizer(resolve_model(cfg.policy.model))
        agents = Agents(
            actor=PolicyClient(url, names["actor"], tokenizer, cfg.actor.sampling, http=http),
            critic=PolicyClient(url, names["critic"], tokenizer, cfg.critic.sampling, http=http),
        )
        gate = asyncio.Semaphore(cfg.eval.concurrency)
        done = 0

        async def one(task: Task) -> Transcript:
            nonlocal done
            async with gate:
                transcript = await run_episode(agents, task, cfg.eval.turns,
                                               cfg.max_shown_chars, cfg.eval.stop_on_approval,
                                               cfg.critic_check)
            done += 1
            if done % 10 == 0:
                log(f"  eval: {done}/{len(tasks)} problems")
            return transcript

        return list(await asyncio.gather(*(one(t) for t in tasks)))


def evaluate_stage(cfg: ReflectionConfig, url: str, stage: str,
                   log: Callable[[str], None] = print,
                   critic_stage: str | None = None) -> dict[str, object]:
    """Run the episodes of ``stage`` ('base', 'sft' or 'dpo') and write its files;
    ``critic_stage``: the critic plays that stage's adapter instead (an ablation, written as
    ``<stage>-critic-<critic_stage>``)."""
    for option, value in (("--stage", stage), ("--critic-stage", critic_stage or stage)):
        if value not in STAGES:
            raise ValueError(f"{option} must be one of {list(STAGES)}, not {value!r}")
    name = evaluation_name(stage, critic_stage)
    tasks = load_tasks(cfg.task, split="test", limit=cfg.eval.tasks)
    if not tasks:
        raise ValueError("task: the test split is empty")
    if cfg.eval.tasks is not None and len(tasks) < cfg.eval.tasks:
        log(f"eval {name}: the test split holds {len(tasks)} problems, not the "
            f"{cfg.eval.tasks} of eval.tasks")
    started = time.monotonic()
    with served_adapters(cfg, url, stage, critic_stage) as names:
        log(f"eval {name}: {len(tasks)} held-out problems x {cfg.eval.turns} turns "
            f"(actor '{names['actor']}', critic '{names['critic']}')")
        transcripts = asyncio.run(_episodes(cfg, url, names, tasks, log))
    metrics = reflection_metrics(transcripts, cfg.eval.turns).as_dict()
    result = {"stage": name, "stages": role_stages(stage, critic_stage), **metrics,
              "critic": critic_effects(transcripts),
              "seconds": round(time.monotonic() - started, 1),
              "stop_on_approval": cfg.eval.stop_on_approval, "adapters": names}
    out = cfg.run_dir / "eval"
    write_rows(out / f"{name}.transcripts.jsonl", transcripts)
    (out / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n")
    return result
