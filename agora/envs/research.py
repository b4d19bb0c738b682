"""Research and synthesis: a researcher searches the help pages, a writer answers from its notes.

Why this env: the knowledge-retrieval challenge of multi-agent RL papers in its smallest honest
form. One agent finds facts (a BM25 search over ``data/corpus``, the support env's pages), the
other turns them into an answer it could not have found itself, and the team is scored on the
answer: the question's exact facts, and the judge's view of its relevance and of its
faithfulness to the pages that were actually retrieved.

Seats (fixed roles): 0 ``researcher``, 1 ``writer``. A question asks for ``facts`` facts of the
corpus, each on its own page (``research_question``: generated from the support env's fact
table with a seeded RNG, so every fact has a page that states it and a query that finds it).

The researcher holds the episode first. Each of its generations either searches
(``<tool>search: words</tool>``, at most ``max_searches`` in all, each returning the
``results`` best pages) or, with no call in it, is its notes for the writer, which ends its
part. A call of another tool, a malformed call or one past the budget is illegal (answered with
an error, counted, never a forfeit); after ``max_searches + 1`` generations the notes are
whatever it last wrote. The writer then answers once: it sees the question and the notes,
never the pages. An empty answer or notes are illegal.

Scoring lives in ``agora.rollout.scoring.score_research``: the outcome's info holds everything
it needs (question, facts with their stated values, retrieved page ids and texts, notes,
answer).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from pydantic import Field

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.spec import EnvOptions, EnvSpec, RubricName
from agora.envs.support_tasks import FACTS, Fact
from agora.tools import format_results, parse_tool_calls
from agora.tools.registry import ToolResult, clip
from agora.tools.search import DEFAULT_CORPUS, index_for

ROLES = ("researcher", "writer")
NOTES_CHARS = 800  # what the writer reads of the notes
PAGE_CHARS = 600  # of each retrieved page, in the judge's faithfulness context
RESULT_CHARS = 400  # of each search result, in the researcher's prompt
_NOTES = re.compile(r"^\s*notes\s*:\s*", re.IGNORECASE)
_ANSWER = re.compile(r"^\s*answer\s*:\s*", re.IGNORECASE)


@dataclass(frozen=True)
class ResearchQuestion:
    question_id: str
    question: str
    facts: tuple[Fact, ...]


def research_question(seed: int, facts: int = 2) -> ResearchQuestion:
    """``facts`` facts of the corpus, each from a different page, asked as one question."""
    rng = random.Random(seed)
    chosen: list[Fact] = []
    pool = list(FACTS.values())
    for fact in rng.sample(pool, len(pool)):
        if all(fact.doc != other.doc for other in chosen):
            chosen.append(fact)
        if len(chosen) == facts:
            break
    parts = " ".join(f.question for f in chosen)
    question = (f"A customer writes: \"{parts}\" Answer all of it in a short paragraph.")
    return ResearchQuestion("+".join(f.fact_id for f in chosen), question, tuple(chosen))


_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
NUMBERS_PER_FACT = 4  # an answer with more figures than this per fact lists, it does not state


def numbers_in(text: str) -> list[float]:
    return [float(m.group().replace(",", "")) for m in _NUMBER.finditer(text)
            if m.group().replace(",", "").lstrip("-")]


def stated_facts(answer: str, facts: list[dict]) -> list[bool]:
    """Per fact of ``info["facts"]``: does the answer state its value? A number counts when
    any figure of the answer is within a cent of it; a text value when its words occur as a
    phrase. An answer carrying more than ``NUMBERS_PER_FACT`` figures per fact states none of
    the numbers (listing every figure of every page is not an answer)."""
    figures = numbers_in(answer)
    flood = len(figures) > NUMBERS_PER_FACT * max(1, len(facts))
    words = " ".join(re.findall(r"[a-z0-9@.]+", answer.lower()))
    out = []
    for fact in facts:
        value = fact["value"]
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(not flood and any(abs(f - float(value)) <= 0.01 for f in figures))
        else:
            want = " ".join(re.findall(r"[a-z0-9@.]+", str(value).lower()))
            out.append(bool(want) and want in words)
    return out


class ResearchEnv:
    """A researcher searches, a writer answers from its notes; see the module doc."""

    name = "research"
    num_seats = len(ROLES)

    def __init__(self, facts: int = 2, max_searches: int = 3, results: int = 2,
                 corpus: str = str(DEFAULT_CORPUS)) -> None:
        self.facts = facts
        self.max_searches = max_searches
        self.results = results
        self.corpus = corpus
        self.reset(0)

    def reset(self, seed: int = 0) -> None:
        self.task = research_question(seed, self.facts)
        self.searches: list[dict[str, object]] = []  # query, page ids, error
        self.retrieved: list[str] = []  # page ids, first retrieval order
        self.exchanges: list[tuple[str, str]] = []  # the researcher's calls and their results
        self.notes = ""
        self.answer = ""
        self.illegal = dict.fromkeys(ROLES, 0)
        self.illegal_moves: list[dict[str, object]] = []
        self.researcher_steps = 0
        self.turn = 0
        self.phase = "research"

    # --- the env interface -------------------------------------------------------------------
    @property
    def current_seat(self) -> int:
        return 0 if self.phase == "research" else 1

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def role(self, seat: int) -> str:
        return ROLES[seat]

    def legal_actions(self) -> list[str]:
        return []  # free text

    def observation(self, seat: int) -> list[ChatMessage]:
        if seat == 0:
            return self._researcher_prompt()
        system = ("You are the writer of a support team. The researcher looked the facts up for "
                  "you; answer the customer from its notes alone, in 1-3 sentences with every "
                  "figure the customer asked for. Reply with the answer only.")
        user = (f"{self.task.question}\n\nThe researcher's notes:\n"
                f"{clip(self.notes, NOTES_CHARS) or '(none)'}\n\nYour answer:")
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _researcher_prompt(self) -> list[ChatMessage]:
        left = self.max_searches - len(self.searches)
        system = ("You are the researcher of a support team. Find the facts the customer's "
                  "question needs in the help pages. Search with <tool>search: a few words"
                  "</tool> (one search per call). When you have them, reply with NOTES: and "
                  "the facts, with their figures, for the writer, who cannot see the pages.")
        messages: list[ChatMessage] = [
            {"role": "system", "content": system},
            {"role": "user", "content": f"{self.task.question}\n\nSearches left: {left}."}]
        for text, feedback in self.exchanges:
            messages.append({"role": "assistant", "content": text})
            messages.append({"role": "user", "content": feedback})
        return messages

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(legal=False, done=True, reason="the episode is over")
        role = ROLES[self.current_seat]
        reason = self._research(action) if role == "researcher" else self._write(action)
        if reason:
            self.illegal[role] += 1
            self.illegal_moves.append({"turn": self.turn, "agent": role, "reason": reason})
        self.turn += 1
        return StepResult(legal=not reason, done=self.done, reason=reason)

    def _research(self, action: str) -> str:
        self.researcher_steps += 1
        parsed = parse_tool_calls(action)
        text = parsed.clean.strip()
        if not parsed.calls:
            self.notes = _NOTES.sub("", text).strip()
            self.phase = "writing"
            return "" if self.notes else "empty notes"
        results: list[ToolResult] = []
        problems: list[str] = []
        for call in parsed.calls:
            if call.malformed:
                result = ToolResult("", f"error: {call.problem}", "malformed")
            elif call.name.lower() != "search":
                result = ToolResult(call.name, f"error: no tool '{call.name}' here; only "
                                    "search", "unknown_tool")
            elif len(self.searches) >= self.max_searches:
                result = ToolResult("search", "error: no searches left; now reply with NOTES:",
                                    "too_many")
            else:
                result = self._search(call.args)
            if result.error:
                problems.append(result.output)
            results.append(result)
        feedback = format_results(results)
        self.exchanges.append((clip(text, 400), feedback))
        if self.researcher_steps > self.max_searches:  # out of turns: its text is the notes
            self.notes = text
            self.phase = "writing"
        return "; ".join(problems)[:300]

    def _search(self, query: str) -> ToolResult:
        hits = index_for(self.corpus).search(query, self.results)
        ids = [h.doc.doc_id for h in hits]
        self.searches.append({"query": clip(query, 200), "pages": ids})
        self.retrieved += [i for i in ids if i not in self.retrieved]
        if not hits:
            return ToolResult("search", "no page matches", None)
        shown = "\n".join(f"[{h.doc.doc_id}] {h.doc.title}: {clip(h.doc.text, RESULT_CHARS)}"
                          for h in hits)
        return ToolResult("search", shown, None)

    def _write(self, action: str) -> str:
        self.answer = _ANSWER.sub("", action.strip()).strip()
        self.phase = "done"
        return "" if self.answer else "empty answer"

    def pages(self) -> dict[str, str]:
        """The retrieved pages' texts (title and text), by id."""
        index = index_for(self.corpus)
        return {i: f"{index.get(i).title}. {index.get(i).text}" for i in self.retrieved}

    def outcome(self) -> Outcome:
        info: dict[str, object] = {
            "question_id": self.task.question_id,
            "question": self.task.question,
            "facts": [{"fact_id": f.fact_id, "page": f.doc, "value": f.value, "stated": f.stated}
                      for f in self.task.facts],
            "searches": list(self.searches),
            "retrieved": list(self.retrieved),
            "pages": {i: clip(t, PAGE_CHARS) for i, t in self.pages().items()},
            "notes": self.notes,
            "answer": self.answer,
            "illegal": dict(self.illegal),
            "illegal_moves": list(self.illegal_moves),
            "turns": self.turn,
        }
        return Outcome(winner=None, draw=False,
                       reason="completed" if self.done else "unfinished", info=info)


class ResearchOptions(EnvOptions):
    """``environment.name: research`` (agora/envs/research.py): a researcher and a writer.

    Both seats get the same reward (the team's answer): ``facts_weight`` x the share of the
    question's facts stated in the answer + (1 - ``facts_weight``) x the mean of the judge's
    0..1 scores of its relevance to the question (rubric ``relevance_rubric``) and of its
    faithfulness to the retrieved pages (``faithfulness_rubric``; nothing retrieved: 0). An
    illegal turn also gets ``environment.illegal_move_penalty``."""

    facts: int = Field(2, ge=1, le=3, description="facts per question, each on its own page")
    max_searches: int = Field(3, ge=1, le=8)
    results: int = Field(2, ge=1, le=5, description="pages per search")
    facts_weight: float = Field(0.5, ge=0.0, le=1.0)
    relevance_rubric: RubricName = "answer_relevance"
    faithfulness_rubric: RubricName = "faithfulness"


def build(section, payload: dict) -> ResearchEnv:
    opts = section.research
    return ResearchEnv(facts=opts.facts, max_searches=opts.max_searches, results=opts.results)


SPEC = EnvSpec(
    "research", seats=(2, 2), build=build, options=ResearchOptions,
    roles=lambda _options: list(ROLES), context_seats=True,
    demonstrators=("oracle_researcher", "copy_writer"),
    verifiers=("judge",), scorer="agora.rollout.scoring:score_research",
    success_metric="solved", evaluation="episodes", judged=True, metrics={
        "facts_found": "research: share of the question's facts stated in the answer",
        "solved": "research: every fact of the question stated in the answer",
        "relevance": "research: judge's 0..1 score of the answer's relevance to the question",
        "faithfulness": "research: judge's 0..1 score of the answer's faithfulness to the "
                        "retrieved pages",
        "pages_found": "research: share of the question's pages the researcher retrieved",
        "searches": "research: searches made",
    },
)
