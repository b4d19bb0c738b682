"""What the critic says and what the actor does with it, from evaluation transcripts.

The paper's metrics (``scores.py``) say whether five turns beat one; they do not say why. A
reflection pair gains only when the critic is right more often than not and the actor's next
answer depends on what it said: kept after a "correct", worked again after a "wrong". These
figures read both off the same transcripts, per critiqued turn (turn i's feedback judges turn
i-1's answer; a turn carried by ``stop_on_approval`` counts as a critique and no change):

- ``verdict_rate``: share of critiques that end in a readable ``Verdict:`` line;
- ``verdict_accuracy``: of those, the share that agree with the ground truth about the answer
  judged, with the two ways to be wrong counted apart (a right answer called "wrong", a wrong
  one called "correct");
- ``actor_changed_after``: for each verdict ("correct", "wrong", none), how many critiques gave
  it, after how many the actor's extracted answer changed, and that share.

Counts sit beside the shares so that a reader (``agora results``) can put intervals on them.
"""

from __future__ import annotations

import itertools

from agora.reflection.records import Transcript, Turn

VERDICT_KINDS = ("correct", "wrong", "none")


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def critic_effects(transcripts: list[Transcript]) -> dict[str, object]:
    """The module docstring's figures over every critiqued turn of ``transcripts``."""
    critiqued: list[tuple[Turn, Turn]] = [
        (before, after) for t in transcripts for before, after in itertools.pairwise(t.turns)
        if after.feedback is not None]
    judged = [(b, a) for b, a in critiqued if a.verdict is not None]
    agree = sum(a.verdict == ("correct" if b.correct else "wrong") for b, a in judged)
    right_answers = [a for b, a in critiqued if b.correct]
    wrong_answers = [a for b, a in critiqued if not b.correct]
    changed_after: dict[str, dict[str, object]] = {}
    for kind in VERDICT_KINDS:
        given = [(b, a) for b, a in critiqued if (a.verdict or "none") == kind]
        changed = sum(not a.carried and a.extracted != b.extracted for b, a in given)
        changed_after[kind] = {"critiques": len(given), "changed": changed,
                               "rate": _share(changed, len(given))}
    return {
        "critiques": len(critiqued),
        "verdicts": len(judged),
        "verdicts_right": agree,
        "verdict_rate": _share(len(judged), len(critiqued)),
        "verdict_accuracy": _share(agree, len(judged)),
        "right_called_wrong": {"count": sum(a.verdict == "wrong" for a in right_answers),
                               "of": len(right_answers)},
        "wrong_called_correct": {"count": sum(a.verdict == "correct" for a in wrong_answers),
                                 "of": len(wrong_answers)},
        "actor_changed_after": changed_after,
    }
