"""Code debugging: the problem set checked in the real sandbox, both modes, bad code, scoring."""

from __future__ import annotations

import json
import random

import pytest

from agora.agents.context import BuggyAuthor, CopyFixer, OracleFixer
from agora.config.run import load_config
from agora.envs.base import TurnBasedEnv
from agora.envs.code_debug import CodeDebug, check_code, score_debug
from agora.envs.code_debug_problems import HELD_OUT_PROBLEMS, PROBLEMS_BY_ID, TRAINING_PROBLEMS
from agora.evaluation.seeds import held_out_seed
from agora.rewards.verifiers.code import expected_test_names, verify_code
from agora.sandbox.runner import SandboxLimits

LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=8)
RNG = random.Random(0)
PROBLEMS = TRAINING_PROBLEMS + HELD_OUT_PROBLEMS


def test_problem_set_is_consistent():
    assert len(PROBLEMS) == len(PROBLEMS_BY_ID) >= 16
    assert len(TRAINING_PROBLEMS) >= 8 and len(HELD_OUT_PROBLEMS) >= 8
    # Held out means never trained on: no function of one set appears in the other.
    assert not {p.func_name for p in TRAINING_PROBLEMS} & {p.func_name for p in HELD_OUT_PROBLEMS}
    all_tests = []
    for p in PROBLEMS:
        assert p.solution.startswith(p.signature) and p.buggy.startswith(p.signature)
        assert check_code(p.solution, p.func_name) == "" == check_code(p.buggy, p.func_name)
        names = expected_test_names(p.tests)
        assert len(names) >= 4 and all(n.startswith(f"test_{p.problem_id}") for n in names)
        all_tests += names
    assert len(set(all_tests)) == len(all_tests)  # so every problem can share one sandbox run


def _per_problem(verdict) -> dict[str, tuple[int, int]]:
    """(passed, total) per problem from one combined run (test names carry the problem id)."""
    counts = {}
    for p in PROBLEMS:
        names = expected_test_names(p.tests)
        failed = [n for n in names if n in verdict.failures]
        counts[p.problem_id] = (len(names) - len(failed), len(names))
    return counts


def test_reference_solutions_pass_and_known_bugs_fail_some_tests_in_the_sandbox():
    tests = "\n\n".join(p.tests for p in PROBLEMS)
    good = verify_code("\n\n".join(p.solution for p in PROBLEMS), tests, LIMITS)
    assert good.passed and good.status == "ok", good.failures
    bad = verify_code("\n\n".join(p.buggy for p in PROBLEMS), tests, LIMITS)
    assert bad.status == "ok" and not bad.passed
    for problem_id, (passed, total) in _per_problem(bad).items():
        # Every known bug is plausible: it passes some tests (close to right) but not all.
        assert 0 < passed < total, problem_id


def test_protocol_modes_and_problem_choice():
    env = CodeDebug()
    assert isinstance(env, TurnBasedEnv) and env.name == "code_debug"
    assert env.num_seats == 2 and env.role(0) == "author" and env.role(1) == "fixer"
    solo = CodeDebug(mode="fixer")
    assert solo.num_seats == 1 and solo.role(0) == "fixer"
    chosen = set()
    for seed in range(len(TRAINING_PROBLEMS)):
        env.reset(seed)
        again = CodeDebug()
        again.reset(seed)
        assert again.problem == env.problem
        chosen.add(env.problem.problem_id)
    assert chosen == {p.problem_id for p in TRAINING_PROBLEMS}
    # Evaluation's seeds play the held-out problems, each in turn from the first seed on...
    evaluated = []
    for episode in range(len(HELD_OUT_PROBLEMS)):
        env.reset(held_out_seed(0, episode))
        evaluated.append(env.problem)
    assert evaluated == list(HELD_OUT_PROBLEMS)
    # Evaluation gives a switching author's strategies in turn (episode i: strategy i mod 2):
    # every held-out problem meets both, the planted bug included.
    met = set()
    for episode in range(2 * len(HELD_OUT_PROBLEMS)):
        env.reset(held_out_seed(0, episode))
        met.add((env.problem.problem_id, episode % 2))
    assert len(met) == 2 * len(HELD_OUT_PROBLEMS)
    # ...unless the run asks for the training problems (how it was measured until 2026-12-07).
    as_before = CodeDebug(eval_problems="training")
    as_before.reset(held_out_seed(0, 0))
    assert as_before.problem in TRAINING_PROBLEMS
    pinned = CodeDebug(problem_id="fizzbuzz")
    pinned.reset(123)
    assert pinned.problem.problem_id == "fizzbuzz"
    with pytest.raises(ValueError):
        CodeDebug(mode="solo")
    with pytest.raises(ValueError):
        CodeDebug(problem_id="nope")


def test_observations():
    env = CodeDebug(problem_id="binary_search")
    env.reset(0)
    author = "\n".join(m["content"] for m in env.observation(0))
    assert env.problem.spec in author and env.problem.signature in author and "bug" in author
    assert "assert" not in author  # the tests stay hidden
    env.step(BuggyAuthor().act(env, RNG))
    fixer = env.observation(1)[1]["content"]
    assert env.problem.spec in fixer and env.problem.buggy.strip() in fixer
    honest = CodeDebug(problem_id="binary_search", author_plants_bug=False)
    assert "bug" not in honest.observation(0)[0]["content"]


def test_pair_episode_with_a_fix():
    env = CodeDebug(problem_id="max_subarray")
    env.reset(0)
    assert env.step(BuggyAuthor().act(env, RNG)).legal
    done = env.step(OracleFixer().act(env, RNG))
    assert done.legal and done.done and not env.step("late").legal
    out = env.outcome()
    info = json.loads(json.dumps(out.info))
    assert out.reason == "completed" and info["problem_id"] == "max_subarray"
    assert info["author_code"].strip() == env.problem.buggy.strip()
    assert info["fixer_code"].strip() == env.problem.solution.strip()
    assert info["mode"] == "pair" and info["illegal"] == {"author": 0, "fixer": 0}
    score = score_debug(info, LIMITS)
    assert score["author"]["tests_passed"] == 3 and not score["author"]["passed"]
    assert score["fixer"]["passed"] and score["fixer"]["pass_rate"] == 1.0
    assert score["author_bug"] and score["fixed"]
    assert score["rewards"] == {"fixer": 1.0, "author": pytest.approx(0.5 + 0.5 * 3 / 5)}
    assert score["fixer_improvement"] == pytest.approx(0.4)


def test_solo_fixer_that_copies_the_bug():
    env = CodeDebug(mode="fixer", problem_id="second_largest")
    env.reset(0)
    assert env.problem.buggy.strip() in env.observation(0)[1]["content"]
    env.step(CopyFixer().act(env, RNG))
    info = env.outcome().info
    assert info["author_source"] == "bug_list" and env.done
    score = score_debug(info, LIMITS)
    assert score["author"] == score["fixer"]  # same code: one sandbox run
    assert score["author_bug"] and not score["fixed"]
    assert score["rewards"] == {"fixer": pytest.approx(3 / 5)}  # no author in this mode
    assert score["fixer_improvement"] == 0.0


def test_bad_code_is_counted_and_fails_in_the_sandbox():
    env = CodeDebug(problem_id="sum_evens")
    env.reset(0)
    broken = env.step("```python\ndef sum_evens(nums:\n    return 0\n```")
    assert not broken.legal and not broken.done and "does not parse" in broken.reason
    hang = env.step("```python\ndef sum_evens(nums):\n    while True:\n        pass\n```")
    assert hang.legal and hang.done  # it parses; only running it shows the loop
    info = env.outcome().info
    assert info["illegal"] == {"author": 1, "fixer": 0}
    score = score_debug(info, SandboxLimits(cpu_seconds=1, wall_seconds=6))
    assert score["author"]["tests_passed"] == 0 and "SyntaxError" in score["author"]["reason"]
    assert score["fixer"]["status"] in ("cpu_limit", "timeout")
    assert score["fixer"]["pass_rate"] == 0.0
    assert not score["author_bug"] and score["rewards"] == {"fixer": 0.0, "author": 0.0}


def test_static_checks():
    assert check_code("", "f") == "no code"
    assert check_code("x = 1\n", "f") == "code does not define f()"
    assert check_code("def g():\n    pass\n", "f") == "code does not define f()"
    assert check_code("def f(:\n", "f").startswith("code does not parse")
    assert check_code("def f(x):\n    return x\n", "f") == ""
    env = CodeDebug(problem_id="fizzbuzz")
    env.reset(0)
    assert not env.step("I do not know.").legal  # prose is not code
    assert env.outcome().info["illegal"]["author"] == 1


def test_eval_problems_from_the_config_and_a_bad_value_named():
    from agora.config.base import ConfigError
    from agora.rollout.seating import build_env

    shipped = load_config("configs/code_debug.yaml")
    assert shipped.environment.code_debug.eval_problems == "held_out"
    env = build_env(shipped, {})
    env.reset(held_out_seed(0, 1))
    assert env.problem == HELD_OUT_PROBLEMS[1]
    training = load_config("configs/code_debug.yaml",
                           ["environment.code_debug.eval_problems=training"])
    env = build_env(training, {})
    env.reset(held_out_seed(0, 1))
    assert env.problem in TRAINING_PROBLEMS
    with pytest.raises(ConfigError, match=r"environment\.code_debug\.eval_problems"):
        load_config("configs/code_debug.yaml", ["environment.code_debug.eval_problems=test"])
