"""Negotiation, story and code_debug episodes through the rollout task body (``play``).

Real parts only: the session Redis, the reward service (its sandbox runs the code) and the judge
service (rubric backend) under uvicorn, and for malformed verdicts a judge on the LLM backend
asking ``tests.integration.test_judge:scripted_model`` (a real OpenAI-compatible server that answers
garbage when the context says ``scenario:malformed``). Every seat is a scripted context agent,
so outcomes are known: the tests check what the scorers make of them, and that a scheduled
seat follows the clock (the clock agent's version in Redis).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator

import pytest
import redis

from agora.config.run import RunConfig
from agora.envs.negotiation import Negotiation
from agora.rollout.records import EpisodeRecord, Turn
from agora.rollout.scoring import JUDGE_MIDPOINT, score_episode
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import episode_payload, play
from agora.stack.procs import free_port
from tests.conftest import uvicorn_service
from tests.stack_helpers import tiny_config


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _config(redis_url: str, reward_url: str, judge_url: str, environment: dict,
            context_agents: dict, penalty: float = -0.5) -> RunConfig:
    return tiny_config(
        agents=[{"name": "learner", "base": "tiny", "trainable": False, "lora_rank": 8,
                 "lora_alpha": 16}],
        environment={"prefill": "", "opponents": {"self": 1.0},
                     "illegal_move_penalty": penalty, **environment},
        context_agents=context_agents,
        services={"reward_port": _port(reward_url), "judge_port": _port(judge_url),
                  "redis_port": _port(redis_url)},
    )


def _play(cfg: RunConfig, redis_url: str, clock: int = 0, index: int = 1
          ) -> tuple[EpisodeRecord, dict[str, str]]:
    """One episode through ``play`` with the clock agent at version ``clock``; the record as
    the stream holds it and the run's rollout counters."""
    run_id = f"env-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    stream.set_version(cfg.clock_agent, clock, "")
    payload = episode_payload(cfg, run_id, index, random.Random(0), redis_url)
    assert play(payload) == "added"
    assert play(payload) == "duplicate"
    [(_, raw)] = client.xrange(stream.keys.stream)
    stats = {k.decode(): v.decode() for k, v in client.hgetall(stream.keys.stats).items()}
    return EpisodeRecord.model_validate_json(raw[b"record"]), stats


# --- negotiation ------------------------------------------------------------------------------

NEGOTIATORS = {"hard": {"strategy": "greedy"},
               "partner": {"schedule": [[0, "fair"], [3, "conceder"]]}}


def test_negotiation_rewards_utility_fairness_and_coherence_and_follow_the_schedule(
        redis_url, reward_url, judge_url):
    env = {"name": "negotiation", "seats": ["context:hard", "context:partner"],
           "negotiation": {"max_rounds": 4, "fairness": 0.5, "coherence": 0.5}}
    cfg = _config(redis_url, reward_url, judge_url, env, NEGOTIATORS)

    # Clock 0: the partner plays "fair"; greedy never accepts an even split of seed 1's pool.
    early, stats = _play(cfg, redis_url, clock=0)
    assert early.seats == ["bot:context:hard/greedy", "bot:context:partner/fair"]
    assert early.info["clock"] == 0 and early.info["reason"] == "no deal after 4 rounds"
    assert early.results == ["no_deal", "no_deal"]
    assert len(early.turns) == 8 and all(t.legal for t in early.turns)
    # No deal: utility and fairness are 0, only the judge's coherence part pays (0..0.5).
    for turn in early.turns:
        assert 0.0 < turn.reward <= 0.5
    assert early.info["judge"] == {"requests": 8, "malformed": 0, "position_bias": 0}
    assert stats["judge_requests"] == "8" and stats["judge_malformed"] == "0"

    # Clock 3: the partner has switched to "conceder", and they strike a deal.
    late, _ = _play(cfg, redis_url, clock=3)
    assert late.seats[1] == "bot:context:partner/conceder" and late.info["clock"] == 3
    assert late.results == ["deal", "deal"]
    info = late.info
    # The utilities, recomputed here from the allocation and the private values.
    utility = {}
    for role in info["agents"]:
        share = info["allocation"][role]
        got = sum(share[k] * v for k, v in info["values"][role].items())
        utility[role] = got / sum(info["pool"][k] * v for k, v in info["values"][role].items())
    nash = utility["alice"] * utility["bob"]
    assert info["negotiation"]["nash"] == pytest.approx(nash) and nash > 0.5
    for turn in late.turns:
        role = info["agents"][turn.seat]
        base = utility[role] + 0.5 * nash
        assert base < turn.reward <= base + 0.5  # + 0.5 x coherence in (0, 1]
    hard = late.seats[0]
    assert late.info["metrics"][hard]["deal_rate"] == 1.0
    assert late.info["metrics"][hard]["utility"] == pytest.approx(utility["alice"])
    assert late.reward_parts[hard].verifier == pytest.approx(utility["alice"])
    assert late.rewards[hard] == pytest.approx(
        sum(t.reward for t in late.turns if t.seat == 0) / sum(t.seat == 0 for t in late.turns))


def test_illegal_negotiation_turns_get_the_penalty_and_are_counted(
        redis_url, reward_url, judge_url):
    env = {"name": "negotiation", "seats": ["context:hard", "context:partner"],
           "negotiation": {"max_rounds": 2}}
    cfg = _config(redis_url, reward_url, judge_url, env, NEGOTIATORS, penalty=-0.25)
    game = Negotiation(2, max_rounds=2)
    game.reset(5)
    kinds = list(game.pool)
    texts = [f"PROPOSE: alice={kinds[0]}:{game.pool[kinds[0]] + 3}",  # over-allocates
             "ACCEPT",  # nothing standing to accept
             f"PROPOSE: alice={kinds[0]}:1; bob={kinds[1]}:1",
             "ACCEPT"]
    turns = []
    for i, text in enumerate(texts):
        legal = game.step(text).legal
        turns.append(Turn(seat=i % 2, agent=["learner", "bob-llm"][i % 2], text=text, legal=legal))
    outcome = game.outcome()
    record = EpisodeRecord(run_id="r", episode_id="e", env="negotiation", seed=5,
                           seats=["learner", "bob-llm"], turns=turns,
                           info={"reason": outcome.reason, **outcome.info})
    assert score_episode(cfg, record)
    assert [t.legal for t in record.turns] == [False, False, True, True]
    assert record.results == ["deal", "deal"]
    utility = record.info["negotiation"]["utility"]
    assert [t.reward for t in record.turns] == pytest.approx(
        [utility["alice"] - 0.25, utility["bob"] - 0.25, utility["alice"], utility["bob"]])
    assert record.info["negotiation"]["illegal"] == {"alice": 1, "bob": 1}
    # Coherence 0: no judge calls.
    assert record.info["judge"] == {"requests": 0, "malformed": 0, "position_bias": 0}


# --- story ------------------------------------------------------------------------------------

WRITERS = {"lead": {"strategy": "template_writer"},
           "second": {"cycle": ["short_writer", "template_writer"], "every": 1}}


def test_story_rewards_come_from_the_judge_and_the_weak_writer_scores_lower(
        redis_url, reward_url, judge_url):
    env = {"name": "story", "seats": ["context:lead", "context:second"],
           "story": {"rounds": 2, "judge": "both", "story_weight": 0.5}}
    cfg = _config(redis_url, reward_url, judge_url, env, WRITERS)
    record, stats = _play(cfg, redis_url, clock=0)
    lead, second = record.seats
    assert second == "bot:context:second/short_writer"
    assert record.results == ["completed", "completed"] and len(record.turns) == 4
    # 1 whole-story score + 1 per writer + 1 pairwise per turn, none malformed.
    assert record.info["judge"] == {"requests": 1 + 2 + 4, "malformed": 0,
                                    "position_bias": 0}
    assert stats["judge_requests"] == "7"
    metrics = record.info["metrics"]
    # One short sentence per turn misses the rubric's 30-300 words: lower score, and the
    # judge prefers the baseline (template) paragraph to it.
    assert metrics[second]["judge_score"] < metrics[lead]["judge_score"]
    assert metrics[second]["preference"] < min(0.5, metrics[lead]["preference"])
    scores = record.info["story_scores"]
    for index, turn in enumerate(record.turns):
        own = scores["own"][str(turn.seat)]
        expected = 0.5 * (0.5 * own + 0.5 * scores["story"]) + 0.5 * scores["preference"][
            str(index)]
        assert turn.reward == pytest.approx(expected)
    assert 0.0 < scores["story"] < 1.0

    # One update later the second seat writes template paragraphs too: its score catches up.
    later, _ = _play(cfg, redis_url, clock=1)
    assert later.seats[1] == "bot:context:second/template_writer"
    assert later.info["metrics"][later.seats[1]]["judge_score"] > metrics[second]["judge_score"]


@pytest.fixture(scope="module")
def garbage_judge_url(logs_dir, redis_url) -> Iterator[str]:
    """A judge on the LLM backend whose model (the scripted one) answers ``scenario:malformed``
    contexts with text that holds no verdict."""
    model_port, judge_port = free_port(), free_port()
    model = uvicorn_service("scripted-model-env", "tests.integration.test_judge:scripted_model",
                            model_port, logs_dir / "scripted-model-env.log")
    judge = uvicorn_service(
        "judge-llm-env", "services.judge.app:app", judge_port, logs_dir / "judge-llm-env.log",
        {"AGORA_JUDGE_BACKEND": "llm", "AGORA_JUDGE_BASE_URL": f"http://127.0.0.1:{model_port}/v1",
         "AGORA_JUDGE_MODEL": "scripted-judge", "REDIS_URL": redis_url})
    try:
        model.start()
        judge.start()
        model.wait_healthy(60)
        judge.wait_healthy(60)
        yield f"http://127.0.0.1:{judge_port}"
    finally:
        judge.stop()
        model.stop()


def test_malformed_judge_verdicts_score_the_midpoint_and_are_counted(
        redis_url, reward_url, garbage_judge_url):
    env = {"name": "story", "seats": ["context:lead", "context:second"],
           "story": {"rounds": 1, "judge": "both", "premise": "scenario:malformed A lost key."}}
    cfg = _config(redis_url, reward_url, garbage_judge_url, env, WRITERS)
    record, stats = _play(cfg, redis_url)
    assert record.info["judge"] == {"requests": 1 + 2 + 2, "malformed": 5,
                                    "position_bias": 0}
    assert stats["judge_malformed"] == "5"
    assert [t.reward for t in record.turns] == pytest.approx([JUDGE_MIDPOINT] * 2)


def test_position_biased_judge_verdicts_are_ties_and_are_counted(
        redis_url, reward_url, garbage_judge_url):
    """A judge model that always prefers the first slot: each pairwise verdict's two orders
    disagree, so the judge service calls it a tie, and the episode counts it."""
    env = {"name": "story", "seats": ["context:lead", "context:second"],
           "story": {"rounds": 1, "judge": "both", "premise": "scenario:always-a A lost key."}}
    cfg = _config(redis_url, reward_url, garbage_judge_url, env, WRITERS)
    record, stats = _play(cfg, redis_url)
    # One story score, two own-paragraph scores, two preferences over the baseline: both
    # preferences biased (the scores are this script's 0-10 marks on another scale).
    judged = record.info["judge"]
    assert (judged["requests"], judged["position_bias"]) == (5, 2)
    assert stats["judge_position_bias"] == "2"
    assert record.info["story_scores"]["preference"] == {"0": 0.5, "1": 0.5}


# --- code_debug ---------------------------------------------------------------------------------

CODERS = {"author": {"strategy": "buggy_author"},
          "fixer": {"schedule": [[0, "oracle_fixer"], [1, "copy_fixer"]]}}


def test_code_debug_hidden_tests_decide_both_roles(redis_url, reward_url, judge_url):
    env = {"name": "code_debug", "seats": ["context:author", "context:fixer"],
           "code_debug": {"mode": "pair", "problem_id": "sum_evens"}}
    cfg = _config(redis_url, reward_url, judge_url, env, CODERS)

    fixed, stats = _play(cfg, redis_url, clock=0)
    assert fixed.seats[1] == "bot:context:fixer/oracle_fixer"
    scores = fixed.info["code_debug"]
    # The known bug (skips the first number) passes 2 of sum_evens' 4 tests.
    assert scores["author"]["tests_passed"] == 2 and scores["author"]["tests_total"] == 4
    assert scores["fixer"]["passed"] and scores["fixed"]
    assert [t.reward for t in fixed.turns] == [0.5 + 0.5 * 0.5, 1.0]
    assert fixed.results == ["bug_fixed", "passed"]
    assert stats["episodes"] == "1" and stats["judge_requests"] == "0"  # tests, no judge
    assert fixed.info["metrics"][fixed.seats[1]] == {"pass_rate": 1.0, "solved": 1.0}

    copied, _ = _play(cfg, redis_url, clock=1)
    assert copied.seats[1] == "bot:context:fixer/copy_fixer"
    # The copy keeps the bug: the fixer gets the buggy code's pass rate, the author nothing.
    assert [t.reward for t in copied.turns] == [0.0, 0.5]
    assert copied.results == ["not_fixed", "failed"]
    assert copied.info["metrics"][copied.seats[0]]["bug_fixed"] == 0.0


def test_fixer_mode_and_unparsable_code(redis_url, reward_url, judge_url):
    env = {"name": "code_debug", "seats": ["context:solo"],
           "code_debug": {"mode": "fixer", "problem_id": "count_vowels"}}
    cfg = _config(redis_url, reward_url, judge_url, env, {"solo": {"strategy": "oracle_fixer"}},
                  penalty=-0.5)
    record, _ = _play(cfg, redis_url)
    assert [t.role for t in record.turns] == ["fixer"] and record.turns[0].reward == 1.0
    assert record.results == ["passed"]

    # A model answer that does not parse: illegal, fails every test, reward 0 + the penalty.
    # It only ever runs inside the reward service's sandbox.
    record.turns[0] = Turn(seat=0, agent="learner", role="fixer", legal=False,
                           text="```python\ndef count_vowels(s:\n    return 0\n```")
    record.info["fixer_code"] = "def count_vowels(s:\n    return 0"
    assert score_episode(cfg, record)
    assert record.info["code_debug"]["fixer"]["tests_passed"] == 0
    assert record.turns[0].reward == -0.5 and record.results == ["failed"]



# --- research -----------------------------------------------------------------------------------

RESEARCHERS = {"researcher": {"schedule": [[0, "oracle_researcher"], [1, "lazy_researcher"]]},
               "writer": {"strategy": "copy_writer"}}


def test_research_scores_the_teams_facts_relevance_and_faithfulness(redis_url, reward_url,
                                                                   judge_url):
    env = {"name": "research", "seats": ["context:researcher", "context:writer"],
           "research": {"facts": 2, "facts_weight": 0.5}}
    cfg = _config(redis_url, reward_url, judge_url, env, RESEARCHERS)

    found, stats = _play(cfg, redis_url, clock=0)
    assert found.seats == ["bot:context:researcher/oracle_researcher",
                           "bot:context:writer/copy_writer"]
    info = found.info
    assert len(info["searches"]) == 2 and {f["page"] for f in info["facts"]} <= set(
        info["retrieved"])
    # Two judge scores of the answer: relevance to the question, faithfulness to the pages.
    assert info["judge"]["requests"] == 2 and stats["judge_requests"] == "2"
    researcher, writer = (info["metrics"][seat] for seat in found.seats)
    assert researcher["facts_found"] == 1.0 and researcher["solved"] == 1.0
    assert researcher["pages_found"] == 1.0 and researcher["searches"] == 2.0
    assert 0.5 < researcher["faithfulness"] <= 1.0  # the notes are the pages' own sentences
    assert writer == {k: researcher[k] for k in ("facts_found", "solved", "relevance",
                                                 "faithfulness")}
    team = 0.5 * 1.0 + 0.5 * 0.5 * (researcher["relevance"] + researcher["faithfulness"])
    assert info["research_scores"]["team"] == pytest.approx(team)
    # One team reward: every turn of both seats (3 researcher steps, 1 answer) gets it.
    assert [t.reward for t in found.turns] == pytest.approx([team] * 4)

    # One update later the lazy researcher looks nothing up: no page, no fact, no
    # faithfulness (nothing retrieved backs the answer), a lower team reward.
    lazy, _ = _play(cfg, redis_url, clock=1)
    assert lazy.seats[0] == "bot:context:researcher/lazy_researcher"
    metrics = lazy.info["metrics"][lazy.seats[0]]
    assert (metrics["facts_found"], metrics["pages_found"], metrics["faithfulness"]) == (0, 0, 0)
    assert lazy.info["judge"]["requests"] == 1
    assert max(t.reward for t in lazy.turns) < min(t.reward for t in found.turns)
