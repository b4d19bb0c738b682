"""What the actor, the critic and the oracle are shown, and how a critic's verdict is read.

Markov states, as in the paper: a prompt holds the question and only the *latest* answer (and,
for a refinement, the latest feedback), not the conversation so far. The paper found this
generalises to more turns than were trained on, and it keeps prompts bounded: whatever is shown
keeps only its last ``max_chars`` characters (where the final answer is).

The SFT and DPO data pair these very prompts with the oracle's texts, so what the adapters are
trained on is exactly what they are asked at evaluation.
"""

from __future__ import annotations

import re
from typing import Literal

from agora.envs.base import ChatMessage

Verdict = Literal["correct", "wrong"]
CriticCheck = Literal["text", "program"]  # how the critic checks (``critic_check``)

ACTOR_SYSTEM = ("Solve the math problem. Think step by step, briefly. "
                "End with a final line 'Answer: <number>'.")
CRITIC_SYSTEM = ("You check a proposed answer to a math problem. Go through it step by step "
                 "and point out the first mistake, if there is one. End with a final line "
                 "'Verdict: correct' or 'Verdict: wrong'.")
CRITIC_PROGRAM_SYSTEM = ("You check a proposed answer to a math problem. Write a short Python "
                         "program in a ```python block that prints the correct final result; "
                         "it is run and its output compared with the proposed answer.")
REFINE_INSTRUCTION = ("Using the feedback, write an improved solution (keep the answer if it "
                      "was right). End with a final line 'Answer: <number>'.")

# The last "Verdict: ..." line decides; "incorrect" is read as wrong.
_VERDICT = re.compile(r"verdict\s*[:\-]?\s*\**\s*(correct|incorrect|wrong)\b", re.IGNORECASE)


def clip(text: str, max_chars: int) -> str:
    text = text.strip()
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def actor_messages(question: str) -> list[ChatMessage]:
    """The actor's first turn."""
    return [{"role": "system", "content": ACTOR_SYSTEM},
            {"role": "user", "content": f"Question: {question}"}]


def critic_messages(question: str, answer: str, max_chars: int,
                    check: CriticCheck = "text") -> list[ChatMessage]:
    """The critic's turn: the question and the actor's latest answer; ``check: program`` asks
    for a program instead of a written verdict (``program_critic.py``)."""
    system = CRITIC_PROGRAM_SYSTEM if check == "program" else CRITIC_SYSTEM
    return [{"role": "system", "content": system},
            {"role": "user", "content": f"Question: {question}\n\n"
                                        f"Proposed answer:\n{clip(answer, max_chars)}"}]


def refine_messages(question: str, answer: str, feedback: str,
                    max_chars: int) -> list[ChatMessage]:
    """The actor's later turns: its latest answer and the critic's feedback on it."""
    return [{"role": "system", "content": ACTOR_SYSTEM},
            {"role": "user", "content": f"Question: {question}\n\n"
                                        f"Your previous answer:\n{clip(answer, max_chars)}\n\n"
                                        f"Feedback:\n{clip(feedback, max_chars)}\n\n"
                                        f"{REFINE_INSTRUCTION}"}]


def with_reference(messages: list[ChatMessage], reference: str | None) -> list[ChatMessage]:
    """The oracle's version of a prompt: the same, plus the ground truth when it may see it."""
    if reference is None:
        return messages
    *head, user = messages
    note = (f"\n\n(For you only: the reference answer is {reference}. Use it to judge and to "
            "guide, but explain the reasoning; do not just state it.)")
    return [*head, {"role": "user", "content": user["content"] + note}]


def parse_verdict(feedback: str) -> Verdict | None:
    """The critic's verdict from its last 'Verdict: ...' line; None when it gave none."""
    matches = list(_VERDICT.finditer(feedback or ""))
    if not matches:
        return None
    return "correct" if matches[-1].group(1).lower() == "correct" else "wrong"
