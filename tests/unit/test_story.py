"""Collaborative story writing: turns, bad paragraphs, outcome, and judge requests."""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from agora.agents.context import TemplateStoryWriter
from agora.envs.base import TurnBasedEnv
from agora.envs.story import MAX_PARAGRAPH_WORDS, PREMISES, StoryWriting, story_judge_request
from agora.judge.rubric_backend import RubricBackend, weighted_overall
from agora.judge.rubrics import NAMED_RUBRICS
from agora.judge.schemas import ScoreRequest


def play(seed: int, num_agents: int = 3, rounds: int = 2) -> StoryWriting:
    env = StoryWriting(num_agents=num_agents, rounds=rounds)
    env.reset(seed)
    writer, rng = TemplateStoryWriter(), random.Random(seed)
    while not env.done:
        assert env.step(writer.act(env, rng)).legal
    return env


def test_protocol_premise_by_seed_and_turn_order():
    env = StoryWriting(num_agents=2, rounds=2)
    assert isinstance(env, TurnBasedEnv) and env.name == "story" and env.num_seats == 2
    premises = set()
    for seed in range(20):
        env.reset(seed)
        premises.add(env.premise)
        other = StoryWriting(num_agents=2, rounds=2)
        other.reset(seed)
        assert other.premise == env.premise == PREMISES[env.premise_id]
    assert len(premises) > 3
    env.reset(0)
    seats = []
    while not env.done:
        seats.append(env.current_seat)
        env.step(f"Paragraph number {len(seats)}.")
    assert seats == [0, 1, 0, 1] and env.role(1) == "writer2"
    assert StoryWriting(premise="A custom premise.").premise == "A custom premise."
    with pytest.raises(ValueError):
        StoryWriting(num_agents=4)


def test_observation_shows_premise_story_and_whose_turn():
    env = StoryWriting(num_agents=2, rounds=2)
    env.reset(3)
    first = env.observation(0)
    assert first[0]["role"] == "system" and "writer 1 of 2" in first[0]["content"]
    assert env.premise in first[1]["content"] and "nothing yet" in first[1]["content"]
    env.step("The rain had not stopped for three days.")
    user = env.observation(1)[1]["content"]
    assert "The rain had not stopped for three days." in user
    assert "Turn 2 of 4" in user and "writer 2" in user
    for tag in ("x", "y", "z"):
        env.step(" ".join(f"{tag}word{i}" for i in range(100)))  # ~800 characters each
    user = env.observation(0)[1]["content"]
    assert len(env.story) > 2000 and len(user) < 2000  # the story so far is clipped ...
    assert "xword0 " not in user and "zword99" in user and env.premise in user  # ... to its end


def test_scripted_episode_outcome():
    env = play(seed=5)
    assert env.done and not env.step("too late").legal
    out = env.outcome()
    info = json.loads(json.dumps(out.info))
    assert out.reason == "completed" and out.winner is None
    assert info["premise"] == PREMISES[info["premise_id"]]
    assert len(info["paragraphs"]) == 6 and info["turns"] == 6
    assert info["story"] == "\n\n".join(p["text"] for p in info["paragraphs"])
    assert [p["agent"] for p in info["paragraphs"]] == ["writer1", "writer2", "writer3"] * 2
    assert set(info["contributions"]) == {"writer1", "writer2", "writer3"}
    assert all(len(texts) == 2 for texts in info["contributions"].values())
    assert info["illegal"] == {"writer1": 0, "writer2": 0, "writer3": 0}
    # Deterministic by seed.
    assert play(seed=5).outcome().info == out.info


def test_empty_repeated_and_long_paragraphs():
    env = StoryWriting(num_agents=2, rounds=3)
    env.reset(1)
    empty = env.step("   \n ")
    assert not empty.legal and not empty.done and empty.reason == "empty paragraph"
    assert env.current_seat == 1  # the turn passes, nothing is added
    assert env.step("The keeper climbed the stairs.").legal
    repeat = env.step("the keeper  climbed the stairs.")
    assert not repeat.legal and "repeats" in repeat.reason
    assert not env.step(env.premise).legal  # writer2
    long = env.step("word " * (MAX_PARAGRAPH_WORDS + 50))  # writer1
    assert long.legal
    assert not env.step("").legal  # writer2
    assert env.done
    info = env.outcome().info
    assert info["illegal"] == {"writer1": 2, "writer2": 2}
    assert info["clipped"] == {"writer1": 1, "writer2": 0}
    assert [m["reason"] for m in info["illegal_moves"]] == [
        "empty paragraph",
        "repeats the premise or an earlier paragraph",
        "repeats the premise or an earlier paragraph",
        "empty paragraph",
    ]
    assert info["contributions"] == {
        "writer1": [" ".join(["word"] * MAX_PARAGRAPH_WORDS)],
        "writer2": ["The keeper climbed the stairs."],
    }


def test_judge_requests_validate_and_score_with_the_rubric_backend():
    info = play(seed=2).outcome().info
    reqs = story_judge_request(info)
    assert set(reqs) == {"story", "agents"}
    assert set(reqs["agents"]) == {"writer1", "writer2", "writer3"}
    story = ScoreRequest.model_validate(reqs["story"])
    assert story.response == info["story"] and info["premise"] in story.context
    assert story.rubric == "story"
    w1 = reqs["agents"]["writer1"]
    assert w1["response"] == "\n\n".join(info["contributions"]["writer1"])
    # A writer is judged against the premise and the others' paragraphs, not its own.
    assert info["contributions"]["writer2"][0] in w1["context"]
    assert info["contributions"]["writer1"][0] not in w1["context"]

    backend, rubric = RubricBackend(), NAMED_RUBRICS["story"]
    for body in [reqs["story"], *reqs["agents"].values()]:
        _, scores = asyncio.run(backend.score(body["context"], body["response"], rubric))
        overall = weighted_overall(rubric, scores)
        assert overall is not None and rubric.scale_min < overall <= rubric.scale_max
        assert scores["length"] == rubric.scale_max  # template paragraphs are 30+ words

    custom = story_judge_request(info, rubric_name="helpfulness", backend="rubric")
    assert custom["story"]["rubric"] == "helpfulness" and custom["story"]["backend"] == "rubric"


def test_judge_request_clips_huge_stories():
    info = {
        "premise": "p",
        "story": "word " * 10_000,
        "paragraphs": [{"agent": "writer1", "text": "word " * 10_000}],
        "contributions": {"writer1": ["word " * 10_000], "writer2": []},
    }
    reqs = story_judge_request(info)
    ScoreRequest.model_validate(reqs["story"])
    assert reqs["agents"]["writer2"]["response"] == ""
    assert len(reqs["agents"]["writer2"]["context"]) <= 32_000
