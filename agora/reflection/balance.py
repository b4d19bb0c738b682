"""The critic's training data with right and wrong first answers counted equally.

Why: the oracle critiques the *base* actor's answers, and at 135M most of them are wrong (36%
right on 1-digit sums), so a critic trained on them learns that "wrong" is the likely verdict.
Evaluated beside the trained actor, whose answers are mostly right (70%), that prior is the
wrong way round: measured on 2026-12-01, the critic after DPO called 381 of 555 right answers
wrong. Balancing takes the prior out, so what the critic learns is the check itself.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

Item = TypeVar("Item")


def balance_by_answer(items: Sequence[Item], answer_right: Sequence[bool], seed: int) -> list[Item]:
    """All items of the smaller kind (their first answer right, or wrong) and as many of the
    larger kind, drawn with ``seed``; the original order kept. With one kind absent there is
    nothing to balance against and every item is kept."""
    right = [i for i, ok in enumerate(answer_right) if ok]
    wrong = [i for i, ok in enumerate(answer_right) if not ok]
    if not right or not wrong:
        return list(items)
    smaller, larger = sorted((right, wrong), key=len)
    kept = set(smaller) | set(random.Random(seed).sample(larger, len(smaller)))
    return [item for i, item in enumerate(items) if i in kept]
