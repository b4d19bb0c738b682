"""Multi-agent reflection (actor + critic), SFT -> DPO, end to end on tiny-random.

The pipeline runs through the real CLI (``agora reflect oracle/sft/pairs/dpo/eval``), with the
actor and critic served by the session's real vLLM server (adapters loaded at runtime) and the
real TRL trainers. The one stand-in is the oracle: a "stronger model" that is actually right
cannot exist here (tiny-random writes noise), so a small scripted OpenAI-compatible server under
real uvicorn plays it, over HTTP, exactly where a remote model would sit. It reads the ground
truth from the prompt (``oracle.show_reference``) and writes two critiques per answer: one that
leads to the right refinement and one that leads to a wrong one, so every pair rule fires.

Pair rules and metric definitions are unit-tested on hand-made records and transcripts.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import uvicorn
import yaml
from fastapi import FastAPI
from peft import PeftModel
from typer.testing import CliRunner

from agora.algos.compute import resolve
from agora.cli.main import app
from agora.data import Task, load_tasks
from agora.reflection.config import PairsConfig, load_reflection_config
from agora.reflection.critic_effects import critic_effects
from agora.reflection.pairs import build_pairs
from agora.reflection.prompts import parse_verdict
from agora.reflection.records import (
    Critique,
    OracleRow,
    PreferencePair,
    SFTExample,
    Transcript,
    Turn,
    read_rows,
    write_rows,
)
from agora.reflection.reference_oracle import critiques_and_refinements
from agora.reflection.refined_answers import refinement_rows
from agora.reflection.scores import majority_correct, reflection_metrics
from agora.reflection.sft import sft_examples
from agora.reflection.training import META_FILE, load_base
from agora.reflection.verdict_probe import CriticRecord, ProbeRecord, critic_tally, tally
from agora.results.figures import reflect_figures
from agora.rewards.verifiers.math import verify_math
from agora.serving.model_folders import TINY_RANDOM, resolve_model

ORACLE_PORT = 8341  # this test's port range is 8340-8359
TASK = {"source": "reasoning_gym", "name": "basic_arithmetic", "size": 6, "test_size": 3,
        "seed": 3, "config": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2,
                              "operators": ["+", "-"], "allow_parentheses": False,
                              "allow_negation": False}}
# The tiny-random policy the vLLM fixture serves, sampled at temperature 1 (noise either way).
TINY_POLICY = {"model": TINY_RANDOM, "max_model_len": 512, "max_lora_rank": 16, "dtype": "float32"}
TINY_SAMPLING = {"temperature": 1.0, "max_tokens": 16, "stop": []}
runner = CliRunner()


def reflect(*args: object, code: int = 0) -> str:
    started = time.monotonic()
    result = runner.invoke(app, ["reflect", *(str(a) for a in args)])
    print(f"agora reflect {args[0]}: {time.monotonic() - started:.1f} s")  # shown with -s
    assert result.exit_code == code, result.output
    return result.output


# --- metric definitions on hand-made transcripts ------------------------------------------


def transcript(task_id: str, answers: list[tuple[str | None, bool]]) -> Transcript:
    turns = [Turn(answer=f"Answer: {a}" if a else "no idea", extracted=a, correct=right)
             for a, right in answers]
    return Transcript(task_id=task_id, question="q", reference="7", turns=turns)


def test_metrics_follow_the_papers_definitions() -> None:
    a = transcript("a", [("5", False), ("7", True), ("7", True), ("8", False), ("7", True)])
    # 4 and 5 tie at two votes each: the one given latest (5, wrong) wins the vote
    b = transcript("b", [("3", True), ("4", False), ("4", False), ("5", False), ("5", False)])
    c = transcript("c", [(None, False), (None, False), ("2", False), (None, False),
                         (None, False)])
    # 1 (wrong) and 2 (right) tie at one vote; unparsable answers do not vote; 2 is later
    d = transcript("d", [("1", False), ("2", True), (None, False), (None, False),
                         (None, False)])
    assert [majority_correct(t, 5) for t in (a, b, c, d)] == [True, False, False, True]
    assert majority_correct(transcript("e", [(None, False)] * 5), 5) is False
    m = reflection_metrics([a, b, c, d], turns=5).as_dict()
    assert m["pass1@turn1"] == 0.25  # only b's first answer is right
    assert m["maj1@turn5"] == 0.5  # a, d
    assert m["pass1@turn5"] == 0.75  # a, b, d: some answer among the five is right
    assert m["accuracy_by_turn"] == [0.25, 0.5, 0.25, 0.0, 0.25]
    assert (m["wrong_to_right"], m["right_to_wrong"]) == (3, 3)
    lo, hi = m["ci95"]["maj1@turn5"]
    assert lo < 0.5 < hi
    # maj1@turn1 would only see the first answer
    assert majority_correct(a, 1) is False and majority_correct(b, 1) is True
    with pytest.raises(ValueError, match="exactly 5 answers"):
        reflection_metrics([a, transcript("short", [("7", True)])], turns=5)


def test_critic_effects_count_what_the_critic_said_and_what_the_actor_did() -> None:
    """Turn i's feedback judges turn i-1's answer; the actor 'changed' when its extracted
    answer did; a carried turn (stop_on_approval) is a critique and no change."""
    def turn(answer: str | None, right: bool, verdict: str | None = None,
             first: bool = False, carried: bool = False) -> Turn:
        return Turn(answer=f"Answer: {answer}", extracted=answer, correct=right,
                    feedback=None if first else f"Verdict: {verdict}" if verdict else "hmm",
                    verdict=verdict, carried=carried)

    a = Transcript(task_id="a", question="q", reference="7", turns=[
        turn("7", True, first=True),
        turn("8", False, "wrong"),  # a right answer called wrong; the actor changed
        turn("7", True, "wrong"),  # a wrong one called wrong; changed
        turn("7", True, "correct"),  # right, approved, kept
        turn("7", True, None)])  # no verdict; kept
    b = Transcript(task_id="b", question="q", reference="3", turns=[
        turn("5", False, first=True),
        turn("5", False, "correct"),  # a wrong answer approved; kept
        turn("4", False, "correct"),  # approved again; changed anyway
        turn("4", False, "correct", carried=True),
        turn("4", False, "correct", carried=True)])
    got = critic_effects([a, b])
    assert (got["critiques"], got["verdicts"], got["verdicts_right"]) == (8, 7, 2)
    assert got["verdict_rate"] == 7 / 8
    assert got["verdict_accuracy"] == 2 / 7  # only a's 2nd and 3rd verdicts agree
    assert got["right_called_wrong"] == {"count": 1, "of": 3}
    assert got["wrong_called_correct"] == {"count": 4, "of": 5}
    assert got["actor_changed_after"] == {
        "correct": {"critiques": 5, "changed": 1, "rate": 1 / 5},
        "wrong": {"critiques": 2, "changed": 2, "rate": 1.0},
        "none": {"critiques": 1, "changed": 0, "rate": 0.0}}
    assert critic_effects([transcript("c", [("1", True)])])["verdict_rate"] is None


def test_verdict_probe_tallies_each_cell() -> None:
    """The probe's four actor cells (first answer right/wrong x verdict correct/wrong) and its
    two critic cells (right/wrong answer) count their own records only."""
    records = [ProbeRecord(True, "correct", False, True), ProbeRecord(True, "wrong", True, False),
               ProbeRecord(False, "correct", True, True), ProbeRecord(False, "wrong", True, True),
               ProbeRecord(False, "wrong", False, False)]
    cells = tally(records)
    assert cells["right_answer+correct"] == {"n": 1, "changed": 0, "now_right": 1}
    assert cells["right_answer+wrong"] == {"n": 1, "changed": 1, "now_right": 0}
    assert cells["wrong_answer+correct"] == {"n": 1, "changed": 1, "now_right": 1}
    assert cells["wrong_answer+wrong"] == {"n": 2, "changed": 1, "now_right": 1}
    assert tally([])["wrong_answer+wrong"] == {"n": 0, "changed": 0, "now_right": 0}
    judged = critic_tally([CriticRecord(True, "correct"), CriticRecord(True, None),
                           CriticRecord(False, "correct"), CriticRecord(False, "wrong"),
                           CriticRecord(False, "wrong")])
    assert judged == {"right_answer": {"n": 2, "correct": 1, "wrong": 0, "none": 1},
                      "wrong_answer": {"n": 3, "correct": 1, "wrong": 2, "none": 0}}


def test_verdicts_are_read_from_the_last_verdict_line() -> None:
    assert parse_verdict("Step 2 is off.\nVerdict: wrong") == "wrong"
    assert parse_verdict("verdict: Incorrect") == "wrong"
    assert parse_verdict("Verdict: wrong... on reflection\n**Verdict:** correct") == "correct"
    assert parse_verdict("Looks fine to me.") is None


# --- SFT data and pair rules on hand-made oracle records ----------------------------------


def task(task_id: str, answer: str) -> Task:
    return Task(task_id=task_id, kind="math", question=f"What is {task_id}?", answer=answer)


def critique(feedback: str, verdict: str | None, refined: str, right: bool) -> Critique:
    return Critique(feedback=feedback, verdict=verdict, refined=refined,
                    refined_extracted=refined.split()[-1], refined_correct=right)


def row(t: Task, sample: int, initial: str, right: bool, critiques: list[Critique]) -> OracleRow:
    return OracleRow(task=t, sample=sample, initial=initial,
                     initial_extracted=initial.split()[-1], initial_correct=right,
                     critiques=critiques, oracle_model="hand")


def hand_rows() -> list[OracleRow]:
    t1, t2, t3 = task("t1", "7"), task("t2", "9"), task("t3", "4")
    return [
        row(t1, 0, "Answer: 7", True, [
            critique("f1: step 1 is off. Verdict: wrong", "wrong", "Answer: 8", False),
            critique("f2: all good. Verdict: correct", "correct", "Answer: 7", True)]),
        row(t1, 1, "Answer: 6", False, [
            critique("f3: recount. Verdict: wrong", "wrong", "Answer: 7", True),
            critique("f4: fine. Verdict: correct", "correct", "Answer: 6", False)]),
        row(t2, 0, "Answer: 1", False, [
            critique("f5: no. Verdict: wrong", "wrong", "Answer: 9", True),
            critique("f6: hmm", None, "Answer: 2", False)]),
        row(t3, 0, "Answer: 5", False, [  # both refinements wrong: the verdict decides
            critique("f7: Verdict: wrong", "wrong", "Answer: 6", False),
            critique("f8: Verdict: correct", "correct", "Answer: 3", False)]),
    ]


def said(messages: list[dict]) -> str:
    return messages[-1]["content"]


def test_pair_rules() -> None:
    pairs = build_pairs(hand_rows(), max_chars=200)
    got = {(p.role, p.rule, said(p.chosen), said(p.rejected)) for p in pairs["actor"]}
    assert got == {
        ("actor", "right first > wrong first", "Answer: 7", "Answer: 6"),  # t1
        ("actor", "right refinement > wrong first", "Answer: 9", "Answer: 1"),  # t2 borrows
        ("actor", "right answer kept > wrong refinement", "Answer: 7", "Answer: 8"),  # f1
        ("actor", "right refinement > wrong answer kept", "Answer: 7", "Answer: 6"),  # f3
        ("actor", "right refinement > wrong answer kept", "Answer: 9", "Answer: 1"),  # f5
    }
    refine = [p for p in pairs["actor"] if p.kind == "refine"]
    assert all("Feedback:" in said(p.prompt) for p in refine)
    assert "f1: step 1 is off" in said(next(p for p in refine if said(p.rejected) == "Answer: 8")
                                       .prompt)
    critic = {(p.rule, said(p.chosen)[:2], said(p.rejected)[:2]) for p in pairs["critic"]}
    assert critic == {
        ("critique -> right refinement > critique -> wrong refinement", "f2", "f1"),
        ("critique -> right refinement > critique -> wrong refinement", "f3", "f4"),
        ("critique -> right refinement > critique -> wrong refinement", "f5", "f6"),
        ("right verdict > wrong verdict (same refinement outcome)", "f7", "f8"),
    }
    assert all("Proposed answer:" in said(p.prompt) for p in pairs["critic"])
    # same rank for every critique, or a single critique: nothing to prefer
    flat = row(task("t4", "1"), 0, "Answer: 2", False, [
        critique("g1 Verdict: wrong", "wrong", "Answer: 3", False),
        critique("g2 Verdict: wrong", "wrong", "Answer: 5", False)])
    assert build_pairs([flat], 200)["critic"] == []


def test_sft_examples_are_the_ones_the_ground_truth_vouches_for() -> None:
    examples = sft_examples(hand_rows(), max_chars=200)
    actor = {(e.kind, e.task_id, said(e.completion)) for e in examples["actor"]}
    assert actor == {
        ("first_turn", "t1", "Answer: 7"),  # a right first answer
        ("first_turn", "t2", "Answer: 9"),  # no right first answer: the right refinement
        ("refine", "t1", "Answer: 7"),  # after f2 and after f3 (different prompts)
        ("refine", "t2", "Answer: 9"),
    }
    assert sum(e.kind == "refine" for e in examples["actor"]) == 3
    # the critique led to a right refinement and its verdict does not contradict the truth
    assert sorted(said(e.completion)[:2] for e in examples["critic"]) == ["f2", "f3", "f5"]


# --- the scripted oracle (oracle.backend: reference) ----------------------------------------


def arithmetic_task() -> Task:
    return load_tasks(TASK, "train", limit=1)[0]


def scripted_row(t: Task, initial: str, show_result: bool = True,
                 check: str = "text") -> OracleRow:
    """What the oracle stage records for one first answer with the reference backend."""
    first = verify_math(initial, t)
    critiques = []
    for feedback, refined in critiques_and_refinements(t, initial, first.extracted,
                                                       first.correct, samples=2,
                                                       show_result=show_result, check=check):
        checked = verify_math(refined, t)
        critiques.append(Critique(feedback=feedback, verdict=parse_verdict(feedback),
                                  refined=refined, refined_extracted=checked.extracted,
                                  refined_correct=checked.correct))
    return OracleRow(task=t, sample=0, initial=initial, initial_extracted=first.extracted,
                     initial_correct=first.correct, critiques=critiques,
                     oracle_model="reference")


def test_reference_oracle_writes_a_true_and_a_misleading_critique() -> None:
    t = arithmetic_task()
    expression, truth = t.metadata["rg_entry"]["expression"], t.answer
    wrong = str(int(truth) + 3)
    right_row = scripted_row(t, f"{expression} = {truth}\nAnswer: {truth}")
    wrong_row = scripted_row(t, f"{expression} = {wrong}\nAnswer: {wrong}")
    silent_row = scripted_row(t, "I like numbers.")
    assert right_row.initial_correct and not wrong_row.initial_correct
    true_right, misleading_right = right_row.critiques
    # the true critique works the result out, judges by it, and the refinement follows it
    assert true_right.feedback.startswith(f"{expression} = {truth}. ")
    assert true_right.verdict == "correct" and right_row.verdict_right(true_right)
    assert true_right.refined == right_row.initial and true_right.refined_correct
    true_wrong, misleading_wrong = wrong_row.critiques
    assert true_wrong.verdict == "wrong" and wrong_row.verdict_right(true_wrong)
    assert true_wrong.refined_correct and true_wrong.refined_extracted == truth
    assert true_wrong.refined.endswith(f"Answer: {truth}")
    # the misleading one disputes a right answer (a result one off) or approves a wrong one
    slipped = misleading_right.refined_extracted
    assert abs(int(slipped) - int(truth)) == 1
    assert misleading_right.verdict == "wrong" and not misleading_right.refined_correct
    assert misleading_wrong.verdict == "correct" and not misleading_wrong.refined_correct
    assert misleading_wrong.refined == wrong_row.initial
    # nothing to approve without a final number: the true critique only
    assert [c.verdict for c in silent_row.critiques] == ["wrong"]
    assert "gives no final number" in silent_row.critiques[0].feedback
    # a task without an expression states the result; one critique when samples is 1
    bare = Task(task_id="w1", kind="math", question="How many?", answer="12")
    (only,) = critiques_and_refinements(bare, "Answer: 11", "11", False, samples=1)
    assert only == ("The result is 12. The proposed answer 11 is wrong.\nVerdict: wrong",
                    "The result is 12.\nAnswer: 12")


def test_reference_oracle_data_feeds_every_sft_and_pair_rule() -> None:
    t = arithmetic_task()
    expression, truth = t.metadata["rg_entry"]["expression"], t.answer
    right = f"{expression} = {truth}\nAnswer: {truth}"
    wrong = f"{expression} = 0\nAnswer: 0" if truth != "0" else f"{expression} = 1\nAnswer: 1"
    rows = [scripted_row(t, right), scripted_row(t, wrong).model_copy(update={"sample": 1})]
    examples = sft_examples(rows, max_chars=300)
    # critic SFT: the true critiques only, with verdict lines the evaluation can read
    assert [parse_verdict(said(e.completion)) for e in examples["critic"]] == ["correct",
                                                                                "wrong"]
    kinds = sorted(e.kind for e in examples["actor"])
    assert kinds == ["first_turn", "refine", "refine"]
    pairs = build_pairs(rows, max_chars=300)
    rules = sorted(p.rule for p in pairs["actor"])
    assert rules == ["right answer kept > wrong refinement", "right first > wrong first",
                     "right refinement > wrong answer kept"]
    assert len(pairs["critic"]) == 2 and all(
        parse_verdict(said(p.chosen)) != parse_verdict(said(p.rejected)) for p in pairs["critic"])
    # the actor learns to keep a right answer that a misleading critique disputes
    kept = next(p for p in pairs["actor"] if p.rule == "right answer kept > wrong refinement")
    assert said(kept.chosen) == right and "Verdict: wrong" in said(kept.prompt)


def test_verdict_only_critiques_leave_the_working_to_the_actor() -> None:
    """oracle.critique: verdict: the critique judges without stating a result, so the actor's
    refinement after it cannot copy one; the refinement still works the answer out."""
    t = arithmetic_task()
    expression, truth = t.metadata["rg_entry"]["expression"], t.answer
    wrong = str(int(truth) + 3)
    for initial, right in ((f"Answer: {truth}", True), (f"Answer: {wrong}", False)):
        scripted = scripted_row(t, initial, show_result=False)
        true, misleading = scripted.critiques
        for c in scripted.critiques:
            assert expression not in c.feedback and "The result is" not in c.feedback
            assert c.feedback.startswith("The proposed answer ")
        assert scripted.verdict_right(true) and not scripted.verdict_right(misleading)
        assert true.refined_correct
        assert true.refined == (initial if right else f"{expression} = {truth}.\nAnswer: {truth}")
        assert not misleading.refined_correct
    (only,) = critiques_and_refinements(t, f"Answer: {wrong}", wrong, False, samples=1,
                                        show_result=False)
    assert only[0] == f"The proposed answer {wrong} is wrong.\nVerdict: wrong"


def scripted_rows(answers: list[tuple[int, bool]], show_result: bool = True) -> list[OracleRow]:
    """Scripted oracle rows of arithmetic tasks: (task index, first answer right?) each."""
    tasks = load_tasks(TASK, "train")
    rows = []
    for i, right in answers:
        t = tasks[i]
        answer = t.answer if right else str(int(t.answer) + 2)
        rows.append(scripted_row(t, f"Answer: {answer}", show_result)
                    .model_copy(update={"sample": len(rows)}))
    return rows


def test_pair_rules_and_critic_balance_are_config_choices() -> None:
    """pairs.hold_right_answers off drops the pairs that teach the actor to ignore a disputing
    critic; balance_critic keeps as many critic examples and pairs of right first answers as of
    wrong ones (a base actor's are mostly wrong), drawn by the seed, every actor item kept."""
    rows = scripted_rows([(0, True), (1, False), (2, False), (3, False), (4, False)])
    held = build_pairs(rows, 300)
    loose = build_pairs(rows, 300, PairsConfig(hold_right_answers=False))
    kept_rule = "right answer kept > wrong refinement"
    assert sum(p.rule == kept_rule for p in held["actor"]) == 1
    assert [p for p in held["actor"] if p.rule != kept_rule] == loose["actor"]
    assert loose["critic"] == held["critic"] and len(held["critic"]) == 5

    def right_answers(items: list) -> list[bool]:
        by_task = {r.task.task_id: r.initial_correct for r in rows}
        return [by_task[i.task_id] for i in items]

    balanced = build_pairs(rows, 300, balance_critic=True, seed=1)
    assert sorted(right_answers(balanced["critic"])) == [False, True]
    assert balanced["actor"] == held["actor"]
    assert build_pairs(rows, 300, balance_critic=True, seed=1) == balanced  # seeded
    drawn = {tuple(p.task_id for p in build_pairs(rows, 300, balance_critic=True, seed=s)
                   ["critic"]) for s in range(8)}
    assert len(drawn) > 1  # the wrong answer kept is drawn, not always the first
    examples = sft_examples(rows, 300)
    balanced_sft = sft_examples(rows, 300, balance_critic=True, seed=1)
    assert sorted(right_answers(examples["critic"])) == [False] * 4 + [True]
    assert sorted(right_answers(balanced_sft["critic"])) == [False, True]
    assert balanced_sft["actor"] == examples["actor"]
    # one kind only: nothing to balance against, everything kept
    all_wrong = scripted_rows([(1, False), (2, False)])
    assert len(build_pairs(all_wrong, 300, balance_critic=True)["critic"]) == 2


def test_approved_answers_kept_makes_the_refinement_turn_depend_on_the_verdict() -> None:
    """pairs.keep_approved_answers: after a true "correct", the answer kept beats a change to
    a wrong answer of the same problem, so the actor learns to re-answer after a "wrong" (the
    existing rule) and to stand by an approved answer (this one)."""
    rule = "answer kept after a true 'correct' > changed to a wrong answer"
    t5, t6 = task("t5", "3"), task("t6", "2")
    rows = hand_rows() + [
        row(t5, 0, "Answer: 3", True, [  # approved, yet the refinement changed it
            critique("f9: Verdict: correct", "correct", "Answer: 4", False)]),
        row(t6, 0, "Answer: 2", True, [
            critique("f10: Verdict: correct", "correct", "Answer: 2", True)]),
        row(t6, 1, "Answer: 5", False, []),  # the only wrong text of t6: a first answer
    ]

    def approved(pairs: dict) -> set[tuple[str, str, str]]:
        return {(said(p.prompt).split("Feedback:")[-1].split(":")[0].strip(), said(p.chosen),
                 said(p.rejected)) for p in pairs["actor"] if p.rule == rule}

    assert approved(build_pairs(rows, 200)) == set()  # off by default
    held = build_pairs(rows, 200, PairsConfig(keep_approved_answers=True))
    # t1: f2 approved and the refinement kept it: rejected is f1's wrong refinement; t5's own
    # changed refinement is already a "right answer kept" pair; t6 borrows a wrong first answer
    assert approved(held) == {("f2", "Answer: 7", "Answer: 8"), ("f10", "Answer: 2", "Answer: 5")}
    assert all(p.kind == "refine" and "Verdict: correct" in said(p.prompt)
               for p in held["actor"] if p.rule == rule)
    loose = build_pairs(rows, 200, PairsConfig(hold_right_answers=False,
                                               keep_approved_answers=True))
    assert approved(loose) == approved(held) | {("f9", "Answer: 3", "Answer: 4")}
    assert not any(p.rule == "right answer kept > wrong refinement" for p in loose["actor"])
    # the scripted oracle: each right answer's true approval against the misleading slip
    scripted = scripted_rows([(0, True), (1, False), (2, True)], show_result=False)
    pairs = build_pairs(scripted, 300, PairsConfig(hold_right_answers=False,
                                                   keep_approved_answers=True))
    kept = [p for p in pairs["actor"] if p.rule == rule]
    assert [p.task_id for p in kept] == [scripted[0].task.task_id, scripted[2].task.task_id]
    for p, r in zip(kept, (scripted[0], scripted[2]), strict=True):
        assert said(p.chosen) == r.initial and said(p.rejected) == r.critiques[1].refined
        assert not r.critiques[1].refined_correct


def test_critic_judges_the_refinements_as_answers(tmp_path: Path) -> None:
    """critic_judges_refinements: each refinement that is not a first answer becomes an answer
    the critic learns to judge (the short format a trained actor writes), critiqued by the
    script, its correctness the verifier's; the actor's data is unchanged."""
    rows = scripted_rows([(0, True), (1, False), (1, False), (2, False)], show_result=False)
    derived = refinement_rows(rows, samples=2, show_result=False)
    # task 0: the slip after the misleading "wrong" (the true critique kept the answer);
    # task 1: the reference result, once for its two wrong first answers; task 2: the same
    assert [(r.task.task_id, r.initial_correct) for r in derived] == [
        (rows[0].task.task_id, False), (rows[1].task.task_id, True),
        (rows[3].task.task_id, True)]
    firsts = {r.initial for r in rows}
    for r in derived:
        assert "\nAnswer: " in r.initial and r.initial not in firsts
        assert verify_math(r.initial, r.task).correct == r.initial_correct
        true, misleading = r.critiques
        assert r.verdict_right(true) and not r.verdict_right(misleading)
        for c, right in ((true, True), (misleading, False)):  # the recorded outcome is the
            assert c.refined_correct is right                # verifier's
            assert verify_math(c.refined, r.task).correct is right
    plain = sft_examples(rows, 300)
    judged = sft_examples(rows, 300, critic_rows=derived)
    assert judged["actor"] == plain["actor"]
    extra = judged["critic"][len(plain["critic"]):]
    assert [said(e.prompt).split("Proposed answer:")[-1].strip() for e in extra] == [
        r.initial for r in derived]
    assert [said(e.completion).endswith("Verdict: correct") for e in extra] == [
        r.initial_correct for r in derived]
    pairs = build_pairs(rows, 300, critic_rows=derived)
    assert pairs["actor"] == build_pairs(rows, 300)["actor"]
    added = pairs["critic"][len(build_pairs(rows, 300)["critic"]):]
    assert [(said(p.chosen).split("Verdict: ")[-1], said(p.rejected).split("Verdict: ")[-1])
            for p in added] == [("wrong", "correct"), ("correct", "wrong"), ("correct", "wrong")]
    # balance counts the derived answers' own correctness: 1 + 2 right answers, 3 + 1 wrong
    balanced = build_pairs(rows, 300, balance_critic=True, critic_rows=derived)["critic"]
    verdicts = [said(p.chosen).split("Verdict: ")[-1] for p in balanced]
    assert verdicts.count("correct") == verdicts.count("wrong") == 3
    # through the CLI: the pairs stage reads the flag
    cfg_path = write_config(tmp_path / "judged.yaml", name="judged", critic_judges_refinements=True,
                            oracle={"backend": "reference", "samples": 2,
                                    "critique": "verdict"})
    cfg = load_reflection_config(cfg_path)
    write_rows(cfg.run_dir / "oracle.jsonl", rows)
    reflect("pairs", cfg_path)
    written = read_rows(cfg.run_dir / "pairs" / "critic.jsonl", PreferencePair, "pairs")
    assert written == pairs["critic"]


def test_reference_oracle_stage_through_the_cli(tmp_path: Path, vllm_tiny) -> None:
    """`agora reflect oracle` with the scripted oracle: the actor's answers come from vLLM, the
    critiques from the ground truth, and no oracle endpoint is asked (none exists here)."""
    url, _ = vllm_tiny
    path = write_config(
        tmp_path / "reference.yaml", name="reflect-reference",
        policy=TINY_POLICY,
        policy_url=url, train_tasks=4, actor_samples=2, actor={"sampling": TINY_SAMPLING},
        oracle={"backend": "reference", "samples": 2,
                "base_url": "http://127.0.0.1:1/v1"})  # would refuse connections if asked
    out = reflect("oracle", path)
    assert "scripted from the ground truth" in out
    run = load_reflection_config(path).run_dir
    rows = read_rows(run / "oracle.jsonl", OracleRow, "oracle")
    assert len(rows) == 8 and {r.oracle_model for r in rows} == {"reference"}
    for r in rows:
        true, *misleading = r.critiques
        assert true.refined_correct and r.verdict_right(true)
        assert true.feedback.startswith(r.task.metadata["rg_entry"]["expression"])
        has_number = r.initial_correct or r.initial_extracted is not None
        assert len(misleading) == (1 if has_number else 0)
        assert all(not c.refined_correct and not r.verdict_right(c) for c in misleading)
    reflect("pairs", path)
    critic_pairs = read_rows(run / "pairs" / "critic.jsonl", PreferencePair, "pairs")
    assert len(critic_pairs) == sum(len(r.critiques) == 2 for r in rows)
    # the second round needs the SFT adapters, and its pairs need the second round
    missing = reflect("oracle", path, "--stage", "sft", code=2)
    assert "no sft adapter for the actor" in missing and "agora reflect sft" in missing
    assert "not found" in reflect("pairs", path, "--set", "dpo.data_from=sft", code=2)
    assert "reflect oracle" in reflect("pairs", path, "--set", "dpo.data_from=sft", code=2)
    assert "--stage must be one of" in reflect("oracle", path, "--stage", "dpo", code=2)
    # verdict-only critiques, chosen in the config, reach the oracle file
    verdict_path = write_config(
        tmp_path / "verdict.yaml", name="reflect-verdict", policy=TINY_POLICY, policy_url=url,
        train_tasks=2, actor_samples=1, actor={"sampling": TINY_SAMPLING},
        oracle={"backend": "reference", "samples": 2, "critique": "verdict"})
    reflect("oracle", verdict_path)
    verdict_rows = read_rows(load_reflection_config(verdict_path).run_dir / "oracle.jsonl",
                             OracleRow, "oracle")
    assert len(verdict_rows) == 2
    assert all(c.feedback.startswith("The proposed answer") and c.verdict is not None
               for r in verdict_rows for c in r.critiques)


# --- config errors --------------------------------------------------------------------------


def write_config(path: Path, **overrides: object) -> Path:
    data = {"name": "bad", "output_dir": str(path.parent / "runs"),
            "policy": {"model": TINY_RANDOM, "max_lora_rank": 8}, "task": TASK}
    data.update(overrides)
    path.write_text(yaml.safe_dump(data))
    return path


def test_bad_config_names_the_field(tmp_path: Path) -> None:
    out = reflect("sft", write_config(tmp_path / "a.yaml", sft={"learning_rte": 1e-4}), code=2)
    assert "sft.learning_rte" in out and "Extra inputs are not permitted" in out
    out = reflect("oracle", write_config(tmp_path / "b.yaml", actor={"lora_rank": 16}), code=2)
    assert "actor.lora_rank: 16 exceeds policy.max_lora_rank=8" in out
    out = reflect("eval", write_config(tmp_path / "c.yaml", eval={"turns": 0}), code=2)
    assert "eval.turns" in out
    out = reflect("sft", write_config(tmp_path / "c1.yaml", critic={"sft_epochs": 0}), code=2)
    assert "critic.sft_epochs" in out and "greater than 0" in out
    # more held-out problems asked than the test split generates: refused, not silently fewer
    out = reflect("eval", write_config(tmp_path / "c2.yaml", eval={"tasks": 4}), code=2)
    assert "eval.tasks: 4 held-out problems asked, but the test split generates 3" in out
    assert "raise task.test_size to 4" in out
    assert load_reflection_config(write_config(tmp_path / "c3.yaml")).eval.tasks is None
    out = reflect("oracle", write_config(tmp_path / "c4.yaml", oracle={
        "backend": "reference", "samples": 3}), code=2)
    assert "the reference oracle writes at most 2 critiques per answer" in out
    out = reflect("oracle", write_config(tmp_path / "c6.yaml", oracle={"critique": "verdict"}),
                  code=2)
    assert "oracle: critique: 'verdict' shapes the reference backend's critiques" in out
    out = reflect("sft", write_config(tmp_path / "c7.yaml", critic_judges_refinements=True),
                  code=2)
    assert "critic_judges_refinements: only the scripted oracle" in out
    out = reflect("oracle", write_config(tmp_path / "c5.yaml", oracle={"backend": "gpt"}),
                  code=2)
    assert "oracle.backend" in out
    out = reflect("pairs", write_config(tmp_path / "d.yaml"), code=2)
    assert "oracle.jsonl: not found; run `agora reflect oracle CONFIG` first" in out
    out = reflect("eval", write_config(tmp_path / "e.yaml"), "--stage", "rl", code=2)
    assert "--stage must be one of ['base', 'sft', 'dpo']" in out
    # no policy_url: these would start vLLM, so they must fail before it, at once
    out = reflect("eval", write_config(tmp_path / "f.yaml"), "--stage", "sft", code=2)
    assert "no sft adapter for the actor; run `agora reflect sft CONFIG` first" in out
    out = reflect("eval", write_config(tmp_path / "f2.yaml"), "--stage", "base",
                  "--critic-stage", "sft", code=2)
    assert "no sft adapter for the critic; run `agora reflect sft CONFIG` first" in out
    out = reflect("eval", write_config(tmp_path / "f3.yaml"), "--critic-stage", "rl", code=2)
    assert "--critic-stage must be one of ['base', 'sft', 'dpo']" in out
    out = reflect("oracle", write_config(tmp_path / "f4.yaml"), "--stage", "dpo", code=2)
    assert "--stage must be one of ['base', 'sft'], not 'dpo'" in out
    out = reflect("oracle", write_config(tmp_path / "g.yaml", oracle={
        "base_url": "http://127.0.0.1:1/v1", "api_key_env": "AGORA_TEST_UNSET_KEY"}), code=2)
    assert "oracle.api_key_env: environment variable AGORA_TEST_UNSET_KEY is not set" in out
    assert "Traceback" not in out


def test_task_sources_beyond_reasoning_gym(tmp_path: Path) -> None:
    """A GSM8K- or MATH-format JSONL file is a reflection task source (split by
    test_fraction); an NLI file is refused by name."""
    samples = Path(__file__).resolve().parents[2] / "data" / "samples"
    spec = {"source": "jsonl", "path": str(samples / "gsm8k_sample.jsonl"), "format": "gsm8k",
            "test_fraction": 0.25}
    cfg = load_reflection_config(write_config(tmp_path / "j.yaml", task=spec))
    train, test = load_tasks(cfg.task, "train"), load_tasks(cfg.task, "test")
    assert len(test) == 5 and len(train) == 16
    assert not {t.task_id for t in train} & {t.task_id for t in test}
    maya = next(t for t in train + test if t.question.startswith("Maya buys 3 packs"))
    assert maya.answer == "29"  # the text after "####"
    assert verify_math("36 - 7 = 29\nAnswer: 29", maya).correct
    assert not verify_math("36 - 7 = 28\nAnswer: 28", maya).correct
    # the MATH-style split of configs/reflection_math_style.yaml: MATH-500 rows, whole
    # problems held out, answers that are not numbers critiqued by the scripted oracle
    shipped = load_reflection_config(Path(__file__).resolve().parents[2] / "configs" /
                                     "reflection_math_style.yaml")
    assert shipped.task.format == "math" and shipped.oracle.critique == "verdict"
    math_train, math_test = load_tasks(shipped.task, "train"), load_tasks(shipped.task, "test")
    assert len(math_test) >= 200 and len(math_train) >= shipped.train_tasks
    assert not {t.question for t in math_train} & {t.question for t in math_test}
    sum_task = next(t for t in math_train if t.difficulty == 3)
    true, misleading = critiques_and_refinements(sum_task, "Answer: 1+1i", "1+1i", False,
                                                 samples=2)
    assert true[1] == f"The result is {sum_task.answer}.\nAnswer: {sum_task.answer}"
    assert verify_math(true[1], sum_task).correct and not verify_math(misleading[1],
                                                                       sum_task).correct
    nli = {**spec, "path": str(samples / "anli_sample.jsonl"), "format": "anli"}
    out = reflect("pairs", write_config(tmp_path / "k.yaml", task=nli), code=2)
    assert "task.format: reflection is on math problems ('gsm8k' or 'math'), not 'anli'" in out


# --- the whole pipeline on tiny-random ------------------------------------------------------


def scripted_oracle(requests: list[dict]) -> FastAPI:
    """A stronger model stand-in: right when its critique says so, by reading the reference."""
    oracle = FastAPI()

    @oracle.post("/v1/chat/completions")
    async def chat(body: dict) -> dict:
        requests.append(body)
        user = body["messages"][-1]["content"]
        if "Feedback:" in user:  # a refinement: follow the feedback's hint
            hint = re.search(r"Try (-?\d+)", user)
            texts = [f"I fixed the sum.\nAnswer: {hint.group(1) if hint else 0}"]
        else:  # a critique: the even samples hint the right answer, the odd ones a wrong one
            reference = int(re.search(r"reference answer is (-?\d+)", user).group(1))
            texts = [f"The last step is off. Try {reference + i % 2}.\nVerdict: wrong"
                     for i in range(body["n"])]
        return {"choices": [{"index": i, "message": {"role": "assistant", "content": t}}
                            for i, t in enumerate(texts)]}

    return oracle


@pytest.fixture(scope="module")
def oracle_server() -> Iterator[list[dict]]:
    requests: list[dict] = []
    server = uvicorn.Server(uvicorn.Config(scripted_oracle(requests), host="127.0.0.1",
                                           port=ORACLE_PORT, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "scripted oracle did not start"
        time.sleep(0.05)
    try:
        yield requests
    finally:
        server.should_exit = True
        thread.join(10)


def lora_weights(path: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(path / "adapter_model.safetensors"))


def chosen_logprob(adapter: Path, pairs: list[PreferencePair], cfg) -> float:
    """Mean log-probability per token of the pairs' chosen answers under ``adapter``."""
    import torch

    base, tokenizer = load_base(resolve_model(TINY_RANDOM), resolve(cfg.trainer))
    model = PeftModel.from_pretrained(base, str(adapter)).eval()
    total, tokens = 0.0, 0
    for pair in pairs:
        prompt = [dict(m) for m in pair.prompt]
        chosen = [dict(m) for m in pair.chosen]
        start = len(tokenizer.apply_chat_template(prompt, add_generation_prompt=True,
                                                  return_dict=False))
        ids = tokenizer.apply_chat_template(prompt + chosen, return_dict=False)
        tokens_in = torch.tensor([ids], device=model.device)  # on the learner's device
        with torch.no_grad():
            logits = model(tokens_in).logits[0, :-1].float()
        logp = logits.log_softmax(-1).gather(-1, tokens_in[0, 1:, None])[:, 0]
        total += float(logp[start - 1:].sum())
        tokens += len(ids) - start
    return total / tokens


def test_pipeline_end_to_end(tmp_path: Path, vllm_tiny, oracle_server: list[dict]) -> None:
    url, _ = vllm_tiny
    path = write_config(
        tmp_path / "reflect.yaml", name="reflect-tiny",
        policy=TINY_POLICY,
        policy_url=url, train_tasks=6, actor_samples=1, max_shown_chars=150,
        actor={"lora_rank": 4, "lora_alpha": 8, "sampling": TINY_SAMPLING},
        critic={"lora_rank": 4, "lora_alpha": 8, "lora_targets": ["q_proj", "v_proj"],
                "sampling": TINY_SAMPLING},
        oracle={"base_url": f"http://127.0.0.1:{ORACLE_PORT}/v1", "model": "scripted",
                "samples": 2, "show_reference": True, "max_tokens": 64},
        sft={"max_steps": 1, "batch_size": 4, "learning_rate": 1e-3, "max_length": 256,
             "logging_steps": 1, "threads": 1},
        dpo={"max_steps": 1, "batch_size": 2, "learning_rate": 1e-3, "max_length": 256,
             "logging_steps": 1, "threads": 1},
        eval={"tasks": 3, "turns": 5})
    cfg = load_reflection_config(path)
    run = cfg.run_dir

    # (a) oracle data: the actor's answers, two critiques + refinements each, all checked
    reflect("oracle", path)
    rows = read_rows(run / "oracle.jsonl", OracleRow, "oracle")
    assert len(rows) == 6 and len({r.task.task_id for r in rows}) == 6
    for r in rows:
        assert r.task.answer and r.task.metadata["rg_entry"]  # ground truth travels along
        assert [c.refined_correct for c in r.critiques] == [True, False]
        assert [c.verdict for c in r.critiques] == ["wrong", "wrong"]
    critiques = [q for q in oracle_server if "Feedback:" not in q["messages"][-1]["content"]]
    assert len(critiques) == 6 and all(q["n"] == 2 for q in critiques)
    assert all("reference answer is" in q["messages"][-1]["content"] for q in oracle_server)

    # (b) SFT: two adapters on the ground-truth-vouched examples, without the reference
    reflect("sft", path)
    for role, rank in (("actor", 4), ("critic", 4)):
        meta = json.loads((run / "sft" / role / "adapter_config.json").read_text())
        assert meta["r"] == rank and not (run / "sft" / role / "ref").exists()
        data = read_rows(run / "sft" / f"{role}_data.jsonl", SFTExample, "sft")
        assert data and all("reference answer" not in said(e.prompt) for e in data)
    wrong_first = sum(not r.initial_correct for r in rows)
    critic_data = read_rows(run / "sft" / "critic_data.jsonl", SFTExample, "sft")
    assert len(critic_data) == wrong_first  # only the critique that led to a right answer
    # (b1) a role's own SFT epochs: with no max_steps, the critic makes three passes over its
    # examples and the actor the one of sft.epochs (batches of 4)
    actor_data = read_rows(run / "sft" / "actor_data.jsonl", SFTExample, "sft")
    reflect("sft", path, "--set", "sft.max_steps=null", "--set", "critic.sft_epochs=3")
    sft_report = json.loads((run / "reports" / "sft.json").read_text())
    assert sft_report["actor"]["steps"] == math.ceil(len(actor_data) / 4)
    assert sft_report["critic"]["steps"] == 3 * math.ceil(len(critic_data) / 4)
    assert sft_report["critic"]["epochs"] == 3.0 and sft_report["actor"]["epochs"] == 1.0
    meta = json.loads((run / "sft" / "critic" / META_FILE).read_text())
    assert meta["epochs"] == 3.0

    # (b2) dpo.data_from: sft: a second oracle round on the SFT actor's own answers, its
    # adapter served for the round and unloaded after; the pairs are then made of that round
    assert {r.actor_model for r in rows} == {"base"}
    asked = len(oracle_server)
    reflect("oracle", path, "--stage", "sft")
    sft_rows = read_rows(run / "oracle-sft.jsonl", OracleRow, "oracle")
    assert len(sft_rows) == 6 and {r.actor_model for r in sft_rows} == {"reflect-tiny-sft-actor"}
    assert len(oracle_server) - asked == 6 + 2 * 6  # one critique request, two refinements each
    report = json.loads((run / "reports" / "oracle-sft.json").read_text())
    assert report["actor"] == "reflect-tiny-sft-actor" and report["answers"] == 6
    served = [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]
    assert "reflect-tiny-sft-actor" not in served
    reflect("pairs", path, "--set", "dpo.data_from=sft")
    on_policy = build_pairs(sft_rows, cfg.max_shown_chars, cfg.pairs, cfg.balance_critic,
                            cfg.seed)
    for role in ("actor", "critic"):
        assert read_rows(run / "pairs" / f"{role}.jsonl", PreferencePair, "p") == on_policy[role]

    # (c) pairs, from the recorded texts alone
    before = len(oracle_server)
    reflect("pairs", path)
    assert len(oracle_server) == before  # no inference
    actor_pairs = read_rows(run / "pairs" / "actor.jsonl", PreferencePair, "pairs")
    critic_pairs = read_rows(run / "pairs" / "critic.jsonl", PreferencePair, "pairs")
    assert len(critic_pairs) == 6
    assert all(re.search(r"Try (-?\d+)", said(p.chosen)).group(1)
               == next(r.task.answer for r in rows if r.task.task_id == p.task_id)
               for p in critic_pairs)
    assert sum(p.kind == "refine" for p in actor_pairs) == 6  # one contrast per first answer
    assert sum(p.kind == "first_turn" for p in actor_pairs) == wrong_first

    # (d) DPO from SFT: the trained adapter only, and it moved away from SFT
    reflect("dpo", path)
    for role in ("actor", "critic"):
        dpo_dir = run / "dpo" / role
        assert not (dpo_dir / "ref").exists()
        sft_w, dpo_w = lora_weights(run / "sft" / role), lora_weights(dpo_dir)
        assert sft_w.keys() == dpo_w.keys()
        assert any(not sft_w[k].equal(dpo_w[k]) for k in sft_w)
    base, _ = load_base(resolve_model(TINY_RANDOM), resolve(cfg.trainer))  # PEFT loads it
    assert PeftModel.from_pretrained(base, str(run / "dpo" / "critic")).peft_config[
        "default"].target_modules == {"q_proj", "v_proj"}

    # (d2) dpo.sft_weight: the same DPO steps (same pairs, seed and batches) with an SFT term
    # on the chosen answers leave them likelier than DPO alone did.
    steps = ("--set", "dpo.max_steps=3", "--set", "dpo.learning_rate=1e-2")
    reflect("dpo", path, *steps)
    plain = chosen_logprob(run / "dpo" / "actor", actor_pairs, cfg)
    reflect("dpo", path, *steps, "--set", "dpo.sft_weight=10")
    weighted = chosen_logprob(run / "dpo" / "actor", actor_pairs, cfg)
    assert weighted > plain + 0.05, (weighted, plain)  # measured: +0.13 nats per token
    meta = json.loads((run / "dpo" / "actor" / META_FILE).read_text())
    assert meta["sft_weight"] == 10.0

    # (e) evaluation at every stage, adapters served by vLLM and unloaded afterwards
    for stage in ("base", "sft", "dpo"):
        out = reflect("eval", path, "--stage", stage)
        result = json.loads((run / "eval" / f"{stage}.json").read_text())
        assert (f"{stage}: pass1@turn1 {result['pass1@turn1']:.1%}  maj1@turn5 "
                f"{result['maj1@turn5']:.1%}  pass1@turn5 {result['pass1@turn5']:.1%}") in out
        transcripts = read_rows(run / "eval" / f"{stage}.transcripts.jsonl", Transcript, "eval")
        assert result["problems"] == len(transcripts) == 3
        assert all(len(t.turns) == 5 and t.turns[0].feedback is None
                   and all(turn.feedback is not None for turn in t.turns[1:])
                   for t in transcripts)
        again = reflection_metrics(transcripts, 5).as_dict()
        for name in ("pass1@turn1", "maj1@turn5", "pass1@turn5"):
            assert result[name] == again[name]
        assert result["pass1@turn1"] <= result["pass1@turn5"]
        assert result["maj1@turn5"] <= result["pass1@turn5"]
        assert result["critic"] == critic_effects(transcripts)
        assert result["critic"]["critiques"] == 3 * 4
        expected = "base" if stage == "base" else f"reflect-tiny-{stage}-actor"
        assert result["adapters"]["actor"] == expected
    # (e2) the ablation: the DPO actor beside the SFT critic, written under its own name
    out = reflect("eval", path, "--stage", "dpo", "--critic-stage", "sft")
    mixed = json.loads((run / "eval" / "dpo-critic-sft.json").read_text())
    assert mixed["adapters"] == {"actor": "reflect-tiny-dpo-actor",
                                 "critic": "reflect-tiny-sft-critic"}
    assert mixed["stages"] == {"actor": "dpo", "critic": "sft"} and mixed["problems"] == 3
    assert "dpo-critic-sft: pass1@turn1" in out and "eval/dpo-critic-sft.json" in out
    mixed_rows = read_rows(run / "eval" / "dpo-critic-sft.transcripts.jsonl", Transcript, "eval")
    assert mixed["critic"] == critic_effects(mixed_rows)
    assert json.loads((run / "eval" / "dpo.json").read_text())["stages"] == {
        "actor": "dpo", "critic": "dpo"}  # the stage's own evaluation is left as it was
    # (e3) the verdict probe: each first answer refined after either verdict
    out = reflect("probe", path, "--stage", "dpo")
    probe = json.loads((run / "eval" / "dpo.verdicts.json").read_text())
    assert probe["problems"] == 3 and probe["actor"] == "reflect-tiny-dpo-actor"
    cells = probe["cells"]
    assert set(cells) == {"right_answer+correct", "right_answer+wrong",
                          "wrong_answer+correct", "wrong_answer+wrong"}
    answered = 3 - probe["no_final_answer"]
    for verdict in ("correct", "wrong"):  # every answered problem once under each verdict
        assert cells[f"right_answer+{verdict}"]["n"] + cells[f"wrong_answer+{verdict}"]["n"] \
            == answered
    assert "first answers had no final answer" in out and "dpo.verdicts.json" in out
    # the critic judged each problem's right result and the result one off, once each
    assert probe["critic_adapter"] == "reflect-tiny-dpo-critic"
    for kind in ("right_answer", "wrong_answer"):
        cell = probe["critic"][kind]
        assert cell["n"] == 3 and cell["correct"] + cell["wrong"] + cell["none"] == 3
    assert "the critic on the right result and on one off" in out
    served = [m["id"] for m in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]]
    assert not [m for m in served if m.startswith("reflect-tiny-")]
    # `agora results` reads the base and DPO evaluations as before and after
    figures = {f.name: f for f in reflect_figures(run / "eval")}
    base, dpo = (json.loads((run / "eval" / f"{s}.json").read_text()) for s in ("base", "dpo"))
    assert figures["maj1@turn5"].before.value == base["maj1@turn5"]
    assert figures["maj1@turn5"].after.value == dpo["maj1@turn5"]
    assert figures["maj1@turn5"].after.n == 3
    assert figures["wrong->right"].after.value == dpo["wrong_to_right"]
    # the critic's figures exist where it wrote a verdict at all (the tiny model may not)
    critic = dpo["critic"]
    assert ("critic verdicts right" in figures) == (critic["verdicts"] > 0)
    changed = critic["actor_changed_after"]["wrong"]
    assert ("actor changed after 'wrong'" in figures) == (changed["critiques"] > 0)
