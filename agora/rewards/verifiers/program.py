"""Program-aided math answers (PAL, program-of-thought): an agent may answer with a Python block
whose printed result is its answer; the block runs in the sandbox, then the printed answer is
verified like a written one.

Why: MAPoRL's GSM8K recipe validates answers by executing code, and a small model that cannot
multiply reliably can still write ``print(12 * 37)``. The answer modes:

- ``text``: the final answer written in the response (``Answer: 42``, ``\\boxed{42}``); a
  program in it is just text.
- ``program``: the response must hold a fenced Python block (```` ```python ... ``` ````); the
  last one runs, and the last non-empty line it prints is the answer. No block, a crash, a
  timeout or no output: wrong.
- ``either``: the program's answer when the response holds a block, else the written answer.

The program is model-written code: it runs only here, in the reward service's sandbox
(``agora.sandbox.runner``: no network, CPU/memory/output limits), never in the rollout worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from agora.data.base import TaskRef
from agora.data.math_style import complex_answer
from agora.rewards.verifiers.math import MathVerdict, verify_math
from agora.sandbox.remote import run_untrusted
from agora.sandbox.runner import SandboxLimits

AnswerMode = Literal["text", "program", "either"]
# A fenced block tagged python / py / python3 (or untagged): what chat models write for code.
PROGRAM_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_WHOLE_FLOAT = re.compile(r"^(-?\d+)\.0+$")
_PYTHON_COMPLEX = re.compile(r"^\(?[-+]?[\d.]*[-+]?[\d.]+j\)?$")  # (7+6j), -4j, (1.5-2j)
MAX_PRINTED_CHARS = 200  # the answer line; longer is not an answer


@dataclass(frozen=True)
class ProgramRun:
    """What running an answer's program gave: ``status`` is the sandbox's ("ok", "error",
    "timeout", ...), or "no_output" for a clean run that printed nothing."""

    status: str
    printed: str | None  # the last non-empty line of stdout
    reason: str = ""

    @property
    def answered(self) -> bool:
        return self.status == "ok" and self.printed is not None


def last_program(response: str) -> str | None:
    """The last fenced Python block of ``response``, or None (an unclosed block is no
    program: the token limit cut it)."""
    blocks = PROGRAM_BLOCK.findall(response)
    return blocks[-1] if blocks and blocks[-1].strip() else None


def plain_printed(printed: str) -> str:
    """A printed line as a written answer: Python's "37.0" for 444 / 12 is the integer 37 a
    scorer comparing strings expects (and "-0.0" is 0); its complex "(7+6j)" is MATH's
    "7+6i"."""
    printed = printed.strip()
    if _PYTHON_COMPLEX.match(printed):
        return complex_answer(printed)
    plain = _WHOLE_FLOAT.sub(r"\1", printed)
    return "0" if plain == "-0" else plain


def run_program(program: str, limits: SandboxLimits) -> ProgramRun:
    result = run_untrusted(program, limits=limits)
    if not result.ok:
        return ProgramRun(status=str(result.status), printed=None, reason=result.reason)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if not lines:
        return ProgramRun(status="no_output", printed=None, reason="the program printed nothing")
    return ProgramRun(status="ok", printed=lines[-1][:MAX_PRINTED_CHARS])


def verify_answer(response: str, task: TaskRef, mode: AnswerMode,
                  limits: SandboxLimits) -> tuple[MathVerdict, ProgramRun | None]:
    """The verdict on ``response`` in answer mode ``mode``, and its program's run (None when no
    program ran)."""
    program = last_program(response) if mode != "text" else None
    if program is None:
        if mode == "program":
            return MathVerdict(correct=False, method="program"), None
        return verify_math(response, task), None
    run = run_program(program, limits)
    if not run.answered:
        return MathVerdict(correct=False, method="program"), run
    # The printed line is read as a written final answer (numbers, fractions, LaTeX alike).
    printed = plain_printed(run.printed)
    verdict = verify_math(f"Answer: {printed}", task)
    return verdict.model_copy(update={"method": f"program+{verdict.method}"}), run
