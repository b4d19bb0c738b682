"""The programs the scripted oracle's program critic writes (agora/reflection/task_programs.py):
read from the question's text, exact where they read it, and nothing where they cannot.
Running them is the sandbox's job: tests/integration/test_reflection_program_critic.py."""

from __future__ import annotations

import json
from fractions import Fraction
from pathlib import Path

from agora.data import Task
from agora.data.math_style import complex_answer
from agora.reflection.reference_oracle import slip
from agora.reflection.task_programs import numeric_value, offset, result_lines, result_program
from agora.rewards.verifiers.program import plain_printed


def task(question: str, answer: str, **metadata: object) -> Task:
    return Task(task_id=question, kind="math", question=question, answer=answer,
                metadata=metadata)


def test_equations_become_the_root_of_their_difference() -> None:
    for question, f in (
            ("Solve for m: 1 - m = -4", "f = lambda m: (1 - m) - (-4)"),
            ("Find the value of e in the equation: e + 5 = 12", "f = lambda e: (e + 5) - (12)"),
            ("Determine the value of i that satisfies: 9 - i = 3",
             "f = lambda i: (9 - i) - (3)"),
            ("Solve for x: 3x + 2 = 2 * x - 4.", "f = lambda x: (3 * x + 2) - (2 * x - 4)")):
        assert result_lines(task(question, "0")) == [f, "-f(0) / (f(1) - f(0))"]
    # not linear in one variable, or no equation at the end: nothing to translate
    for question in ("Solve for x: x * x = 4", "Solve: x + y = 3", "If x = 2, is it even?",
                     "Find x: 2x + 1 = 5 and 3x = 6"):
        assert result_lines(task(question, "2")) is None, question


def test_expressions_are_read_from_the_question_or_its_metadata() -> None:
    assert result_lines(task("Calculate 0 - 4.", "-4")) == ["0 - 4"]
    assert result_lines(task("What is (8 / 2) * 3?", "12")) == ["(8 / 2) * 3"]
    assert result_lines(task("Add the complex numbers: (4.0 + 1.0i) + (3.0 + i)", "7+2i")) \
        == ["(4.0 + 1.0j) + (3.0 + 1j)"]
    # reasoning-gym's own expression wins over the text
    assert result_lines(task("Calculate seven minus three.", "4",
                             rg_entry={"expression": "7 - 3"})) == ["7 - 3"]
    for word_problem in ("Tom has 3 apples and buys 4 more. How many does he have?",
                         "Calculate 7 - 3 in base 5.", "Is 4 - 1 prime?", "What is 2 ** 3 - 1?",
                         "Calculate (7 - 3."):
        assert result_lines(task(word_problem, "7")) is None, word_problem


def test_a_claimed_result_is_the_computation_off_by_its_distance() -> None:
    eq = task("Solve for m: 1 - m = -4", "5")
    assert result_program(eq, "5").endswith("\nprint(-f(0) / (f(1) - f(0)))")
    assert result_program(eq, "4").endswith("\nprint(-f(0) / (f(1) - f(0)) - 1)")
    assert result_program(task("Calculate 9 / 2.", "4.5"), "6") == "print(9 / 2 + 1.5)"
    z = task("Add the complex numbers: (4.0 + 1.0i) + (3.0 + 5.0i)", "7+6i")
    assert result_program(z, "8+6i") == "print((4.0 + 1.0j) + (3.0 + 5.0j) + 1)"
    assert result_program(z, "7+5i") == "print((4.0 + 1.0j) + (3.0 + 5.0j) - 1j)"
    assert result_program(z, "8+7i") == "print((4.0 + 1.0j) + (3.0 + 5.0j) + (1+1j))"
    # nothing to compute it from, or a claim that is no number: the claim printed bare
    assert result_program(task("How many apples?", "12"), "11") == "print(11)"
    assert result_program(z, "seven") == "print('seven')"
    assert result_program(task("How many?", "7+6i"), "7+6i") == "print('7+6i')"
    assert offset("5", "five") is None and offset("4", "4.0") == ""


def test_numbers_as_scorers_and_python_write_them() -> None:
    assert numeric_value("7+6i") == numeric_value("(7+6j)") == complex(7, 6)
    assert numeric_value("3-i") == complex(3, -1) and numeric_value("-4i") == complex(0, -4)
    assert numeric_value("3/4") == Fraction(3, 4) and numeric_value("x") is None
    assert numeric_value("nan") is None and numeric_value("infj") is None
    for printed, plain in (("(7+6j)", "7+6i"), ("-4j", "-4i"), ("(1.5-1j)", "1.5-i"),
                           ("(7+0j)", "7"), ("37.0", "37"), ("-0.0", "0"), ("2.5", "2.5")):
        assert plain_printed(printed) == plain
    assert complex_answer("2.0 + 7.0i") == "2+7i" and complex_answer("-2.00i") == "-2i"
    # the misleading result for a complex reference: its real part one off
    wrong = slip(task("Add the complex numbers: (4.0 + 1.0i) + (3.0 + 5.0i)", "7+6i"))
    assert wrong in ("8+6i", "6+6i")


def test_every_question_of_the_shipped_math_style_split_is_read() -> None:
    """configs/reflection_math_style.yaml's data: no question falls back to a bare print."""
    path = Path(__file__).resolve().parents[2] / "data" / "math_style.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    unread = [r["problem"] for r in rows if result_lines(task(r["problem"], r["answer"])) is None]
    assert len(rows) == 450 and unread == []


def test_search_form_copies_the_equation_and_keeps_whole_roots() -> None:
    """``oracle.equation_program: search``: one line, the question's equation read as
    ``==``; a root that is not whole within the bound keeps the two-line root."""
    question = "Solve for x: 3x + 2 = 2 * x - 4."
    search = "[x for x in range(-1000, 1001) if 3 * x + 2 == 2 * x - 4][0]"
    assert result_lines(task(question, "-6"), "search") == [search]
    assert result_program(task(question, "-6"), "-5", "search") == f"print({search} + 1)"
    for answer in ("2.5", "5000", "seven"):
        assert result_lines(task(question, answer), "search")[-1] == "-f(0) / (f(1) - f(0))"
    # the form concerns equations only
    assert result_lines(task("Calculate 0 - 4.", "-4"), "search") == ["0 - 4"]
