"""critic_check: program — the critic writes a program, the sandbox runs it, the check decides.

Everything runs the real sandbox (agora.sandbox, isolated subprocesses). The episode test drives
``run_episode`` with scripted speakers in place of the served adapters: a critic that writes the
right program cannot be had from tiny-random, and what is under test is the loop's use of the
check (what the actor is shown, the verdict recorded, approval stopping the episode). The stages
run through the CLI on the session's vLLM server.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from agora.data import Task, load_tasks
from agora.reflection.clients import Agents
from agora.reflection.config import load_reflection_config
from agora.reflection.evaluate import run_episode
from agora.reflection.pairs import build_pairs
from agora.reflection.program_critic import check_with_program, written_part
from agora.reflection.prompts import CRITIC_PROGRAM_SYSTEM, CRITIC_SYSTEM, parse_verdict
from agora.reflection.records import (
    OracleRow,
    PreferencePair,
    Transcript,
    read_rows,
)
from agora.reflection.reference_oracle import critiques_and_refinements, slip
from agora.reflection.refined_answers import refinement_rows
from agora.reflection.sft import sft_examples
from agora.reflection.verdict_probe import probe_critique
from tests.integration.test_reflection import (
    TASK,
    TINY_POLICY,
    TINY_SAMPLING,
    reflect,
    said,
    write_config,
)
from tests.integration.test_reflection import scripted_row as reflection_row

ROOT = Path(__file__).resolve().parents[2]


def program(expression: str, before: str = "", after: str = "") -> str:
    return f"{before}```python\nprint({expression})\n```{after}"


def test_the_check_decides_the_verdict() -> None:
    right = check_with_program(program("7 - 3"), "4")
    assert right.endswith("Output: 4\nThe proposed answer 4 is right.\nVerdict: correct")
    assert parse_verdict(right) == "correct"
    wrong = check_with_program(program("7 - 3"), "5")
    assert wrong.endswith("Output: 4\nThe proposed answer 5 is wrong.\nVerdict: wrong")
    # Python's 2.0 is the integer 2; a proposed answer with no number is wrong
    assert parse_verdict(check_with_program(program("6 / 3"), "2")) == "correct"
    assert "Output: 2\n" in check_with_program(program("6 / 3"), "2")
    assert "gives no final number" in check_with_program(program("1 + 1"), None)
    # what the critic writes after its program is not its verdict: the check's is
    contradicted = check_with_program(program("7 - 3", "Let me check.\n", "\nVerdict: correct"),
                                      "5")
    assert contradicted.startswith("Let me check.\n```python")
    assert contradicted.count("Verdict:") == 1 and parse_verdict(contradicted) == "wrong"
    # no program, or one that prints nothing, crashes or runs away: the check gives no
    # verdict (the critic's own written one stands), and nothing raises
    assert parse_verdict(check_with_program("Verdict: correct", "5")) == "correct"
    assert check_with_program("Looks fine.", "5").endswith("No program to check the answer with.")
    for bad, status in (("x = 1", "no_output"), ("1 / 0", "error"),
                        ("while True:\n    pass", "")):
        text = check_with_program(f"```python\n{bad}\n```", "5")
        assert parse_verdict(text) is None and "The check printed no result (" + status in text
    # an unclosed block (cut by the token limit) is no program
    assert check_with_program("```python\nprint(4", "4").endswith("No program to check the "
                                                                   "answer with.")


def scripted_row(t: Task, initial: str) -> OracleRow:
    """What `agora reflect oracle` records with the reference backend and program critiques."""
    return reflection_row(t, initial, check="program")


def test_scripted_program_critiques_are_what_the_sandbox_prints() -> None:
    """The reference oracle writes the program and its check; running that program in the
    sandbox gives exactly the same feedback, so the critic is trained on checks it can redo."""
    t = load_tasks(TASK, "train", limit=1)[0]
    expression, truth = t.metadata["rg_entry"]["expression"], t.answer
    off = str(int(truth) + 2)
    right, wrong, silent = (scripted_row(t, text) for text in (
        f"Answer: {truth}", f"Answer: {off}", "I like numbers."))
    for r in (right, wrong, silent):
        for c in r.critiques:
            assert c.feedback == check_with_program(written_part(c.feedback),
                                                    r.initial_extracted)
        true, *misleading = r.critiques
        assert written_part(true.feedback) == program(expression)
        assert r.verdict_right(true) and true.refined_correct
        assert all(not r.verdict_right(c) and not c.refined_correct for c in misleading)
    # disputing a right answer: the expression one off; approving a wrong one: off by as much
    assert abs(eval(written_part(right.critiques[1].feedback).split("print(")[1]  # noqa: S307
                    .split(")")[0]) - int(truth)) == 1
    assert written_part(wrong.critiques[1].feedback) == program(f"{expression} + 2")
    assert wrong.critiques[1].refined == wrong.initial  # the actor believed the approval
    assert wrong.critiques[0].refined == f"{expression} = {truth}.\nAnswer: {truth}"
    assert [c.verdict for c in silent.critiques] == ["wrong"]
    # a task without an expression: the program prints the result itself
    bare = Task(task_id="w1", kind="math", question="How many?", answer="12")
    (only,) = critiques_and_refinements(bare, "Answer: 11", "11", False, samples=1,
                                        check="program")
    assert only[0] == (program("12") + "\nOutput: 12\nThe proposed answer 11 is wrong.\n"
                       "Verdict: wrong")


@pytest.mark.parametrize("equations", ["root", "search"])
def test_math_style_programs_compute_the_result_from_the_question(equations: str) -> None:
    """On the MATH-style split (equations, complex sums, sums; MATH-500 rows with no
    metadata) the scripted critic's program computes the result from the question's own
    numbers, and the sandbox prints exactly the check the oracle wrote, in either form of
    an equation's program (``oracle.equation_program``)."""
    shipped = load_reflection_config(ROOT / "configs" / "reflection_math_style.yaml")
    tasks = load_tasks(shipped.task, "train")
    for level in (1, 2, 3):
        for t in [t for t in tasks if t.difficulty == level][:3]:
            wrong = slip(t)
            for first, proposed, right in ((f"Answer: {t.answer}", t.answer, True),
                                           (f"Answer: {wrong}", wrong, False)):
                true, misleading = critiques_and_refinements(
                    t, first, proposed, right, samples=2, check="program", equations=equations)
                for feedback, _ in (true, misleading):
                    assert feedback == check_with_program(written_part(feedback), proposed)
                assert parse_verdict(true[0]) == ("correct" if right else "wrong")
                assert parse_verdict(misleading[0]) == ("wrong" if right else "correct")
                program_text = written_part(true[0])
                assert f"print({t.answer})" not in program_text, program_text
                numbers = re.findall(r"\d+", t.question)
                assert all(n in program_text for n in numbers), (t.question, program_text)
                assert f"Output: {t.answer}\n" in true[0]
                if level == 2:  # the equations: the form asked for
                    searched = " in range(-1000, 1001) if " in program_text
                    assert searched == (equations == "search"), program_text


def test_the_critic_learns_its_program_and_the_actor_sees_the_check() -> None:
    tasks = load_tasks(TASK, "train")
    rows = [scripted_row(t, f"Answer: {t.answer if i % 2 else int(t.answer) + 2}")
            .model_copy(update={"sample": i}) for i, t in enumerate(tasks[:4])]
    derived = refinement_rows(rows, samples=2, show_result=True, check="program")
    assert derived and all(c.feedback.startswith("```python") for r in derived
                           for c in r.critiques)
    examples = sft_examples(rows, 300, critic_rows=derived, check="program")
    critic = examples["critic"]
    assert critic and all(e.prompt[0]["content"] == CRITIC_PROGRAM_SYSTEM for e in critic)
    for e in critic:  # the program alone, never the check's lines
        assert said(e.completion).startswith("```python\nprint(")
        assert said(e.completion).endswith("```") and "Output:" not in said(e.completion)
    refine = [e for e in examples["actor"] if e.kind == "refine"]
    assert refine and all("Output: " in said(e.prompt) and "Verdict: " in said(e.prompt)
                          for e in refine)
    pairs = build_pairs(rows, 300, critic_rows=derived, check="program")
    assert pairs["critic"]
    for p in pairs["critic"]:
        assert p.prompt[0]["content"] == CRITIC_PROGRAM_SYSTEM
        assert said(p.chosen).startswith("```python") and said(p.rejected).startswith("```python")
        assert "Output:" not in said(p.chosen) + said(p.rejected)
    # text critics are unchanged by the option's existence
    assert all(e.prompt[0]["content"] == CRITIC_SYSTEM
               for e in sft_examples(rows, 300)["critic"])


def test_the_probe_gives_a_program_critics_actor_program_critiques() -> None:
    """`agora reflect probe`'s actor half: each verdict as the check gives it, in the format
    the actor was trained on (the text critique for a text critic)."""
    t = load_tasks(TASK, "test", limit=1)[0]
    truth, off = t.answer, str(int(t.answer) + 3)
    for proposed, right in ((truth, True), (off, False)):
        for verdict in ("correct", "wrong"):
            text = probe_critique(t, proposed, right, verdict, "program")
            assert text.startswith("```python") and parse_verdict(text) == verdict
            assert text == check_with_program(written_part(text), proposed)
            plain = probe_critique(t, proposed, right, verdict, "text")
            assert plain.startswith("The proposed answer") and parse_verdict(plain) == verdict
    assert "Output: " + truth in probe_critique(t, off, False, "wrong", "program")


@dataclass
class Said:
    text: str


class Speaker:
    """A scripted speaker in place of a served adapter: says its lines in turn (the last one
    again when they run out) and records what it was shown."""

    def __init__(self, *lines: str) -> None:
        self.lines, self.shown = list(lines), []

    async def generate(self, messages: list[dict]) -> Said:
        self.shown.append(messages)
        return Said(self.lines.pop(0) if len(self.lines) > 1 else self.lines[0])


def test_an_episode_runs_the_critics_program() -> None:
    t = load_tasks(TASK, "test", limit=1)[0]
    expression, truth = t.metadata["rg_entry"]["expression"], t.answer
    off = str(int(truth) + 1)
    actor = Speaker(f"Answer: {off}", f"{expression} = {truth}\nAnswer: {truth}")
    critic = Speaker(program(expression))
    transcript = asyncio.run(run_episode(Agents(actor=actor, critic=critic), t, turns=3,
                                         max_chars=300, critic_check="program"))
    first, second, third = transcript.turns
    assert not first.correct and second.correct and third.correct
    assert second.verdict == "wrong" and f"Output: {truth}\n" in second.feedback
    assert third.verdict == "correct"
    assert critic.shown[0][0]["content"] == CRITIC_PROGRAM_SYSTEM
    assert f"The proposed answer {off} is wrong." in said(actor.shown[1])  # the actor sees it
    # stop_on_approval: the check's "correct" ends the refining
    actor = Speaker(f"Answer: {truth}")
    critic = Speaker(program(expression))
    stopped = asyncio.run(run_episode(Agents(actor=actor, critic=critic), t, turns=4,
                                      max_chars=300, stop_on_approval=True,
                                      critic_check="program"))
    assert [turn.carried for turn in stopped.turns] == [False, True, True, True]
    assert len(actor.shown) == 1 and len(critic.shown) == 1
    # a runaway program costs its own turn, not the episode
    looping = asyncio.run(run_episode(
        Agents(actor=Speaker(f"Answer: {off}"), critic=Speaker("```python\nwhile 1: pass\n```")),
        t, turns=2, max_chars=300, critic_check="program"))
    assert looping.turns[1].verdict is None
    assert "The check printed no result" in looping.turns[1].feedback


def test_a_program_critic_run_through_the_cli(tmp_path: Path, vllm_tiny) -> None:
    """`agora reflect oracle/pairs/eval` with critic_check: program: the scripted oracle's
    critiques are programs with their checks, the critic's pairs are programs, and the
    evaluation checks whatever the (tiny, untrained) critic wrote."""
    out = reflect("sft", write_config(tmp_path / "bad.yaml", critic_check="program", oracle={
        "backend": "reference", "samples": 2, "critique": "verdict"}), code=2)
    assert "critic_check: 'program' critiques show the check's printed result" in out
    assert "set oracle.critique: worked" in out and "Traceback" not in out
    assert "critic_check" in reflect("sft", write_config(tmp_path / "bad2.yaml",
                                                         critic_check="tool"), code=2)
    url, _ = vllm_tiny
    path = write_config(
        tmp_path / "program.yaml", name="program", policy=TINY_POLICY, policy_url=url,
        train_tasks=3, actor_samples=1, critic_check="program", critic_judges_refinements=True,
        actor={"sampling": TINY_SAMPLING}, critic={"sampling": TINY_SAMPLING},
        oracle={"backend": "reference", "samples": 2}, eval={"tasks": 2, "turns": 3})
    run = load_reflection_config(path).run_dir
    reflect("oracle", path)
    rows = read_rows(run / "oracle.jsonl", OracleRow, "oracle")
    assert len(rows) == 3
    for r in rows:
        true = r.critiques[0]
        assert true.feedback.startswith(program(r.task.metadata["rg_entry"]["expression"]))
        assert r.verdict_right(true) and true.refined_correct
    reflect("pairs", path)
    critic_pairs = read_rows(run / "pairs" / "critic.jsonl", PreferencePair, "pairs")
    assert critic_pairs and all(said(p.chosen).startswith("```python") for p in critic_pairs)
    reflect("eval", path, "--stage", "base")
    transcripts = read_rows(run / "eval" / "base.transcripts.jsonl", Transcript, "eval")
    assert len(transcripts) == 2
    for tr in transcripts:
        for turn in tr.turns[1:]:  # every critique ends with the check's word on it
            tail = turn.feedback.splitlines()[-1]
            assert (tail.startswith(("Verdict: ", "The check printed no result"))
                    or tail == "No program to check the answer with."), turn.feedback
