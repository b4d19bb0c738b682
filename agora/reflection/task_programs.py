"""The program a task's question spells out: what the scripted oracle's program critic writes.

Why: under ``critic_check: program`` the critic is trained on the programs the scripted oracle
writes (``reference_oracle.py``), so those programs are what it learns to turn a question into.
A bare ``print(5)`` teaches it to state a result, which is exactly what a 135M critic cannot do
(it did not learn to check a one-digit sum from written critiques); a program that *computes*
the result from the question's own numbers teaches it to translate, and leaves the arithmetic
to the sandbox. Three forms are read from the question text, so they work for rows from any
source (a reasoning-gym task, a MATH-500-schema JSONL row):

- an equation in one variable, ``Solve for m: 1 - m = -4``, sides made of numbers, the
  variable and their products (linear by construction)::

      f = lambda m: (1 - m) - (-4)
      print(-f(0) / (f(1) - f(0)))

  the root of a linear ``f`` from two of its values (no sympy: a bare interpreter runs it
  within the check's 2 s of CPU); or, with ``equations="search"`` (``oracle.equation_program``)
  and a whole root within ±1000, the equation's own text searched for its root::

      print([m for m in range(-1000, 1001) if 1 - m == -4][0])

  one line that copies the question (``=`` read as ``==``), which a small critic may learn to
  write where it did not learn the two-line root (measured in docs/recipes/reflection.md);
- an arithmetic expression, ``Calculate 7 - 3.``, ``Add the complex numbers: (4.0 + 1.0i) +
  (3.0 + 5.0i)`` (``i`` written as Python's ``j``): ``print(7 - 3)``;
- reasoning-gym's own ``expression`` metadata, when the task carries it, before either.

No pattern written here parses general math (word problems need a model to translate them:
a stronger oracle, ``oracle.backend: model``); a question none of them reads gets ``None`` and
the oracle's program prints its result bare. Hand-written because no library turns a question
into the program that answers it; the patterns accept only what they can translate exactly.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Literal

from agora.data import Task

EquationForm = Literal["root", "search"]
SEARCH_BOUND = 1000  # the search form's roots lie in [-SEARCH_BOUND, SEARCH_BOUND]

_NUMBER = r"\d+(?:\.\d+)?"
_LETTER = r"(?<![A-Za-z])[a-z](?![A-Za-z])"  # a one-letter name, not a letter of a word
# A term of a linear side: a number, the variable, or their product (``3m``, ``3*m``, ``3 * m``).
_TERM = rf"(?:{_NUMBER}(?:\s*\*?\s*{_LETTER})?|{_LETTER})"
_SIDE = rf"-?\s*{_TERM}(?:\s*[-+]\s*{_TERM})*"
# The math must be the question's whole ending and its only math: after its start, a colon or
# a word ("Solve for m: ...", "Calculate ..."), never a tail of something longer ("2 ** 3 - 1",
# "x * x = 4", "2x + 1 = 5 and 3x = 6": ``_read``).
_AFTER = r"(?:^|:|(?<=[A-Za-z])\s)\s*"
_EQUATION = re.compile(rf"{_AFTER}({_SIDE})\s*=\s*({_SIDE})\s*\.?\s*$")
# An arithmetic expression: numbers (complex ones end in i), + - * /, parentheses; at least
# one operator between two operands.
_OPERAND = rf"\(*\s*-?\s*(?:{_NUMBER}i?|(?<![A-Za-z])i)(?![A-Za-z])\s*\)*"
_EXPRESSION = re.compile(rf"{_AFTER}({_OPERAND}(?:\s*[-+*/]\s*{_OPERAND})+)\s*[.?]?\s*$")
_IMPLICIT_PRODUCT = re.compile(rf"({_NUMBER})\s*([a-z])\b")
_IMAGINARY = re.compile(rf"({_NUMBER})i\b|\bi\b")
_BARE_UNIT = re.compile(r"(?<![\d.])i")


def _read(pattern: re.Pattern[str], question: str) -> re.Match[str] | None:
    question = question.strip()
    match = pattern.search(question)
    if match is None or re.search(r"[\d=]", question[:match.start(1)]):
        return None
    return match


def _python_side(side: str) -> str:
    return _IMPLICIT_PRODUCT.sub(r"\1 * \2", " ".join(side.split()))


def _equation_program(question: str, answer: str, form: EquationForm) -> list[str] | None:
    """``f = lambda v: (lhs) - (rhs)`` and the print of its root, or (``form="search"``, the
    reference ``answer`` a whole number within the bound) the search of the equation's text;
    None unless the question ends in a linear equation of exactly one variable."""
    match = _read(_EQUATION, question)
    if match is None:
        return None
    lhs, rhs = match.groups()
    names = set(re.findall(r"[a-z]", lhs + rhs))
    if len(names) != 1:
        return None
    (name,) = names
    lhs, rhs = _python_side(lhs), _python_side(rhs)
    if form == "search" and _whole_within_bound(answer):
        bound = SEARCH_BOUND
        return [f"[{name} for {name} in range({-bound}, {bound + 1}) if {lhs} == {rhs}][0]"]
    f = f"f = lambda {name}: ({lhs}) - ({rhs})"
    return [f, "-f(0) / (f(1) - f(0))"]


def _whole_within_bound(answer: str) -> bool:
    value = numeric_value(answer)
    return isinstance(value, Fraction) and value.denominator == 1 and abs(value) <= SEARCH_BOUND


def rg_expression(task: Task) -> str | None:
    """reasoning-gym's ``expression`` metadata (``basic_arithmetic``), if the task has it."""
    entry = task.metadata.get("rg_entry") if isinstance(task.metadata, dict) else None
    expression = entry.get("expression") if isinstance(entry, dict) else None
    return expression.strip() if isinstance(expression, str) and expression.strip() else None


def _expression(task: Task) -> str | None:
    if (expression := rg_expression(task)) is not None:
        return expression
    match = _read(_EXPRESSION, task.question)
    if match is None:
        return None
    text = " ".join(match.group(1).split())
    if text.count("(") != text.count(")"):
        return None
    return _IMAGINARY.sub(lambda m: f"{m.group(1) or 1}j", text)


def result_lines(task: Task, equations: EquationForm = "root") -> list[str] | None:
    """The statements before the result and the expression that computes it, or None where
    the question's form is not one read here (see the module docstring); ``equations`` picks
    an equation's program."""
    if "=" in task.question:
        return _equation_program(task.question, task.answer, equations)
    expression = _expression(task)
    return [expression] if expression is not None else None


def numeric_value(text: str) -> Fraction | complex | None:
    """A number written as a scorer or Python writes it: ``5``, ``-2.5``, ``3/4``, MATH's
    ``7+6i`` and ``3-i``, Python's ``(7+6j)``; None for anything else."""
    text = text.strip()
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        pass
    if re.search(r"[a-hk-zA-Z]", text):  # a word Python reads as a number ("nan", "inf")
        return None
    unit = _BARE_UNIT.sub("1j", text.replace(" ", "").replace("j", "i"))
    try:
        return complex(unit.replace("i", "j"))
    except ValueError:
        return None


def offset(claimed: str, reference: str) -> str | None:
    """``claimed`` minus ``reference`` as a Python literal (``+ 1``, ``- 2``, ``+ 0.5``, a
    complex ``+ 1j``); ``""`` when they are equal, None when either is not a number."""
    a, b = numeric_value(claimed), numeric_value(reference)
    if a is None or b is None:
        return None
    delta = a - b
    if delta == 0:
        return ""
    if isinstance(delta, complex) and delta.imag == 0:  # a slip of the real part
        delta = Fraction(str(delta.real))
    if isinstance(delta, complex) and delta.real == 0:  # of the imaginary part
        return _signed(Fraction(str(delta.imag)), "j")
    if isinstance(delta, complex):
        return f"+ {delta!r}"
    return _signed(delta)


def _signed(delta: Fraction, suffix: str = "") -> str:
    size = abs(delta)
    text = str(size.numerator) if size.denominator == 1 else str(float(size))
    return f"{'+' if delta > 0 else '-'} {text}{suffix}"


def result_program(task: Task, claimed: str, equations: EquationForm = "root") -> str:
    """A program that prints ``claimed``: the question's own computation, off by the
    difference when ``claimed`` is not the reference; ``print(claimed)`` where the question
    is not read here or the difference is not a number."""
    lines = result_lines(task, equations)
    shift = offset(claimed, task.answer)
    if lines is None or shift is None:
        bare = claimed.strip()
        return f"print({bare if isinstance(numeric_value(bare), Fraction) else repr(bare)})"
    *setup, result = lines
    return "\n".join([*setup, f"print({result} {shift})" if shift else f"print({result})"])
