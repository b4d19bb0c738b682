"""Built-in rubrics, referred to by name in requests and run configs.

Every built-in criterion has both a description (for a judge model) and a ``check`` (for the
deterministic rubric backend), so a named rubric works with either backend.
"""

from __future__ import annotations

from agora.judge.schemas import Criterion, Rubric, RubricRef


class UnknownRubric(ValueError):
    pass


NAMED_RUBRICS: dict[str, Rubric] = {
    "helpfulness": Rubric(
        name="helpfulness",
        instructions="Prefer the response that answers the user's request correctly and directly.",
        criteria=[
            Criterion(
                name="relevance",
                description="Addresses what the context asks, using its key terms.",
                check="relevance",
                weight=2.0,
            ),
            Criterion(
                name="length",
                description="Long enough to answer, short enough not to ramble (3-200 words).",
                check="length",
                min_words=3,
                max_words=200,
            ),
            Criterion(
                name="non_repetition",
                description="Does not repeat itself.",
                check="repetition",
            ),
        ],
    ),
    "concise": Rubric(
        name="concise",
        instructions="Prefer the shortest response that still answers.",
        criteria=[
            Criterion(
                name="relevance",
                description="Addresses what the context asks.",
                check="relevance",
            ),
            Criterion(
                name="brevity",
                description="At most 40 words.",
                check="length",
                min_words=1,
                max_words=40,
            ),
        ],
    ),
    # A turn of a conversation (negotiation messages): the coherence part of their reward.
    "dialogue": Rubric(
        name="dialogue",
        instructions="Judge the message as the next turn of the conversation in the context.",
        criteria=[
            Criterion(
                name="relevance",
                description="Talks about what the conversation is about, using its key terms.",
                check="relevance",
                weight=2.0,
            ),
            Criterion(
                name="length",
                description="A message, not a speech: 3-80 words.",
                check="length",
                min_words=3,
                max_words=80,
            ),
            Criterion(
                name="non_repetition",
                description="Does not repeat itself.",
                check="repetition",
            ),
        ],
    ),
    # The research env's two questions of an answer: does it answer the question asked
    # (context = the question), and does it say only what the retrieved pages say (context =
    # those pages)?
    "answer_relevance": Rubric(
        name="answer_relevance",
        instructions="Judge the response as an answer to the customer's question in the "
                     "context.",
        criteria=[
            Criterion(
                name="relevance",
                description="Answers every part of the question, using its key terms.",
                check="relevance",
                weight=2.0,
            ),
            Criterion(
                name="length",
                description="A short answer: 5-120 words.",
                check="length",
                min_words=5,
                max_words=120,
            ),
            Criterion(
                name="non_repetition",
                description="Does not repeat itself.",
                check="repetition",
            ),
        ],
    ),
    "faithfulness": Rubric(
        name="faithfulness",
        instructions="The context holds the pages the answer was researched from. Judge "
                     "whether the response says only what those pages support.",
        criteria=[
            Criterion(
                name="grounding",
                description="Every fact and figure in the response is stated in the pages; "
                            "nothing is invented.",
                check="grounding",
            ),
        ],
    ),
    "story": Rubric(
        name="story",
        instructions="Judge the text as a continuation of a collaborative story.",
        criteria=[
            Criterion(
                name="continuity",
                description="Continues the story so far: same characters, places and events.",
                check="relevance",
                weight=2.0,
            ),
            Criterion(
                name="length",
                description="A paragraph: 30-300 words.",
                check="length",
                min_words=30,
                max_words=300,
            ),
            Criterion(
                name="vocabulary",
                description="Varied, vivid wording.",
                check="distinct_words",
            ),
            Criterion(
                name="non_repetition",
                description="Does not repeat phrases.",
                check="repetition",
            ),
        ],
    ),
}


def resolve_rubric(ref: RubricRef) -> Rubric:
    if isinstance(ref, Rubric):
        return ref
    try:
        return NAMED_RUBRICS[ref]
    except KeyError:
        raise UnknownRubric(
            f"unknown rubric '{ref}'; built-in rubrics: {sorted(NAMED_RUBRICS)} "
            "(or pass a rubric object with criteria)"
        ) from None
