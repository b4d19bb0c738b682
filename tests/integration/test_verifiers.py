"""Math and NLI verifiers on real reasoning-gym scorers and real math-verify (in its worker
processes), including from threads (where math-verify's default signal-based timeouts fail)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from agora.data import Task, TaskError, TaskRef, load_tasks, rgym
from agora.rewards.verifiers import math as math_verifier
from agora.rewards.verifiers.math import extract_final_answer, verify_math
from agora.rewards.verifiers.nli import parse_nli, verify_nli

# --- answer extraction ----------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("\\boxed{42}", "42"),
    ("first \\boxed{\\frac{1}{2}}, then finally \\boxed{7}", "7"),
    ("nested \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),
    ("cut off: \\boxed{12} and then \\boxed{1", "12"),
    ("The answer is 42.", "42"),
    ("The final answer is 3.5. I am sure.", "3.5"),
    ("so the answer is: **42**", "42"),
    ("Answer: $18", "18"),
    ("Answer:\n\n17", "17"),
    ("answer is 42 apples.", "42"),
    ("The answer is 18 dollars in total.", "18"),
    ("The answer is 42 because 6 * 7 = 42.", "42"),
    ("The answer is 42!", "42"),
    ("The answer is $\\frac{3}{4}$.", "\\frac{3}{4}"),
    ("work...\n#### 1,234", "1,234"),
    ("6 * 7 = 42", "42"),
    ("x = -6", "-6"),
    ("between 5-6", "6"),
    ("The answer is \u22123", "-3"),
    ("no digits here", None),
    ("", None),
    ("\\boxed{}", None),
])
def test_extract_final_answer(text, expected):
    assert extract_final_answer(text) == expected


# --- math-verify path (files, Hub datasets) -------------------------------------------------

HALF = TaskRef(answer="0.5", source="jsonl:gsm8k_sample.jsonl")


@pytest.mark.parametrize("response", [
    "\\boxed{0.5}", "\\boxed{\\frac{1}{2}}", "\\boxed{\\frac12}", "The answer is 1/2.",
    "#### 0.5", "Answer: 0.50", "so each gets $\\dfrac{1}{2}$ liters. The answer is $0.5$.",
    "2 / 4 = 1/2",
])
def test_equivalent_forms_of_one_half_are_right(response):
    verdict = verify_math(response, HALF)
    assert verdict.correct, verdict
    assert verdict.method == "math_verify"
    assert verdict.score == 1.0


@pytest.mark.parametrize(("gold", "response"), [
    ("42", "\\boxed{42}"), ("42", "The answer is 42."), ("42", "#### 42"), ("42", "**42**"),
    ("42", "The answer is 42.0"), ("1393", "The library has 1,393 books."),
    ("1/2", "0.5"), ("35.25", "He has $35.25 left."), ("-2", "\\boxed{-2}"),
    ("7", "\\boxed{\\sqrt{49}}"), ("1024", "\\boxed{2^{10}}"),
])
def test_right_answers_in_several_formats(gold, response):
    assert verify_math(response, TaskRef(answer=gold)).correct


@pytest.mark.parametrize(("gold", "response"), [
    ("42", "\\boxed{43}"), ("0.5", "0.51"), ("1/3", "0.333"), ("-2", "2"),
    ("42", "The answer is 42, no wait, \\boxed{24}"), ("7", "\\boxed{7x}"),
])
def test_wrong_answers(gold, response):
    verdict = verify_math(response, TaskRef(answer=gold))
    assert not verdict.correct
    assert verdict.extracted is not None


@pytest.mark.parametrize("response", [
    "", "I don't know.", "\\boxed{", "}}}{{{", "\x00\ufffd\u202e", "answer: banana",
    "The answer is $\\frac{", "\\boxed{\\frac{1}{0}}", "a" * 20000,
])
def test_garbage_is_wrong_not_an_error(response):
    assert not verify_math(response, TaskRef(answer="42")).correct


@pytest.mark.parametrize("response", [
    "\\boxed{9^{9^{9^{9}}}}", "The answer is 9**9**9**9", "\\boxed{(10^{100})!}",
    "\\boxed{99999999999999999999!}", "\\boxed{2^{99999999999}}", "\\boxed{\\binom{10^{9}}{5}}",
])
def test_answers_that_would_hang_sympy_are_refused_quickly(response):
    """With no timeout in threads, these would hold the GIL for minutes (checked by hand)."""
    started = time.perf_counter()
    assert not verify_math(response, TaskRef(answer="42")).correct
    assert time.perf_counter() - started < 5


def test_a_comparison_that_never_ends_is_wrong_after_the_timeout(monkeypatch):
    """sympy expands (x+y+z)^{999} for ever: the worker is killed, the pool keeps working."""
    monkeypatch.setattr(math_verifier, "COMPARE_TIMEOUT_S", 1.0)
    verify_math("\\boxed{2}", TaskRef(answer="2"))  # the worker is up before the clock starts
    started = time.perf_counter()
    verdict = verify_math("\\boxed{(x+y+z)^{999}}", TaskRef(answer="42"))
    assert time.perf_counter() - started < 20
    assert not verdict.correct and verdict.method == "math_verify:timeout"
    assert verify_math("\\boxed{\\frac{84}{2}}", TaskRef(answer="42")).correct


def test_without_worker_processes_verification_runs_in_process(monkeypatch):
    """Inside a daemonic process (a Celery prefork child) no worker can be started."""
    def refuse() -> None:
        raise AssertionError("daemonic processes are not allowed to have children")

    monkeypatch.setattr(math_verifier, "_POOL", math_verifier._WorkerPool())
    monkeypatch.setattr(math_verifier, "_Worker", refuse)
    assert verify_math("\\boxed{\\frac{1}{2}}", HALF).correct
    assert math_verifier._POOL._in_process
    assert not verify_math("\\boxed{0.6}", HALF).correct


@pytest.mark.parametrize("response", [
    "answer:" + " \t" * 16000, "\\boxed{" * 8000, "x" + " " * 32000 + "y\\]", "1," * 16000,
    "answer is " * 3000, "[" * 32000 + "neutral", "not " * 8000 + "neutral", "1/" * 16000,
])
def test_long_adversarial_responses_take_linear_time(response):
    """Responses may be 32k characters; a backtracking regex turned some of these into
    minutes (measured before the patterns were made possessive). The bound is loose on
    purpose: linear takes well under a second here, even on a loaded 2-core machine the
    suite shares with other jobs; a backtracking pattern takes minutes."""
    started = time.perf_counter()
    verify_math(response, TaskRef(answer="5"))
    parse_nli(response)
    assert time.perf_counter() - started < 10


def test_a_gold_answer_math_verify_cannot_read_is_compared_as_text():
    verdict = verify_math("The answer is Paris.", TaskRef(answer="Paris"))
    assert verdict.correct and verdict.method == "exact"
    assert not verify_math("The answer is Lyon.", TaskRef(answer="Paris")).correct
    assert not verify_math("The answer is sirap.", TaskRef(answer="Paris")).correct


# --- reasoning-gym path ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def rg_tasks() -> list[Task]:
    arithmetic = load_tasks({"source": "reasoning_gym", "name": "basic_arithmetic", "size": 6,
                             "config": {"max_terms": 3, "max_digits": 3}})
    gsm = load_tasks({"source": "reasoning_gym", "name": "gsm_symbolic", "size": 4})
    return arithmetic + gsm


def shipped(task: Task) -> TaskRef:
    """The task as the reward service gets it: only answer, source and metadata, via JSON."""
    return TaskRef.model_validate(json.loads(task.ref().model_dump_json()))


def test_reasoning_gym_tasks_use_their_own_scorer(rg_tasks):
    for task in rg_tasks:
        ref = shipped(task)
        right = verify_math(f"Working...\nThe answer is \\boxed{{{task.answer}}}", ref)
        assert right.correct and right.score == 1.0 and right.method == task.source, task
        assert verify_math(f"The answer is {task.answer}.", ref).correct
        wrong = verify_math(f"\\boxed{{{int(float(task.answer)) + 1}}}", ref)
        assert not wrong.correct
        assert not verify_math("no idea", ref).correct


def test_partial_credit_from_a_scorer_is_not_correct(rg_tasks):
    gsm = next(t for t in rg_tasks if t.source == "reasoning_gym:gsm_symbolic")
    verdict = verify_math("\\boxed{123456}", shipped(gsm))
    assert verdict.score == pytest.approx(0.01)  # gsm_symbolic's reward for any number
    assert not verdict.correct


def test_thousands_separator_is_not_a_different_answer():
    task = TaskRef(answer="1234", source="reasoning_gym:basic_arithmetic",
                   metadata={"rg_entry": {}, "rg_config": {}})
    assert verify_math("\\boxed{1,234}", task).correct


def test_scorer_datasets_are_cached(rg_tasks):
    refs = [shipped(t) for t in rg_tasks]
    verify_math("1", refs[0])
    before = rgym._scorer.cache_info()
    for ref in refs * 3:
        verify_math("1", ref)
    after = rgym._scorer.cache_info()
    assert after.misses - before.misses <= 1  # at most gsm_symbolic's first use
    assert after.hits > before.hits


@pytest.mark.parametrize(("source", "metadata", "fragment"), [
    ("reasoning_gym:no_such", {}, "unknown reasoning-gym dataset"),
    ("reasoning_gym:word_ladder", {}, "its scorer cannot score this task"),
    ("reasoning_gym:basic_arithmetic", {"rg_config": "x"}, "'rg_config' must be an object"),
    ("reasoning_gym:basic_arithmetic", {"rg_config": {"max_terms": 0}}, "max_terms"),
])
def test_a_broken_reasoning_gym_task_is_a_task_error(source, metadata, fragment):
    with pytest.raises(TaskError) as err:
        verify_math("\\boxed{5}", TaskRef(answer="5", source=source, metadata=metadata))
    assert fragment in str(err.value)


# --- threads --------------------------------------------------------------------------------


def test_math_verify_defaults_fail_outside_the_main_thread():
    """The reason every call passes parsing_timeout=None / timeout_seconds=None."""
    from math_verify import parse

    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match="threaded"):
        pool.submit(parse, "$\\frac{1}{3}$").result()


def test_verify_from_many_threads_matches_sequential(rg_tasks):
    # Fresh strings (not in the parse cache) so math-verify really parses inside the threads.
    cases = [(f"\\boxed{{\\frac{{{n}}}{{{2 * n}}}}}", HALF, True) for n in range(1, 30)]
    cases += [(f"The answer is {n}/{n + 1}.", HALF, False) for n in range(50, 60)]
    cases += [(f"\\boxed{{{t.answer}}}", shipped(t), True) for t in rg_tasks]
    cases += [(f"\\boxed{{{int(float(t.answer)) - 3}}}", shipped(t), False) for t in rg_tasks]
    cases += [("gibberish", HALF, False), ("\\boxed{9^{9^9}}", HALF, False)]
    with ThreadPoolExecutor(8) as pool:
        threaded = list(pool.map(lambda c: verify_math(c[0], c[1]), cases * 2))
    assert [v.correct for v in threaded] == [c[2] for c in cases] * 2
    assert threaded[: len(cases)] == [verify_math(c[0], c[1]) for c in cases]


# --- NLI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "label"), [
    ("entailment", "entailment"),
    ("Entails.", "entailment"),
    ("The hypothesis is entailed by the premise.", "entailment"),
    ("[contradiction]", "contradiction"),
    ("Answer: neutral", "neutral"),
    ("ANSWER: Contradiction", "contradiction"),
    ("**Neutral**", "neutral"),
    ("\\boxed{entailment}", "entailment"),
    ("The answer is: [neutral]", "neutral"),
    ("It contradicts the premise.", "contradiction"),
    ("contradictory", "contradiction"),
    ("neutral. Definitely neutral.", "neutral"),
    ("yes", "entailment"),
    ("Yes.", "entailment"),
    # Two labels: only an explicitly marked answer counts, and the last one wins.
    ("Neutral at first sight, but the answer is contradiction.", "contradiction"),
    ("Answer: neutral. Hmm, no. Answer: entailment", "entailment"),
    ("Could be entailment or neutral... [neutral]", "neutral"),
    # A denied label is not an answer.
    ("It isn't a contradiction; neutral.", "neutral"),
    ("Not neutral but contradiction", "contradiction"),
])
def test_parse_nli(text, label):
    assert parse_nli(text) == label


@pytest.mark.parametrize("text", [
    "", "no", "maybe", "yes, but it might not hold", "It could be neutral or contradiction.",
    "The premise does not entail the hypothesis.", "nonentailment", "neutrality",
    "entailment, neutral, contradiction", "Answer: not entailment",
])
def test_unparsable_nli(text):
    assert parse_nli(text) is None


@pytest.mark.parametrize(("gold", "response", "correct"), [
    ("entailment", "Entails.", True), ("0", "entailment", True), ("c", "[contradiction]", True),
    ("neutral", "contradiction", False), ("neutral", "no idea", False),
])
def test_verify_nli(gold, response, correct):
    verdict = verify_nli(response, TaskRef(answer=gold))
    assert verdict.correct is correct
    assert verdict.parsable is (response != "no idea")


def test_verify_nli_on_sample_tasks():
    tasks = load_tasks({"source": "jsonl", "path": "data/samples/anli_sample.jsonl",
                        "format": "anli"}, "all")
    assert all(verify_nli(f"Answer: {t.answer}", t).correct for t in tasks)
    assert not any(verify_nli("Answer: entailment", t).correct for t in tasks
                   if t.answer != "entailment")


def test_math500_sample_solutions_verify_against_their_latex_answers():
    """MATH's golds are LaTeX (fractions, radicals, intervals, tuples): each worked solution is
    right against its own row's answer and wrong against another row's."""
    tasks = load_tasks({"source": "jsonl", "path": "data/samples/math500_sample.jsonl",
                        "format": "math"}, "all")
    assert all(verify_math(t.metadata["solution"], t).correct for t in tasks)
    shifted = zip(tasks, tasks[1:] + tasks[:1], strict=True)
    assert not any(verify_math(t.metadata["solution"], other).correct for t, other in shifted
                   if t.answer != other.answer)
    assert verify_math("Answer: 0.75", tasks[1]).correct  # \\frac{3}{4}, written another way


def test_bad_nli_gold_is_a_task_error():
    with pytest.raises(TaskError, match="label 'maybe'"):
        verify_nli("neutral", TaskRef(answer="maybe"))
