"""The research env (a researcher searches the help pages, a writer answers from its notes):
questions, the turn rules, illegal steps, the facts check and the scripted agents."""

from __future__ import annotations

import random

import pytest

from agora.agents.context import make_context_agent
from agora.envs.registry import REGISTRY
from agora.envs.research import ResearchEnv, research_question, stated_facts
from agora.judge.rubric_backend import RubricBackend
from agora.judge.rubrics import NAMED_RUBRICS


def play(env: ResearchEnv, researcher: str, writer: str = "copy_writer") -> list[bool]:
    agents = [make_context_agent(researcher), make_context_agent(writer)]
    legal = []
    while not env.done:
        legal.append(env.step(agents[env.current_seat].act(env, random.Random(0))).legal)
    return legal


def test_a_question_asks_for_facts_of_different_pages_and_follows_the_seed():
    for seed in range(40):
        question = research_question(seed, facts=3)
        assert len(question.facts) == 3 and len({f.doc for f in question.facts}) == 3
        for fact in question.facts:
            assert fact.question in question.question
    assert research_question(7) == research_question(7)
    assert len({research_question(s).question_id for s in range(40)}) > 30


def test_the_oracle_researcher_finds_every_page_and_the_copy_writer_states_every_fact():
    for seed in range(10):
        env = ResearchEnv()
        env.reset(seed)
        assert play(env, "oracle_researcher") == [True, True, True, True]
        info = env.outcome().info
        assert {f["page"] for f in info["facts"]} <= set(info["retrieved"])
        assert set(info["pages"]) == set(info["retrieved"])
        assert stated_facts(str(info["answer"]), list(info["facts"])) == [True, True]
        assert [s["query"] for s in info["searches"]] == [f.query for f in env.task.facts]


def test_the_lazy_researcher_leaves_the_writer_nothing():
    env = ResearchEnv()
    env.reset(3)
    assert play(env, "lazy_researcher") == [True, True]
    info = env.outcome().info
    assert info["retrieved"] == [] and info["pages"] == {} and info["searches"] == []
    assert stated_facts(str(info["answer"]), list(info["facts"])) == [False, False]


def test_illegal_research_steps_are_counted_and_the_turns_are_bounded():
    env = ResearchEnv(max_searches=2)
    env.reset(0)
    # A call of a tool that is not there, and an unclosed call: illegal, answered, no search.
    result = env.step("<tool>calculator: 1+1</tool>")
    assert not result.legal and "only search" in result.reason
    assert not env.step("<tool>search: hub price").legal
    assert env.searches == [] and env.current_seat == 0
    # Out of generations (max_searches + 1): its last text is the notes, the writer takes over.
    assert env.step("<tool>search: hub price</tool> <tool>search: cam</tool> <tool>search: x"
                    "</tool>").legal is False  # the third is past the budget of 2
    assert len(env.searches) == 2 and env.current_seat == 1
    assert env.outcome().info["illegal"] == {"researcher": 3, "writer": 0}
    assert not env.step("   ").legal and env.done  # an empty answer
    assert env.outcome().info["illegal"]["writer"] == 1
    assert not env.step("more").legal  # over


def test_notes_end_the_research_and_only_the_notes_reach_the_writer():
    env = ResearchEnv()
    env.reset(0)
    env.step("<tool>search: hub price</tool>")
    assert "<result>" in env.observation(0)[-1]["content"]
    assert env.step("NOTES: The Hub costs $129.").legal and env.current_seat == 1
    writer_view = " ".join(m["content"] for m in env.observation(1))
    assert "The Hub costs $129." in writer_view and "<result>" not in writer_view
    assert not ResearchEnv().step("NOTES:   ").legal  # empty notes


@pytest.mark.parametrize(("answer", "found"), [
    ("The Hub costs $129 and the Cam has a 12 month warranty.", [True, True]),
    ("The Hub costs $1,290.", [False, False]),
    ("Prices: 1 2 3 4 5 6 7 8 9 12 129", [False, False]),  # a flood of figures states none
    ("Write to help@brightwave.example", [False, False]),
])
def test_stated_facts_match_figures_and_phrases(answer, found):
    facts = [{"value": 129, "page": "device-hub"}, {"value": 12, "page": "device-cam"}]
    assert stated_facts(answer, facts) == found


def test_text_facts_match_as_phrases():
    facts = [{"value": "help@brightwave.example", "page": "support-hours"}]
    assert stated_facts("Email help@brightwave.example, any time.", facts) == [True]
    assert stated_facts("Email help at brightwave.", facts) == [False]


def test_the_rubric_judge_scores_grounded_answers_above_invented_ones():
    pages = "Brightwave Hub. The Hub costs $129 and comes with a 24 month warranty."
    backend, rubric = RubricBackend(), NAMED_RUBRICS["faithfulness"]
    grounded = backend.scores(pages, "The Hub costs $129 with a 24 month warranty.", rubric)
    invented = backend.scores(pages, "The Hub ships free by dragon mail tomorrow.", rubric)
    assert grounded["grounding"] > invented["grounding"]


def test_the_spec_fixes_the_roles_and_names_its_scorer():
    spec = REGISTRY["research"]
    assert spec.seat_roles(None) == ["researcher", "writer"]
    assert spec.load_scorer().__name__ == "score_research"
    assert spec.judged and spec.evaluation == "episodes" and spec.success_metric == "solved"
