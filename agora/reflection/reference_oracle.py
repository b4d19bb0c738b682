"""A scripted oracle that writes critiques and refinements from the ground truth alone.

Why it exists: the oracle is meant to be a stronger model (``oracle.base_url``), and where none
is at hand the policy's own base model stands in. Measured on SmolLM2-135M (2026-12-01, 200
held-out 1-digit sums): untrained, its critiques end in a verdict line in 4% of turns and its
refinements ramble ("Your feedback has improved the answer..."), so an oracle made of it, even
told the reference, teaches the adapters noise. ``oracle.backend: reference`` replaces it with
texts a script can write for any task whose reference answer is known, in the exact format the
prompts ask for: a worked result and a verdict line for the critic, a worked result and an
``Answer:`` line for the actor. It is the reflection recipe's warm start from demonstrations,
as scripted bots are for the games.

Per first answer it writes up to two critiques (``oracle.samples``), each followed by the
refinement an actor that believes it would write:

1. the **true** critique: the right result and the verdict the ground truth gives; then the
   first answer kept (when right) or the right result (when wrong);
2. a **misleading** one: a wrong answer approved (its refinement keeps the wrong answer), or a
   right answer disputed with a result one off (its refinement adopts that result).

Both are checked against the ground truth like any oracle text, so the existing SFT and pair
rules apply unchanged: SFT keeps the true critiques and right refinements; the pairs prefer the
true critique over the misleading one (critic), a right refinement over a wrong answer kept,
and a right answer kept over a refinement that followed a misleading critique (actor).

The worked result is ``EXPRESSION = RESULT`` when the task carries its expression
(reasoning-gym's ``basic_arithmetic``), else ``The result is RESULT``. The script writes no
reasoning, so it suits problems a model answers in one step; for word problems use a stronger
model.

``oracle.critique: verdict`` leaves the worked result out of the critiques (the refinements
still show it). Why: an actor trained on worked critiques copies the critic's result, so the
turns after the first are exactly as right as the critic's arithmetic, which for one model
size is no better than the actor's own; told only "wrong", the actor works the answer again
itself, and a critic right more often than not then adds what the actor alone lacks.

``critic_check: program`` writes each critique as a program and its check
(``program_critic.py``): the true critique's program computes the result from the question
(``task_programs.py``: ``print(7 - 3)``, the root of ``Solve for m: 1 - m = -4``, a complex
sum), the misleading one's the same off by the claimed result's distance (``print(7 - 3 + 1)``;
a bare ``print(5)`` for a question none of those forms reads), and the verdict
is the check's, so it is exactly what the sandbox gives when the critic's program runs.
"""

from __future__ import annotations

import hashlib

from agora.data import Task
from agora.data.math_style import complex_answer
from agora.reflection.program_critic import checked_feedback, program_block
from agora.reflection.prompts import CriticCheck, parse_verdict
from agora.reflection.task_programs import (
    EquationForm,
    numeric_value,
    result_program,
    rg_expression,
)
from agora.rewards.verifiers.program import ProgramRun

MAX_SAMPLES = 2  # the true critique and a misleading one


def worked(task: Task, result: str) -> str:
    """The line that shows a result: the expression when the task has one."""
    expression = rg_expression(task)
    return f"{expression} = {result}" if expression else f"The result is {result}"


def slip(task: Task) -> str | None:
    """A plausible wrong result: the reference one off (up or down, fixed per task; a complex
    reference's real part); None when the reference is not a number."""
    value = numeric_value(task.answer)
    if value is None:
        return None
    step = 1 if hashlib.sha1(task.task_id.encode()).digest()[0] % 2 else -1
    wrong = value + step
    if isinstance(wrong, complex):
        return complex_answer(repr(wrong))
    return str(wrong.numerator) if wrong.denominator == 1 else str(wrong)


def program_critique(task: Task, claimed: str, proposed: str | None,
                     equations: EquationForm = "root") -> str:
    """A program that prints ``claimed`` (``task_programs.result_program``), and its check of
    ``proposed``."""
    return checked_feedback(program_block(result_program(task, claimed, equations)),
                            ProgramRun(status="ok", printed=claimed.strip()), proposed)


def critique(task: Task, claimed: str, proposed: str | None, approves: bool,
             show_result: bool = True) -> str:
    """A critique that approves or rejects ``proposed``, stating ``claimed`` as the result
    first when ``show_result``."""
    if approves:
        judged, verdict = f"The proposed answer {proposed} is right.", "correct"
    elif proposed is None:
        judged, verdict = "The proposed answer gives no final number.", "wrong"
    else:
        judged, verdict = f"The proposed answer {proposed} is wrong.", "wrong"
    shown = f"{worked(task, claimed)}. " if show_result else ""
    return f"{shown}{judged}\nVerdict: {verdict}"


def refinement(task: Task, claimed: str, initial: str, approves: bool) -> str:
    """What an actor that believes the critique writes: its answer kept when approved, else
    the critique's result."""
    if approves:
        return initial
    return f"{worked(task, claimed)}.\nAnswer: {claimed}"


def critiques_and_refinements(task: Task, initial: str, proposed: str | None,
                              initial_correct: bool, samples: int,
                              show_result: bool = True,
                              check: CriticCheck = "text",
                              equations: EquationForm = "root") -> list[tuple[str, str]]:
    """Up to ``samples`` (feedback, refinement) pairs for one first answer: the true critique,
    then a misleading one where the answer allows it (see the module docstring). ``proposed``
    is the answer extracted from ``initial``; ``initial_correct`` the verifier's judgement;
    ``show_result`` off writes verdict-only critiques (``oracle.critique: verdict``);
    ``check: program`` writes program critiques (``critic_check``), an equation's program
    in the form ``equations`` names (``oracle.equation_program``)."""

    def pair(claimed: str, approves: bool) -> tuple[str, str]:
        if check == "program":  # the check's verdict decides what the actor believes
            feedback = program_critique(task, claimed, proposed, equations)
            approves = parse_verdict(feedback) == "correct"
        else:
            feedback = critique(task, claimed, proposed, approves, show_result)
        return feedback, refinement(task, claimed, initial, approves)

    truth = task.answer.strip()
    out = [pair(truth, initial_correct)]
    if samples < 2:
        return out
    # Dispute a right answer with a result one off; approve a wrong one (nothing to approve
    # without a final number).
    claimed = slip(task) if initial_correct else proposed
    if claimed is not None:
        out.append(pair(claimed, not initial_correct))
    return out
