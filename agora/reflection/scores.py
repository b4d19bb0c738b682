"""The paper's evaluation metrics, computed from episode transcripts.

An episode is one held-out problem: the actor answers (turn 1), then up to four times the
critic gives feedback on the latest answer and the actor refines it, giving five answers
a_1..a_5. Over the problems of the test set:

- ``pass1@turn1`` (p1@t1): the share of problems whose first answer a_1 is right (the actor
  alone, one sample, no feedback).
- ``maj1@turn5`` (m1@t5): the share of problems where the majority answer among a_1..a_5 is
  right: each answer votes for its extracted final answer; unparsable answers do not vote; a
  tie goes to the tied answer given latest (it has had the most feedback). A problem with no
  parsable answer counts as wrong.
- ``pass1@turn5`` (p1@t5): the share of problems where at least one of a_1..a_5 is right (what
  a perfect verifier picking among the five would score: an upper bound of m1@t5).

A right answer is one the task's own verifier accepts (reasoning-gym's scorer, else
math-verify); votes are grouped by the normalised extracted answer string. With
``stop_on_approval`` an approved answer stands for the remaining turns and votes once per turn.
With ``turns: T`` the same definitions hold at turn T (maj1@turnT, pass1@turnT).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from agora.evaluation.stats import wilson
from agora.reflection.records import Transcript


def majority_correct(transcript: Transcript, turns: int) -> bool:
    """Is the majority answer of the first ``turns`` answers right (ties: latest wins)?"""
    counts: dict[str, int] = {}
    last_seen: dict[str, int] = {}
    correct: dict[str, bool] = {}
    for index, turn in enumerate(transcript.turns[:turns]):
        if turn.extracted is None:
            continue
        counts[turn.extracted] = counts.get(turn.extracted, 0) + 1
        last_seen[turn.extracted] = index
        correct[turn.extracted] = turn.correct
    if not counts:
        return False
    winner = max(counts, key=lambda answer: (counts[answer], last_seen[answer]))
    return correct[winner]


@dataclass
class ReflectionMetrics:
    problems: int
    turns: int
    pass1_turn1: float
    maj1_turnk: float
    pass1_turnk: float
    accuracy_by_turn: list[float]
    right_to_wrong: int  # answer changes over consecutive turns, summed over problems
    wrong_to_right: int

    def as_dict(self) -> dict[str, object]:
        k = self.turns
        n = self.problems
        return {
            "problems": n,
            "turns": k,
            "pass1@turn1": self.pass1_turn1,
            f"maj1@turn{k}": self.maj1_turnk,
            f"pass1@turn{k}": self.pass1_turnk,
            "ci95": {
                "pass1@turn1": wilson(round(self.pass1_turn1 * n), n),
                f"maj1@turn{k}": wilson(round(self.maj1_turnk * n), n),
                f"pass1@turn{k}": wilson(round(self.pass1_turnk * n), n),
            },
            "accuracy_by_turn": self.accuracy_by_turn,
            "right_to_wrong": self.right_to_wrong,
            "wrong_to_right": self.wrong_to_right,
        }


def reflection_metrics(transcripts: list[Transcript], turns: int) -> ReflectionMetrics:
    """The module docstring's metrics; every transcript must hold ``turns`` answers."""
    if not transcripts:
        raise ValueError("no transcripts to score")
    short = [t.task_id for t in transcripts if len(t.turns) != turns]
    if short:
        raise ValueError(f"transcripts without exactly {turns} answers: {short[:5]}")
    n = len(transcripts)
    by_turn = [sum(t.turns[i].correct for t in transcripts) / n for i in range(turns)]
    changes = [(a.correct, b.correct) for t in transcripts
               for a, b in itertools.pairwise(t.turns)]
    return ReflectionMetrics(
        problems=n,
        turns=turns,
        pass1_turn1=by_turn[0],
        maj1_turnk=sum(majority_correct(t, turns) for t in transcripts) / n,
        pass1_turnk=sum(any(turn.correct for turn in t.turns) for t in transcripts) / n,
        accuracy_by_turn=by_turn,
        right_to_wrong=sum(a and not b for a, b in changes),
        wrong_to_right=sum(b and not a for a, b in changes),
    )
