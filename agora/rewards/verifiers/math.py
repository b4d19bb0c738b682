"""Math verifier: pull the final answer out of a free-text response and check it.

Reasoning-gym tasks are scored by their own dataset's scorer (the task carries what it needs);
everything else (GSM8K files, Hub datasets) goes through math-verify, so 0.5, 1/2 and
\\frac{1}{2} are the same answer.

Timeouts: math-verify's own use ``signal.alarm``, which raises ``ValueError`` outside the main
thread, and the reward service verifies in FastAPI's thread pool; so every call passes
``parsing_timeout=None`` / ``timeout_seconds=None`` (math-verify then warns once that there is
no timeout at all). A real one is still needed: sympy never returns on some short answers
(``(x+y+z)^{999}`` expands forever, ``(10^{100})!`` computes in C with the GIL held, freezing
every thread). So comparisons run in a small pool of worker processes (``_WorkerPool``); one
that overruns ``COMPARE_TIMEOUT_S`` is killed and replaced, and the answer counts as wrong.
``_too_costly`` rejects the obvious cases before they cost a worker; it is also all that guards
the in-process fallback used where processes cannot be started (a daemonic process).

A response is judged, never trusted: anything unparsable is simply wrong, never an exception.
Only a broken *task* (unknown reasoning-gym dataset, metadata its scorer cannot read) raises
``TaskError``, because that is the caller's bug, not the policy's mistake.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import re
import threading
from functools import lru_cache
from multiprocessing.connection import Connection
from typing import Any

from pydantic import BaseModel

from agora.data import rgym
from agora.data.base import TaskRef
from agora.data.formats import last_boxed

MAX_ANSWER_CHARS = 200
COMPARE_TIMEOUT_S = 5.0  # one (gold, answer) comparison in a worker
STARTUP_TIMEOUT_S = 120.0  # a worker imports sympy first; slow on a loaded machine
WORKERS = max(1, min(4, os.cpu_count() or 1))
_log = logging.getLogger(__name__)

# Possessive quantifiers keep these linear on adversarial text (runs of spaces, "answer is"
# repeated); responses can be 32k characters long.
_MARKERS = re.compile(r"(?:answer\s*+(?:is|:|=)|####)[\s:]*+(?P<rest>[^\n]*)", re.IGNORECASE)
# A minus sign only when it is not a binary minus ("5-6" has the numbers 5 and 6).
_NUMBER = re.compile(r"(?:(?<![\w)\]}])-)?(?<![\d.])\d+(?:,\d{3})*(?:\.\d+)?(?:\s*/\s*\d+)?")
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
# "42 apples", "18 dollars in total", "42 because 6 * 7 = 42": the number is the answer.
_NUMBER_WITH_WORDS = re.compile(
    r"^(-?\d+(?:,\d{3})*(?:\.\d+)?)\s+"
    r"(?:[A-Za-z][A-Za-z .,'-]*|(?:because|since|as|so|which|from|after|for)\b.*)$",
    re.DOTALL,
)
_WORDS = re.compile(r"[^\W\d_]{2,}(?:[\s'-]+[^\W\d_]+)*")
_COMBINATORIAL = re.compile(r"!|binom|choose|gamma|factorial", re.IGNORECASE)
_EXPONENT = re.compile(r"(?:\^|\*\*)\s*[{(]?\s*-?(\d+)")


class MathVerdict(BaseModel):
    correct: bool
    extracted: str | None = None
    method: str = ""
    score: float = 0.0


def extract_final_answer(text: str) -> str | None:
    """The final answer in a response: the last ``\\boxed{...}``; else what follows the last
    "answer is" / "Answer:" / "####"; else the last number. None if there is none."""
    if not isinstance(text, str):
        return None
    boxed = last_boxed(text)
    if boxed:
        return normalize_answer(boxed) or None
    markers = [m for m in _MARKERS.finditer(text) if m.group("rest").strip()]
    if markers:
        rest = markers[-1].group("rest")
        end = _SENTENCE_END.search(rest)
        answer = normalize_answer(rest[: end.start()] if end else rest)
        if answer:
            return answer
    numbers = _NUMBER.findall(text)
    return normalize_answer(numbers[-1]) if numbers else None


def normalize_answer(answer: str) -> str:
    """Strip what wraps an answer but is not part of it: markdown bold, $...$, a currency sign,
    a trailing period or "!", words after a plain number ("18 dollars" -> "18")."""
    text = answer.strip().replace("\u2212", "-")  # the Unicode minus sign
    previous = None
    while text != previous:
        previous = text
        text = text.strip().strip("*").strip()
        if len(text) > 1 and text.startswith("$") and text.endswith("$"):
            text = text.strip("$")
        text = re.sub(r"^(?:\\\$|\$)\s*(?=-?\d)", "", text)
        if text.startswith(("\\(", "\\[")):
            text = text[2:]
        if text.endswith(("\\)", "\\]")):
            text = text[:-2]
        # "The answer is 42!" is excitement far more often than a factorial.
        text = text.rstrip(".!").rstrip()
    units = _NUMBER_WITH_WORDS.match(text)
    if units:
        text = units.group(1)
    return text


def verify_math(response: str, task: TaskRef) -> MathVerdict:
    """Is ``response``'s final answer the task's answer?

    Raises ``TaskError`` only for a task its reasoning-gym scorer cannot handle.
    """
    extracted = extract_final_answer(response)
    if rgym.is_reasoning_gym(task):
        rgym.check_gold(task)
        method = task.source
        if extracted is None:
            return MathVerdict(correct=False, method=method)
        try:
            score = rgym.score(_plain_number(extracted), task)
        except Exception:  # a scorer choking on odd text means the text is wrong
            _log.debug("scorer failed on %r", extracted, exc_info=True)
            score = 0.0
        return MathVerdict(correct=score >= 1.0, extracted=extracted, method=method, score=score)
    if extracted is None:
        return MathVerdict(correct=False, method="math_verify")
    correct, method = _equivalent(task.answer, extracted)
    return MathVerdict(correct=correct, extracted=extracted, method=method,
                       score=float(correct))


def _plain_number(answer: str) -> str:
    """Reasoning-gym's default scorer compares strings exactly, so give it "1234" for
    "1,234" (thousands separators are formatting, not a different answer)."""
    if re.fullmatch(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?", answer):
        return answer.replace(",", "")
    return answer


def _equivalent(gold: str, answer: str) -> tuple[bool, str]:
    gold_text = normalize_answer(gold)
    # Words are not maths: sympy reads "Paris" as the product P*a*r*i*s, equal to "sirap".
    # The gold answer arrives over HTTP too, so it gets the same cost check as responses.
    if _WORDS.fullmatch(gold_text) or _too_costly(gold_text):
        return gold_text.casefold() == answer.casefold(), "exact"
    if _too_costly(answer):
        return False, "math_verify"
    return _POOL.compare(gold_text, answer)


def _compare(gold: str, answer: str) -> tuple[bool, str]:
    """math-verify's verdict on two extracted answers (in a worker, or in-process)."""
    from math_verify import verify

    gold_parsed = _parse(gold)
    if not _has_expression(gold_parsed):
        # A gold answer math-verify cannot read: compare the text.
        return gold.casefold() == answer.casefold(), "exact"
    parsed = _parse(answer)
    if not parsed:
        return False, "math_verify"
    try:
        same = verify(gold_parsed, parsed, timeout_seconds=None)
    except Exception:  # math-verify swallows most errors itself; be sure nothing escapes
        same = False
    return bool(same), "math_verify"


@lru_cache(maxsize=4096)
def _parse(answer: str) -> list[Any]:
    """math-verify's parse of an extracted answer, LaTeX first.

    Wrapping in ``\\boxed{}`` makes math-verify read bare LaTeX (``\\frac12``, ``2^{10}``
    parse to nothing or to 2 without it); the plain parse is the fallback for text it only
    reads outside LaTeX ("**42**"). Parsed sympy objects are immutable, so the cache is safe
    to share between threads.
    """
    from math_verify import parse

    for candidate in (f"\\boxed{{{answer}}}", answer):
        parsed = parse(candidate, parsing_timeout=None)
        if _has_expression(parsed):
            return parsed
    return []


def _has_expression(parsed: list[Any]) -> bool:
    return any(not isinstance(item, str) for item in parsed)


def _too_costly(answer: str) -> bool:
    """Answers that could make sympy compute for minutes with the GIL held (no timeout is
    possible in threads): long text, stacked powers, huge exponents, factorials or binomials
    of anything but small literals (``(10^{100})!`` never returns)."""
    if len(answer) > MAX_ANSWER_CHARS:
        return True
    if answer.count("^") + answer.count("**") > 1:
        return True
    if any(len(m.group(1)) > 3 for m in _EXPONENT.finditer(answer)):
        return True
    if _COMBINATORIAL.search(answer):
        small_literals = all(len(digits) <= 3 for digits in re.findall(r"\d+", answer))
        return not small_literals or bool(re.search(r"[\^*/]|\\cdot|\\times", answer))
    return False


def _serve(conn: Connection) -> None:
    """A worker process: answer comparison requests until the parent goes away."""
    import math_verify  # noqa: F401 - pay the import before saying "ready"

    # Its "timeout is disabled, handle it yourself" warning: the parent's kill is that handling.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    conn.send("ready")
    while True:
        try:
            gold, answer = conn.recv()
        except (EOFError, OSError):
            return
        conn.send(_compare(gold, answer))


class _Worker:
    def __init__(self) -> None:
        # spawn, not fork: forking a process that runs threads (uvicorn) can deadlock the child.
        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_serve, args=(child,), name="math-verify", daemon=True)
        self._proc.start()
        child.close()
        self._ready = False

    def compare(self, gold: str, answer: str) -> tuple[bool, str] | None:
        """The verdict, or None if the worker overran its time or died."""
        try:
            if not self._ready:
                if not self._conn.poll(STARTUP_TIMEOUT_S):
                    return None
                self._ready = self._conn.recv() == "ready"
            self._conn.send((gold, answer))
            if not self._conn.poll(COMPARE_TIMEOUT_S):
                return None
            return self._conn.recv()
        except (EOFError, OSError):
            return None

    def stop(self) -> None:
        self._proc.kill()
        self._proc.join(10)
        self._conn.close()


class _WorkerPool:
    """``WORKERS`` processes, started on first use; a thread borrows one per comparison."""

    def __init__(self) -> None:
        self._idle: queue.Queue[_Worker | None] = queue.Queue()
        self._lock = threading.Lock()
        self._started = False
        self._in_process = False

    def compare(self, gold: str, answer: str) -> tuple[bool, str]:
        if self._in_process:
            return _compare(gold, answer)
        with self._lock:
            if not self._started:
                for _ in range(WORKERS):
                    self._idle.put(None)  # a slot; the worker is started by its first user
                self._started = True
        worker = self._idle.get()
        try:
            if worker is None:
                worker = _Worker()
        except (AssertionError, OSError) as err:  # e.g. inside a daemonic (Celery) process
            _log.warning("math-verify runs in-process, without a timeout: %s", err)
            self._in_process = True
            self._idle.put(None)
            return _compare(gold, answer)
        verdict = worker.compare(gold, answer)
        if verdict is None:
            _log.warning("math-verify overran %.0f s on %r; worker replaced",
                         COMPARE_TIMEOUT_S, answer[:80])
            worker.stop()
            worker = None
            verdict = (False, "math_verify:timeout")
        self._idle.put(worker)
        return verdict


_POOL = _WorkerPool()
