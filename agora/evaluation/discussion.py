"""Discussions (math, NLI): pass@k and majority vote over k sampled discussions per task.

For every held-out task (the config's test split) the discussion runs ``k`` times with the
agents' own sampling settings. Each written answer is checked in-process by the reward
service's own verifiers (math-verify / reasoning-gym's scorer, the NLI label parser); an answer
given as a program (``environment.answer: program | either``) is sent to the evaluation's reward
service, whose sandbox runs it as in training (this process never runs model-written code). Its
*final answer* (the extracted number or expression, the program's printed line, or the label) is
kept for the vote. Per round r (turn 1 =
everyone answering alone, last turn = after reading the others) and seat s, with c of the k
answers right:

- ``pass@1`` = mean over tasks and seats of c / k;
- ``pass@k`` = mean of the unbiased estimator 1 - C(k-c, k) / C(k, k) (Chen et al. 2021) with
  n = k samples, i.e. the share of (task, seat) with at least one right answer among the k;
- ``maj@k`` = share of (task, seat) whose most common final answer among the k is right
  (answers without a final answer abstain; a tie goes to the answer given first).

Intervals are 95% Wilson intervals: pass@k and maj@k over the tasks x seats outcomes; pass@1
over all tasks x seats x k answers (the k answers of a task are not independent, so this one is
narrower than it should be).

``sample_discussions`` is the one discussion loop of the evaluation: ``agora eval`` samples k
per task, ``agora compare`` one per task for its accuracy after each round
(``compare.DiscussionResult``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from dataclasses import dataclass

from agora.data import Task
from agora.envs.discussion import Discussion, DiscussionTask
from agora.evaluation.context import EvalContext
from agora.evaluation.stats import majority_vote, paired_mean_difference, pass_at_k, rate
from agora.rewards.verifiers.math import MathVerdict, extract_final_answer, verify_math
from agora.rewards.verifiers.nli import verify_nli
from agora.rewards.verifiers.program import AnswerMode, last_program
from agora.rollout.scoring import RewardUnavailable, post_json


@dataclass(frozen=True)
class Answer:
    correct: bool
    final: Hashable | None  # what the vote counts: the extracted answer or label

    @property
    def parsable(self) -> bool:
        """The verifier found an answer (a number or expression, or a label) in the text."""
        return self.final is not None


def check_answer(text: str, task: Task, memo: dict | None = None,
                 answer_mode: AnswerMode = "text", reward_url: str | None = None) -> Answer:
    """The verifier's verdict and the final answer. A math verdict depends on the extracted
    answer alone (``verify_math`` extracts first, then compares), so ``memo`` keeps it per
    (task, extracted answer): k samples repeat answers often, and each math-verify call costs
    ~0.15 s of a worker process on this CPU. With program answers (``environment.answer``)
    the program goes to the reward service at ``reward_url`` and runs in its sandbox, as in
    training; its printed line is the final answer, and the verdict is kept per (task,
    program)."""
    if task.kind == "nli":
        verdict = verify_nli(text, task)
        return Answer(verdict.correct, verdict.predicted)
    program = last_program(text) if answer_mode != "text" else None
    key = (task.task_id, "program", program) if program else (task.task_id,
                                                               extract_final_answer(text))
    if memo is not None and key in memo:
        return memo[key]
    if program is not None:
        answer = program_answer(text, task, answer_mode, reward_url)
    else:
        math = (MathVerdict(correct=False, method="program") if answer_mode == "program"
                else verify_math(text, task))
        answer = Answer(math.correct, math.extracted)
    if memo is not None:
        memo[key] = answer
    return answer


def program_answer(text: str, task: Task, answer_mode: AnswerMode,
                   reward_url: str | None) -> Answer:
    """The reward service's verdict on an answer that holds a program (run in its sandbox)."""
    if reward_url is None:
        raise ValueError("a program answer runs only in a reward service's sandbox, and this "
                         "evaluation has none (environment.answer: " + answer_mode + ")")
    body = {"kind": "math", "task": task.ref().model_dump(mode="json"), "responses": [text],
            "answer": answer_mode}
    result = post_json(reward_url.rstrip("/") + "/v1/verify", body, RewardUnavailable,
                       "reward service", timeout_s=120.0)["results"][0]
    final = result["printed"] if result["program"] is not None else result["extracted"]
    return Answer(bool(result["correct"]), final)


async def sample_discussions(ctx: EvalContext, served: dict[str, str], tasks: list[Task],
                             k: int, label: str = "discussions"
                             ) -> list[list[list[list[Answer]]]]:
    """answers[task][sample][round][seat] for ``k`` discussions of every task, the config's
    seats asking ``served[agent]``; progress shows as the phase ``label``."""
    seats = list(ctx.cfg.environment.seats)
    rounds = ctx.cfg.environment.rounds
    answer_mode = ctx.cfg.environment.answer
    reward_url = ctx.cfg.service_url("reward") if answer_mode != "text" else None
    memo: dict = {}
    advance = ctx.start_phase(f"{label}: {len(tasks)} tasks x {k}", len(tasks) * k)

    async def one(t: int, task: Task, sample: int) -> list[list[Answer]]:
        env = Discussion(DiscussionTask(task.task_id, task.kind, task.question),
                         num_agents=len(seats), rounds=rounds, answer=answer_mode)
        players = [ctx.llm_player(agent, served[agent]) for agent in seats]
        record = await ctx.play(env, players, f"eval-{t}-{sample}", t * 1000 + sample)
        grid: list[list[Answer]] = [[] for _ in range(rounds)]
        for index, turn in enumerate(record.turns):
            grid[index // len(seats)].append(await asyncio.to_thread(
                check_answer, turn.text, task, memo, answer_mode, reward_url))
        advance()
        return grid

    flat = await asyncio.gather(*(one(t, task, s) for t, task in enumerate(tasks)
                                  for s in range(k)))
    return [list(flat[t * k:(t + 1) * k]) for t in range(len(tasks))]


def round_metrics(answers: list[list[list[list[Answer]]]], round_index: int, k: int
                  ) -> dict[str, object]:
    """pass@1, pass@k, maj@k (and pass@j for j = 1..k) of one round, over tasks and seats."""
    outcomes = []  # per (task, seat): (c, majority right)
    for samples in answers:
        seats = len(samples[0][round_index])
        for seat in range(seats):
            given = [s[round_index][seat] for s in samples]
            c = sum(a.correct for a in given)
            vote = majority_vote([a.final for a in given])
            right = vote is not None and any(a.correct for a in given if a.final == vote)
            outcomes.append((c, right))
    n = len(outcomes)
    correct = sum(c for c, _ in outcomes)
    return {
        "pass@1": rate(correct, n * k),
        "pass@k": rate(sum(pass_at_k(k, c, k) for c, _ in outcomes), n),
        "maj@k": rate(sum(right for _, right in outcomes), n),
        "pass@j": [sum(pass_at_k(k, c, j) for c, _ in outcomes) / n if n else 0.0
                   for j in range(1, k + 1)],
    }


def task_accuracy(answers: list[list[list[list[Answer]]]], round_index: int) -> list[float]:
    """Per task, the share of right answers in one round over its k discussions and all seats:
    the unit a paired comparison varies over (answers to one task are not independent)."""
    out = []
    for samples in answers:
        given = [a for s in samples for a in s[round_index]]
        out.append(sum(a.correct for a in given) / len(given) if given else 0.0)
    return out


def paired_rounds(evaluated: list[list[list[list[Answer]]]],
                  baseline: list[list[list[list[Answer]]]]) -> dict[str, object]:
    """Turn-1 and last-turn accuracy, evaluated minus baseline, paired by task (both policies
    discussed the same tasks), with an interval over tasks: a gain shows here before the two
    pass@1 intervals, which treat every answer as independent, stop overlapping."""
    rounds = len(evaluated[0][0]) if evaluated and evaluated[0] else 0
    if not rounds:
        return {}
    return {turn: paired_mean_difference(task_accuracy(evaluated, index),
                                         task_accuracy(baseline, index))
            for turn, index in (("turn1", 0), ("last", rounds - 1))}


def discussion_report(answers: list[list[list[list[Answer]]]], k: int) -> dict[str, object]:
    rounds = len(answers[0][0]) if answers else 0
    all_answers = [a for task in answers for s in task for r in s for a in r]
    return {
        "tasks": len(answers), "k": k, "rounds": rounds,
        "turn1": round_metrics(answers, 0, k) if rounds else {},
        "last": round_metrics(answers, rounds - 1, k) if rounds else {},
        "final_answer_rate": (sum(a.final is not None for a in all_answers) / len(all_answers)
                              if all_answers else 0.0),
    }
