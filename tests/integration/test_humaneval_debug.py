"""Code debugging on HumanEval: bugs planted by AST mutation, checked in the real sandbox; the
shipped problem set; problem files and their errors; the set chosen from the config."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from agora.agents.context import OracleFixer
from agora.config.base import ConfigError
from agora.config.run import load_config
from agora.envs.code_debug import CodeDebug, check_code, score_debug
from agora.envs.code_debug_problems import (
    HUMANEVAL_FILE,
    ProblemFileError,
    load_problem_file,
    problem_set,
)
from agora.envs.humaneval_debug import (
    HumanEvalFormatError,
    main,
    problem_from_record,
    read_records,
    split_tests,
)
from agora.evaluation.seeds import held_out_seed
from agora.rewards.verifiers.code import expected_test_names, verify_code
from agora.rollout.seating import build_env
from agora.sandbox.runner import SandboxLimits

LIMITS = SandboxLimits(cpu_seconds=4, wall_seconds=20)

# Two records in HumanEval's own schema (the prompt carries the signature and docstring, the
# canonical solution the body, the test a METADATA dict and check(candidate)).
COUNT_ABOVE = {
    "task_id": "HumanEval/7",
    "prompt": "from typing import List\n\n\ndef count_above(nums: List[int], limit: int) -> int:"
              "\n    \"\"\" Count the numbers in nums greater than limit.\n"
              "    >>> count_above([1, 5, 7], 4)\n    2\n    \"\"\"\n",
    "entry_point": "count_above",
    "canonical_solution": "    total = 0\n    for n in nums:\n        if n > limit:\n"
                          "            total += 1\n    return total\n",
    "test": "\n\nMETADATA = {'author': 'x', 'dataset': 'test'}\n\n\ndef check(candidate):\n"
            "    assert candidate([1, 5, 7], 4) == 2\n    assert candidate([], 0) == 0\n"
            "    assert candidate([4, 4], 4) == 0\n    assert candidate([9], 1) == 1\n"
            "    assert True, 'a message'\n",
}
CONSTANT = {  # nothing to mutate: no plausible bug can be planted
    "task_id": "HumanEval/8",
    "prompt": "def greeting() -> str:\n    \"\"\"Say hello.\"\"\"\n",
    "entry_point": "greeting",
    "canonical_solution": "    return 'hello'\n",
    "test": "def check(candidate):\n    assert candidate() == 'hello'\n"
            "    assert len(candidate()) == 5\n",
}


def sandbox(code: str, tests: str) -> tuple[int, int, bool]:
    verdict = verify_code(code, tests, LIMITS)
    return verdict.tests_passed, verdict.tests_total, verdict.status == "ok"


def test_check_asserts_become_one_test_each():
    tests = split_tests(COUNT_ABOVE["test"], "count_above", "humaneval_7")
    # The assert that does not call the candidate is not a test; METADATA is dropped.
    assert expected_test_names(tests) == [f"test_humaneval_7_{i}" for i in range(4)]
    assert "METADATA" not in tests and "candidate = count_above" in tests
    looping = "def check(candidate):\n    for x in range(3):\n        assert candidate(x)\n"
    with pytest.raises(HumanEvalFormatError, match="more than assert"):
        split_tests(looping, "f", "humaneval_1")


def test_a_planted_bug_fails_some_tests_not_all_in_the_sandbox():
    problem, bug = problem_from_record(COUNT_ABOVE, sandbox)
    assert problem is not None, bug
    assert problem.problem_id == "humaneval_7" and problem.func_name == "count_above"
    assert problem.signature == "def count_above(nums: List[int], limit: int) -> int:"
    assert problem.spec.startswith("Count the numbers in nums greater than limit.")
    # The docstring is out of the code; the bug is one change of the solution.
    assert '"""' not in problem.solution and problem.buggy != problem.solution
    # The prompt's import runs before any code for the problem, so code without it passes.
    assert problem.preamble == "from typing import List\n"
    assert problem.solution.startswith("def count_above(")
    assert check_code(problem.buggy, "count_above") == ""
    good = verify_code(problem.program(problem.solution), problem.tests, LIMITS)
    assert good.passed and good.tests_total == 4
    assert not verify_code(problem.solution, problem.tests, LIMITS).passed  # NameError: List
    bad = verify_code(problem.program(problem.buggy), problem.tests, LIMITS)
    assert bad.status == "ok" and 0 < bad.tests_passed < bad.tests_total, (bug, problem.buggy)
    # The same record gives the same bug (the mutation order is drawn from the task number).
    assert problem_from_record(COUNT_ABOVE, sandbox)[0] == problem


def test_records_without_a_plausible_bug_are_skipped_and_said_why():
    problem, why = problem_from_record(CONSTANT, sandbox)
    assert problem is None and "no mutant" in why
    broken = {**COUNT_ABOVE, "canonical_solution": "    return 0\n"}
    problem, why = problem_from_record(broken, sandbox)
    assert problem is None and "passes 2/4 tests" in why  # [] and [4, 4]: 0


def test_build_cli_writes_a_problem_file_the_env_loads(tmp_path: Path):
    source = tmp_path / "HumanEval.jsonl.gz"
    records = [COUNT_ABOVE, CONSTANT] + [
        {**COUNT_ABOVE, "task_id": f"HumanEval/{n}", "entry_point": f"count_above_{n}",
         "prompt": COUNT_ABOVE["prompt"].replace("count_above", f"count_above_{n}")}
        for n in (10, 11)]
    with gzip.open(source, "wt") as fh:
        fh.write("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "problems.jsonl"
    assert main([str(source), "--out", str(out)]) == 0
    loaded = load_problem_file(out)
    # 3 kept (the constant one is not); held out: an odd number, at least one.
    assert len(loaded.training) + len(loaded.held_out) == 3 and len(loaded.held_out) == 1
    env = CodeDebug(mode="fixer", problems=str(out))
    env.reset(held_out_seed(0, 0))
    assert env.problem == loaded.held_out[0]
    assert main([str(tmp_path / "missing.jsonl"), "--out", str(out)]) == 2


def test_bad_records_and_problem_files_are_named(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"task_id": "x", "prompt": "p"}) + "\n")
    with pytest.raises(HumanEvalFormatError, match=r"bad\.jsonl:1: .*'entry_point'"):
        read_records(bad)
    row = {"problem_id": "p", "spec": "s", "signature": "def f():", "solution": "def f(): pass",
           "buggy": "def f(): return 1", "tests": "def test_p(): pass", "split": "training"}
    cases = {
        "not JSON": "{",
        r"missing or empty field\(s\) \['buggy'\]": json.dumps({**row, "buggy": ""}),
        "split must be": json.dumps({**row, "split": "test"}),
        "appears twice": json.dumps(row) + "\n" + json.dumps(row),
        "no held_out problems": json.dumps(row),
    }
    for message, text in cases.items():
        bad.write_text(text + "\n")
        with pytest.raises(ProblemFileError, match=message):
            load_problem_file(bad)


def test_the_shipped_humaneval_set_in_the_sandbox():
    shipped = load_problem_file(HUMANEVAL_FILE)
    problems = shipped.training + shipped.held_out
    assert len(problems) >= 80 and len(shipped.held_out) >= 15
    # Odd, so that evaluation's alternating author strategies meet every held-out function.
    assert len(shipped.held_out) % 2 == 1
    assert not {p.func_name for p in shipped.training} & {p.func_name for p in shipped.held_out}
    names = [n for p in problems for n in expected_test_names(p.tests)]
    assert len(set(names)) == len(names)
    # Each solution passes all its tests and each bug some but not all, in the real sandbox
    # (one run per problem: HumanEval's helper functions would clash in one module).
    assert sum(bool(p.preamble) for p in problems) >= 10  # HumanEval's `from typing import`
    for p in problems[::4]:
        good = verify_code(p.program(p.solution), p.tests, LIMITS)
        assert good.passed, (p.problem_id, good.failures)
        bad = verify_code(p.program(p.buggy), p.tests, LIMITS)
        assert bad.status == "ok" and 0 < bad.tests_passed < bad.tests_total, p.problem_id


def test_humaneval_from_the_config_scored_and_bad_sets_named(tmp_path: Path):
    cfg = load_config("configs/code_debug.yaml", ["environment.code_debug.problems=humaneval"])
    humaneval = problem_set("humaneval")
    env = build_env(cfg, {})
    env.reset(held_out_seed(0, 2))
    assert env.problem == humaneval.held_out[2]
    env.reset(3)
    assert env.problem == humaneval.training[3]
    # A pair episode: the known bug, then the reference fix, scored by the real sandbox.
    fixer = CodeDebug(mode="fixer", problems="humaneval")
    fixer.reset(3)
    fixer.step(OracleFixer().act(fixer, None))
    info = fixer.outcome().info
    assert info["problems"] == "humaneval"
    scores = score_debug(info, LIMITS)
    assert scores["fixer"]["passed"] and scores["author_bug"] and scores["fixed"]

    with pytest.raises(ConfigError, match=r"environment\.code_debug\.problems.*cannot read"):
        load_config("configs/code_debug.yaml",
                    [f"environment.code_debug.problems={tmp_path / 'none.jsonl'}"])
    with pytest.raises(ConfigError, match=r"code_debug\.problem_id: unknown problem 'sum_evens'"):
        load_config("configs/code_debug.yaml", ["environment.code_debug.problems=humaneval",
                                                "environment.code_debug.problem_id=sum_evens"])
