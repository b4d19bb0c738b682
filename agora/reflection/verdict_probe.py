"""Does the actor follow the critic's verdict, and can the critic tell a right answer from a
wrong one? Each asked with everything else held fixed.

Why: in an evaluation the critic's verdicts fall where the critic puts them, so the actor's
change rate after "correct" against "wrong" (``critic_effects``) mixes what the verdict says
with whether the answer it judged was right: a critic that calls most right answers wrong makes
"wrong" look ignored by an actor that keeps right answers. Here each first answer is refined
twice, once after an approving and once after a rejecting verdict-only critique in the scripted
oracle's own words (``reference_oracle.critique``), so the verdict is the only difference (a
program critic's actor is given the program critique it was trained on, ``probe_critique``).
Four cells: (first answer right or wrong) x (verdict correct or wrong), each with how many
answers the actor changed and how many it ended with right.

The critic's half: per held-out problem it judges the right result and the result one off
(``reference_oracle.slip``), both written as the scripted refinements are (``7 - 3 = 4.`` /
``Answer: 4``, the short format a trained actor answers in), sampled as in the evaluation.
Why: in an evaluation a critic that says "wrong" to most answers scores as right as often as
the actor is wrong; here its verdicts on the two answers of the same problem show whether it
checks the sum at all (it does when it says "correct" more often to the right one).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from agora.data import Task, load_tasks
from agora.reflection.clients import check, generate
from agora.reflection.config import ReflectionConfig
from agora.reflection.program_critic import critic_feedback
from agora.reflection.prompts import (
    CriticCheck,
    actor_messages,
    critic_messages,
    parse_verdict,
    refine_messages,
)
from agora.reflection.reference_oracle import critique, program_critique, refinement, slip
from agora.reflection.server import served_adapters
from agora.serving.auth import vllm_headers
from agora.serving.client import PolicyClient, load_tokenizer
from agora.serving.model_folders import resolve_model

VERDICTS = ("correct", "wrong")


@dataclass(frozen=True)
class ProbeRecord:
    """One first answer refined after one verdict."""

    first_right: bool
    verdict: str
    changed: bool  # the refinement's final answer differs from the first one's
    now_right: bool


@dataclass(frozen=True)
class CriticRecord:
    """The critic's verdict on one answer (None: it gave no verdict line)."""

    answer_right: bool
    verdict: str | None


def critic_tally(records: list[CriticRecord]) -> dict[str, dict[str, int]]:
    """Counts per answer kind (``right_answer``, ``wrong_answer``): n, and the verdicts
    ``correct``, ``wrong`` and ``none``."""
    cells = {f"{kind}_answer": {"n": 0, "correct": 0, "wrong": 0, "none": 0}
             for kind in ("right", "wrong")}
    for r in records:
        cell = cells[f"{'right' if r.answer_right else 'wrong'}_answer"]
        cell["n"] += 1
        cell[r.verdict or "none"] += 1
    return cells


def tally(records: list[ProbeRecord]) -> dict[str, dict[str, int]]:
    """Counts per cell ``<right|wrong>_answer+<verdict>``: n, changed, now_right."""
    cells = {f"{first}_answer+{verdict}": {"n": 0, "changed": 0, "now_right": 0}
             for first in ("right", "wrong") for verdict in VERDICTS}
    for r in records:
        cell = cells[f"{'right' if r.first_right else 'wrong'}_answer+{r.verdict}"]
        cell["n"] += 1
        cell["changed"] += int(r.changed)
        cell["now_right"] += int(r.now_right)
    return cells


def probe_critique(task: Task, proposed: str, right: bool, verdict: str,
                   check: CriticCheck) -> str:
    """The critique the actor is given: verdict-only in the scripted oracle's words; for a
    program critic (``critic_check: program``), the program and check it was trained on,
    printing the proposed answer (to approve it) or another result (to reject it: the
    reference when the answer is wrong, the result one off when it is right)."""
    printed = proposed if verdict == "correct" else slip(task) if right else task.answer
    if check == "text" or printed is None:  # (no number one off a reference that is none)
        return critique(task, task.answer, proposed, approves=verdict == "correct",
                        show_result=False)
    return program_critique(task, printed, proposed)


async def _probe(cfg: ReflectionConfig, url: str, names: dict[str, str],
                 tasks: list[Task]) -> tuple[list[ProbeRecord], int, list[CriticRecord]]:
    """The actor's records, how many first answers had no final answer to judge (left out: an
    approval of nothing means nothing), and the critic's records."""
    records: list[ProbeRecord] = []
    judged: list[CriticRecord] = []
    unparsed = 0
    gate = asyncio.Semaphore(cfg.eval.concurrency)
    async with httpx.AsyncClient(timeout=600, headers=vllm_headers()) as http:
        tokenizer = load_tokenizer(resolve_model(cfg.policy.model))
        actor = PolicyClient(url, names["actor"], tokenizer, cfg.actor.sampling, http=http)
        critic = PolicyClient(url, names["critic"], tokenizer, cfg.critic.sampling, http=http)

        async def judge(task: Task) -> None:
            wrong = slip(task)
            if wrong is None:  # no number to be one off from
                return
            for result, right in ((task.answer.strip(), True), (wrong, False)):
                answer = refinement(task, result, "", approves=False)
                written = await generate(critic, critic_messages(
                    task.question, answer, cfg.max_shown_chars, cfg.critic_check))
                feedback = await critic_feedback(written, result, cfg.critic_check)
                judged.append(CriticRecord(right, parse_verdict(feedback)))

        async def one(task: Task) -> None:
            nonlocal unparsed
            async with gate:
                await judge(task)
                first = await generate(actor, actor_messages(task.question))
                checked = await check(first, task)
                if checked.extracted is None:
                    unparsed += 1
                    return
                for verdict in VERDICTS:
                    feedback = probe_critique(task, checked.extracted, checked.correct, verdict,
                                              cfg.critic_check)
                    text = await generate(actor, refine_messages(task.question, first, feedback,
                                                                 cfg.max_shown_chars))
                    after = await check(text, task)
                    records.append(ProbeRecord(checked.correct, verdict,
                                               after.extracted != checked.extracted,
                                               after.correct))

        await asyncio.gather(*(one(task) for task in tasks))
    return records, unparsed, judged


def probe_verdicts(cfg: ReflectionConfig, url: str, stage: str,
                   log: Callable[[str], None] = print) -> dict[str, object]:
    """Run the probe on the held-out split with ``stage``'s actor and critic; write
    ``eval/<stage>.verdicts.json``."""
    tasks = load_tasks(cfg.task, split="test", limit=cfg.eval.tasks)
    if not tasks:
        raise ValueError("task: the test split is empty")
    started = time.monotonic()
    with served_adapters(cfg, url, stage) as names:
        log(f"probe {stage}: {len(tasks)} held-out first answers, each refined after "
            f"'correct' and after 'wrong' (actor '{names['actor']}'); the right result and "
            f"one off, each judged (critic '{names['critic']}')")
        records, unparsed, judged = asyncio.run(_probe(cfg, url, names, tasks))
    result = {"stage": stage, "problems": len(tasks), "no_final_answer": unparsed,
              "cells": tally(records), "critic": critic_tally(judged),
              "actor": names["actor"], "critic_adapter": names["critic"],
              "seconds": round(time.monotonic() - started, 1)}
    out = cfg.run_dir / "eval" / f"{stage}.verdicts.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return result
