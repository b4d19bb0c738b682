"""NLI verifier: map a free-text answer to entailment / neutral / contradiction, then compare.

Small models rarely answer with the bare label, so the parser accepts the common shapes
("Entails.", "[contradiction]", "Answer: neutral", "**Neutral**") but refuses to guess: a
response that names two different labels counts only if one of them is marked as *the* answer
("answer: X", "[X]", "\\boxed{X}"), and then the last marked one wins (models often discuss the
options before answering). Otherwise it is unparsable, and so wrong: rewarding a hedge that
lists every label would teach the policy to hedge.
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from agora.data.base import NLILabel, TaskError, TaskRef, gold_nli_label

_WORDS: dict[str, NLILabel] = {
    "entailment": "entailment", "entail": "entailment", "entails": "entailment",
    "entailed": "entailment", "entailing": "entailment",
    "neutral": "neutral",
    "contradiction": "contradiction", "contradict": "contradiction",
    "contradicts": "contradiction", "contradicted": "contradiction",
    "contradictory": "contradiction", "contradicting": "contradiction",
}
_LABEL = r"(?P<word>" + "|".join(sorted(_WORDS, key=len, reverse=True)) + r")\b"
_ANY_LABEL = re.compile(r"\b" + _LABEL, re.IGNORECASE)
# Possessive quantifiers: with plain ones a long run of spaces after "answer:" took cubic time.
_MARKED = re.compile(
    r"(?:answer\s*+(?:is|:|=)[\s:\[(*\"'`]*+|\[\s*+|\\boxed\{\s*+)" + _LABEL, re.IGNORECASE
)
# "does not entail", "isn't a contradiction", "no contradiction": a label that is denied is not
# an answer (at most one word between the negation and the label).
_NEGATED = re.compile(r"(?:\bnot|n't|\bno|\bnever|\bneither|\bnor)\s+(?:\w+\s+)?$", re.IGNORECASE)
# "Yes" means entailment only as the whole answer, not inside "yes, but it may not ...".
_YES = re.compile(r"^\W*(?:yes|true)\W*$", re.IGNORECASE)


class NLIVerdict(BaseModel):
    correct: bool
    predicted: NLILabel | None = None
    parsable: bool


def parse_nli(text: str) -> NLILabel | None:
    """The label a response gives, or None if it gives none or is ambiguous."""
    if not isinstance(text, str):
        return None
    marked = list(_MARKED.finditer(text))
    if marked:
        return _WORDS[marked[-1].group("word").lower()]
    mentions = list(_ANY_LABEL.finditer(text))
    stated = {
        _WORDS[m.group("word").lower()] for m in mentions
        if not _NEGATED.search(text[max(0, m.start() - 40):m.start()])
    }
    if len(stated) == 1:
        return stated.pop()
    if not mentions and _YES.match(text):
        return "entailment"
    return None


def verify_nli(response: str, task: TaskRef) -> NLIVerdict:
    """Does the response's label equal the task's? ``TaskError`` only for a bad gold label."""
    try:
        gold = gold_nli_label(task.answer)
    except ValueError as err:
        raise TaskError(f"task 'answer': {err}") from None
    predicted = parse_nli(response)
    return NLIVerdict(correct=predicted == gold, predicted=predicted,
                      parsable=predicted is not None)
