"""Scripted research agents (context agents for ``environment.name: research``).

They read the env's question (its facts, each with the query that finds its page) and act
through the same text interface as a model, so their searches really run:

* ``oracle_researcher``: searches each fact's query, then writes notes with the sentence of
  each retrieved page that states the fact: the upper bound of the researcher's part.
* ``lazy_researcher``: writes notes at once without searching (the writer gets nothing useful):
  the failure baseline.
* ``copy_writer``: answers with the notes as they are: what a writer adds nothing to scores.
"""

from __future__ import annotations

import random
import re

from agora.envs.research import ResearchEnv
from agora.tools.search import index_for

_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def stating_sentence(text: str, stated: str) -> str | None:
    """The first sentence of ``text`` that holds ``stated`` (the fact's words), if any."""
    return next((s for s in _SENTENCE.split(text) if stated.lower() in s.lower()), None)


class OracleResearcher:
    name = "oracle_researcher"

    def act(self, env: ResearchEnv, rng: random.Random) -> str:
        facts = env.task.facts
        if len(env.searches) < min(len(facts), env.max_searches):
            return f"<tool>search: {facts[len(env.searches)].query}</tool>"
        index = index_for(env.corpus)
        notes = []
        for fact in facts:
            page = index.get(fact.doc).text if fact.doc in env.retrieved else ""
            notes.append(stating_sentence(page, fact.stated) or f"Not found: {fact.question}")
        return "NOTES: " + " ".join(notes)


class LazyResearcher:
    name = "lazy_researcher"

    def act(self, env: ResearchEnv, rng: random.Random) -> str:
        return "NOTES: I did not look anything up."


class CopyWriter:
    name = "copy_writer"

    def act(self, env: ResearchEnv, rng: random.Random) -> str:
        return env.notes or "I do not know."


RESEARCH_AGENTS: dict[str, type] = {
    "oracle_researcher": OracleResearcher,
    "lazy_researcher": LazyResearcher,
    "copy_writer": CopyWriter,
}
# Which seat role each plays, as context_agents.CONTEXT_AGENT_FITS wants it.
RESEARCH_AGENT_FITS: dict[str, tuple[str, str | None]] = {
    "oracle_researcher": ("research", "researcher"),
    "lazy_researcher": ("research", "researcher"),
    "copy_writer": ("research", "writer"),
}
