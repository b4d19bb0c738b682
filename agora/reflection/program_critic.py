"""A critic that checks with a program: it writes a Python block that prints the result, the
sandbox runs it, and the verdict is the printed result compared with the proposed answer.

Why: measured on SmolLM2-135M (2026-12-05, ``agora reflect probe``), no critic trained on
written critiques told a right one-digit sum from the sum one off: each said "correct" (or
"wrong") to both alike, whatever its data, so DPO's pairs taught the actor to follow a coin.
A model that cannot add reliably can still write ``print(7 - 3)`` (PAL, program-of-thought;
CRITIC's tool-interactive critiquing), and the sandbox adds exactly. ``critic_check: program``
makes that the critic's job; everything downstream (SFT, pairs, the actor's refinement turn)
reads the same feedback text, which now holds the check's outcome:

    ```python
    print(7 - 3)
    ```
    Output: 4
    The proposed answer 5 is wrong.
    Verdict: wrong

What the critic model writes (and is trained on) ends with its program; the lines after it are
the check's, appended here. When no program printed a result (no block, a crash, a timeout,
nothing printed), the check says so and gives no verdict line of its own: the critic's own
written verdict, if any, is then the feedback's verdict.

The program is model-written code: it runs only in the sandbox (``run_untrusted``: the reward
service's when one is set, else a local isolated run), never in this process.
"""

from __future__ import annotations

import asyncio

from agora.data.base import TaskRef
from agora.reflection.prompts import CriticCheck
from agora.reflection.task_programs import numeric_value
from agora.rewards.verifiers.math import verify_math
from agora.rewards.verifiers.program import (
    PROGRAM_BLOCK,
    ProgramRun,
    last_program,
    plain_printed,
    run_program,
)
from agora.sandbox.runner import SandboxLimits, SandboxStatus


class CheckUnavailable(RuntimeError):
    """The sandbox could not run the critic's program (not isolated here): no verdict on the
    program, so the run stops rather than record a check that never ran."""


_LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=5.0)  # a check prints one number


def program_block(source: str) -> str:
    """``source`` as the critic writes a program: a fenced Python block."""
    return f"```python\n{source}\n```"


def written_part(text: str) -> str:
    """What the critic wrote, up to the end of its last program (all of it when it wrote
    none): the check's lines are not the critic's, and text after the program is dropped so
    the check's verdict is the last word."""
    ends = [m.end() for m in PROGRAM_BLOCK.finditer(text or "")]
    return (text[:ends[-1]] if ends else text or "").strip()


def same_answer(printed: str, proposed: str) -> bool:
    """Do the program's printed result and the proposed answer name the same number?
    Numbers compare exactly (``4.0`` is ``4``; Python's ``(7+6j)`` is ``7+6i``); anything
    else goes to math-verify."""
    printed = plain_printed(printed)
    ours, theirs = numeric_value(printed), numeric_value(proposed)
    if ours is not None and theirs is not None:
        return ours == theirs
    return verify_math(f"Answer: {proposed}", TaskRef(answer=printed)).correct


def checked_feedback(written: str, run: ProgramRun | None, proposed: str | None) -> str:
    """The feedback the actor is shown: the critic's text (``written_part``) and the check's
    lines. ``run`` is its program's run (None: it wrote none); ``proposed`` the final answer
    extracted from the answer judged (None: it gave none)."""
    head = written_part(written)
    if run is None:
        return f"{head}\nNo program to check the answer with.".strip()
    if not run.answered:
        return f"{head}\nThe check printed no result ({run.status}: {run.reason[:120]})."
    if proposed is None:
        judged, verdict = "The proposed answer gives no final number.", "wrong"
    elif same_answer(run.printed, proposed):
        judged, verdict = f"The proposed answer {proposed} is right.", "correct"
    else:
        judged, verdict = f"The proposed answer {proposed} is wrong.", "wrong"
    return f"{head}\nOutput: {plain_printed(run.printed)}\n{judged}\nVerdict: {verdict}"


def check_with_program(written: str, proposed: str | None) -> str:
    """Run the critic's last program in the sandbox and return ``checked_feedback``. Blocking
    (a sandboxed process): call it off the event loop."""
    program = last_program(written_part(written))
    run = run_program(program, _LIMITS) if program is not None else None
    if run is not None and run.status == SandboxStatus.SANDBOX_ERROR:
        raise CheckUnavailable(f"critic_check: program: the sandbox cannot run the critic's "
                               f"program here: {run.reason}")
    return checked_feedback(written, run, proposed)


async def critic_feedback(text: str, proposed: str | None, check: CriticCheck) -> str:
    """The feedback a critic's ``text`` gives the actor: the text itself, or under ``check:
    program`` the critic's program and its check (run off the event loop)."""
    if check == "text":
        return text
    return await asyncio.to_thread(check_with_program, text, proposed)


def critic_completion(feedback: str, check: CriticCheck) -> str:
    """The part of ``feedback`` the critic model wrote, which is what it is trained on."""
    return written_part(feedback) if check == "program" else feedback
