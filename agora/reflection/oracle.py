"""Stage (a): oracle data. The actor answers; a stronger model critiques and refines.

For each training problem the actor (the base policy, no adapter) writes ``actor_samples``
first answers. For each answer the oracle writes ``oracle.samples`` critiques (one request with
``n`` samples) and, after each critique, a refinement in the actor's role (the same prompt the
actor sees when it refines). Every answer is checked against the ground truth here, once, so the
later stages (SFT data, preference pairs) need no model at all.

The oracle sees the same prompts as the critic and actor will, plus the ground truth when
``oracle.show_reference`` is on; the saved data always pairs the oracle's text with the plain
prompt, so the adapters learn to act without the reference. With ``oracle.backend: reference``
no model writes them: a script does, from the ground truth (``reference_oracle.py``).

A second round (``collect_oracle_data(..., stage="sft")``, asked for by ``dpo.data_from: sft``)
does the same with the SFT actor's adapter writing the first answers, into ``oracle-sft.jsonl``:
DPO's pairs are then made of answers like those the trained actor gives and its critic will
judge, not the base model's (the first round's answers are mostly wrong and formatted as the
base model writes; the SFT actor's are mostly right and written in the oracle's format).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import httpx

from agora.data import Task, load_tasks
from agora.reflection.clients import ChatClient, check, generate, oracle_api_key
from agora.reflection.config import ReflectionConfig
from agora.reflection.program_critic import critic_feedback
from agora.reflection.prompts import (
    actor_messages,
    critic_messages,
    parse_verdict,
    refine_messages,
    with_reference,
)
from agora.reflection.records import Critique, OracleRow, write_rows
from agora.reflection.reference_oracle import critiques_and_refinements
from agora.reflection.server import served_adapters
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model

ORACLE_FILE = "oracle.jsonl"
ORACLE_ROUNDS = ("base", "sft")  # whose first answers the oracle critiques


def oracle_path(cfg: ReflectionConfig, stage: str = "base") -> Path:
    """``<run>/oracle.jsonl`` (the base actor's answers) or ``<run>/oracle-sft.jsonl``."""
    if stage not in ORACLE_ROUNDS:
        raise ValueError(f"the oracle critiques the answers of {list(ORACLE_ROUNDS)}, "
                         f"not {stage!r}")
    return cfg.run_dir / (ORACLE_FILE if stage == "base" else f"oracle-{stage}.jsonl")


async def _oracle_rows(cfg: ReflectionConfig, url: str, tasks: list[Task], actor_model: str,
                       log: Callable[[str], None]) -> list[OracleRow]:
    limits = httpx.Limits(max_connections=cfg.eval.concurrency * 2)
    async with httpx.AsyncClient(timeout=cfg.oracle.timeout_s, limits=limits) as http:
        tokenizer = load_tokenizer(resolve_model(cfg.policy.model))
        actor = PolicyClient(url, actor_model, tokenizer, cfg.actor.sampling, http=http)
        oracle = None if cfg.oracle.scripted else ChatClient(
            cfg.oracle.base_url or f"{url}/v1", cfg.oracle.model, http,
            api_key=oracle_api_key(cfg.oracle.api_key_env))
        gate = asyncio.Semaphore(cfg.eval.concurrency)
        done = 0

        async def _model_texts(oracle: ChatClient, task: Task, initial: str,
                               proposed: str | None, reference: str | None):
            """The oracle model's critiques of ``initial`` and a refinement after each."""
            prompt = critic_messages(task.question, initial, cfg.max_shown_chars,
                                     cfg.critic_check)
            written = await oracle.sample(with_reference(prompt, reference),
                                          cfg.oracle.samples, cfg.oracle.temperature,
                                          cfg.oracle.max_tokens)
            feedbacks = [await critic_feedback(text, proposed, cfg.critic_check)
                         for text in written]
            refinements = await asyncio.gather(*(
                oracle.sample(with_reference(refine_messages(
                    task.question, initial, feedback, cfg.max_shown_chars), reference),
                    1, cfg.oracle.temperature, cfg.oracle.max_tokens)
                for feedback in feedbacks))
            return feedbacks, refinements

        async def one(task: Task, sample: int) -> OracleRow:
            nonlocal done
            reference = task.answer if cfg.oracle.show_reference else None
            async with gate:
                initial = await generate(actor, actor_messages(task.question))
                first = await check(initial, task)
                if oracle is None:
                    texts = critiques_and_refinements(
                        task, initial, first.extracted, first.correct, cfg.oracle.samples,
                        show_result=cfg.oracle.critique == "worked", check=cfg.critic_check,
                        equations=cfg.oracle.equation_program)
                    feedbacks = [feedback for feedback, _ in texts]
                    refinements = [(refined,) for _, refined in texts]
                else:
                    feedbacks, refinements = await _model_texts(oracle, task, initial,
                                                                first.extracted, reference)
            critiques = []
            for feedback, (refined,) in zip(feedbacks, refinements, strict=True):
                checked = await check(refined, task)
                critiques.append(Critique(feedback=feedback, verdict=parse_verdict(feedback),
                                          refined=refined, refined_extracted=checked.extracted,
                                          refined_correct=checked.correct))
            done += 1
            if done % 10 == 0:
                log(f"  oracle: {done}/{len(tasks) * cfg.actor_samples} answers critiqued")
            return OracleRow(task=task, sample=sample, initial=initial,
                             initial_extracted=first.extracted, initial_correct=first.correct,
                             critiques=critiques, oracle_model=oracle_name(cfg),
                             actor_model=actor_model)

        jobs = [one(task, s) for task in tasks for s in range(cfg.actor_samples)]
        return list(await asyncio.gather(*jobs))


def oracle_name(cfg: ReflectionConfig) -> str:
    """Who wrote the texts, as recorded in each row."""
    return "reference" if cfg.oracle.scripted else cfg.oracle.model


def collect_oracle_data(cfg: ReflectionConfig, url: str, log: Callable[[str], None] = print,
                        stage: str = "base") -> dict[str, float]:
    """Write ``oracle_path(cfg, stage)``: the ``stage`` actor's first answers (``base``: no
    adapter; ``sft``: the SFT actor's adapter, served for the duration), each critiqued and
    refined by the oracle; returns counts and accuracies for the report."""
    path = oracle_path(cfg, stage)
    tasks = load_tasks(cfg.task, split="train", limit=cfg.train_tasks)
    if not tasks:
        raise ValueError("task: the training split is empty")
    where = ("scripted from the ground truth" if cfg.oracle.scripted else
             f"{cfg.oracle.model} at {cfg.oracle.base_url or 'the policy server'}")
    with served_adapters(cfg, url, stage) as names:
        actor_model = names["actor"]
        log(f"oracle: {len(tasks)} problems x {cfg.actor_samples} first answers of "
            f"{actor_model} x {cfg.oracle.samples} critiques ({where})")
        rows = asyncio.run(_oracle_rows(cfg, url, tasks, actor_model, log))
    write_rows(path, rows)
    critiques = [c for row in rows for c in row.critiques]
    return {
        "actor": actor_model,
        "problems": len(tasks),
        "answers": len(rows),
        "initial_accuracy": sum(r.initial_correct for r in rows) / len(rows),
        "critiques": len(critiques),
        "refined_accuracy": sum(c.refined_correct for c in critiques) / len(critiques),
        "verdict_accuracy": sum(r.verdict_right(c) for r in rows for c in r.critiques)
        / len(critiques),
    }
