"""Program-aided math answers (environment.answer: program | either): the answer's Python block
runs in the sandbox and its last printed line is verified; the reward service reports how each
program ran, the worker counts programs per agent, and the discussion env asks for them."""

from __future__ import annotations

import pytest

from agora.data import TaskRef, load_tasks
from agora.envs.discussion import Discussion, DiscussionTask
from agora.rewards.verifiers.program import last_program, verify_answer
from agora.sandbox.runner import SandboxLimits

# 1 CPU second ends the busy loop; the wall clock is far above it, so a loaded machine (where
# that second takes several of wall time) still reports cpu_limit rather than timeout.
FAST = SandboxLimits(cpu_seconds=1, wall_seconds=30)
GOLD = TaskRef(answer="444")


def block(code: str, tag: str = "python") -> str:
    return f"Let me compute it.\n```{tag}\n{code}\n```\n"


def test_the_last_complete_block_is_the_program():
    assert last_program(block("print(1)") + block("print(2)", "py")) == "print(2)\n"
    assert last_program(block("print(3)", "")) == "print(3)\n"  # untagged fences count
    assert last_program(block("print(1)") + "```python\nprint(2)") == "print(1)\n"  # cut off
    assert last_program("Answer: 444") is None and last_program(block("   ")) is None


@pytest.mark.parametrize(("response", "mode", "correct", "status"), [
    (block("print(12 * 37)"), "program", True, "ok"),
    (block("print(4440 / 10)"), "program", True, "ok"),  # 444.0 is 444
    (block("x = 12 * 37\nprint('total:')\nprint(x)"), "either", True, "ok"),  # the last line
    (block("print(12 * 36)"), "either", False, "ok"),
    (block("print(12 * 37)") + "Answer: 5", "text", False, None),  # text reads the text only
    (block("print(1)") + "Answer: 444", "text", True, None),
    ("Answer: 444", "either", True, None),  # no program: the written answer
    ("Answer: 444", "program", False, None),  # program mode needs one
    (block("raise ValueError('no')"), "either", False, "error"),
    (block("x = 444"), "program", False, "no_output"),
    (block("while True:\n    pass"), "program", False, "cpu_limit"),
])
def test_verdicts_by_answer_mode(response, mode, correct, status):
    verdict, run = verify_answer(response, GOLD, mode, FAST)
    assert verdict.correct is correct
    assert (run.status if run else None) == status
    if status == "ok":
        assert verdict.method.startswith("program+") and run.printed is not None


def test_a_reasoning_gym_task_scores_the_printed_line_with_its_own_scorer():
    task = load_tasks({"source": "reasoning_gym", "name": "gsm_symbolic", "size": 1,
                       "seed": 3})[0].ref()
    as_float = f"print(float({task.answer}))"  # a scorer comparing strings sees "N", not "N.0"
    verdict, run = verify_answer(block(as_float), task, "either", FAST)
    assert run.printed == f"{float(task.answer)}" and verdict.correct
    assert verdict.method == "program+reasoning_gym:gsm_symbolic"


def test_the_program_cannot_reach_the_network_or_the_callers_environment(monkeypatch):
    monkeypatch.setenv("AGORA_SECRET_FOR_TEST", "s3cret")
    code = ("import os, socket\n"
            "print(os.environ.get('AGORA_SECRET_FOR_TEST', 'none'))\n"
            "socket.create_connection(('1.1.1.1', 53), timeout=1)\nprint(444)")
    verdict, run = verify_answer(block(code), GOLD, "program", FAST)
    assert not verdict.correct and run.status == "error"  # the connection failed


def test_the_discussion_asks_for_programs_only_where_configured():
    task = DiscussionTask("t", "math", "What is 12 * 37?")
    text = Discussion(task).observation(0)[0]["content"]
    either = Discussion(task, answer="either").observation(0)[0]["content"]
    program = Discussion(task, answer="program").observation(0)[0]["content"]
    assert "```python" not in text and "Answer: <number>" in text
    assert "```python" in either and "Answer: <number>" in either
    assert "```python" in program and "Answer:" not in program
    with pytest.raises(ValueError, match="answer 'program' is for math tasks"):
        Discussion(DiscussionTask("t", "nli", "premise"), answer="program")


def test_the_warm_start_demonstrates_a_program_where_programs_are_asked():
    from agora.train.warm_start import TaskAnswerer

    task = DiscussionTask("t", "math", "What is 1/2 + 1/4?")
    demo = TaskAnswerer("\\frac{3}{4}")
    assert demo.act(Discussion(task), None) == "Answer: \\frac{3}{4}"
    shown = demo.act(Discussion(task, answer="program"), None)
    verdict, run = verify_answer(shown, TaskRef(answer="\\frac{3}{4}"), "program", FAST)
    assert run.printed == "\\frac{3}{4}" and verdict.correct


def test_the_config_refuses_program_answers_outside_math_discussions():
    from agora.config.run import ConfigError, parse_config
    from tests.stack_helpers import tiny_config

    with pytest.raises(ConfigError, match="environment.answer: 'either' answers are programs"):
        parse_config(tiny_config(environment={"name": "tictactoe", "seats": ["player", "player"],
                                              "answer": "either"}), "<test>")


def test_evaluation_checks_program_answers_in_the_reward_service_and_votes_on_the_printed_line(
        reward_url, monkeypatch):
    from agora.data import Task
    from agora.evaluation import discussion
    from agora.evaluation.discussion import check_answer

    # The evaluating process never runs model code: any local sandbox run fails this test.
    def no_local_runs(*_args, **_kwargs):
        raise AssertionError("a program ran in the evaluating process")

    monkeypatch.setattr("agora.sandbox.runner.run_python", no_local_runs)
    monkeypatch.setattr("agora.rewards.verifiers.program.run_untrusted", no_local_runs)
    task = Task(task_id="t", kind="math", question="What is 12 * 37?", answer="444")
    memo: dict = {}
    right = check_answer(block("print(12 * 37)"), task, memo, "either", reward_url)
    assert right.correct and right.final == "444"
    assert check_answer(block("print(12 * 37)"), task, memo, "either", reward_url) is right
    assert len(memo) == 1
    wrong = check_answer(block("print(12 * 36)"), task, memo, "program", reward_url)
    assert not wrong.correct and wrong.final == "432"
    crashed = check_answer(block("raise SystemExit(3)"), task, memo, "program", reward_url)
    assert not crashed.correct and crashed.final is None  # abstains from the vote
    assert not check_answer(block("print(12 * 37)"), task, memo, "text").correct  # no answer
    written = check_answer("Answer: 444", task, memo, "either")  # no program: no service needed
    assert written.correct and written.final == "444"
    with pytest.raises(ValueError, match="runs only in a reward service's sandbox"):
        discussion.check_answer(block("print(1)"), task, None, "program", None)


def test_an_evaluation_of_program_answers_starts_a_reward_service(tmp_path):
    from agora.evaluation.serving import EvalServices, GivenUrls
    from tests.stack_helpers import tiny_config

    def services(answer: str) -> EvalServices:
        cfg = tiny_config(environment={
            "name": "discussion", "seats": ["player", "player"], "answer": answer,
            "prefill": "", "opponents": {"self": 1.0},
            "task": {"source": "reasoning_gym", "name": "basic_arithmetic", "size": 8}},
            reward={"verifier": "math"})
        return EvalServices.for_env(cfg, ["player"], GivenUrls(None, None, None), tmp_path)

    assert services("either").need_reward and services("program").need_reward
    assert not services("text").need_reward
