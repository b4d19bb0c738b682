"""The negotiation env: rules, robust parsing, illegal moves, scores, with scripted negotiators."""

from __future__ import annotations

import json
import math
import random

import pytest

from agora.agents.context import make_context_agent
from agora.envs.base import TurnBasedEnv
from agora.envs.negotiation import (
    Negotiation,
    ProposalError,
    find_proposal,
    format_allocation,
    negotiation_scores,
    parse_allocation,
    wants_accept,
)

AGENTS = ["alice", "bob"]
POOL = {"books": 2, "hats": 1, "balls": 3}


def play(names: list[str], seed: int, max_rounds: int = 4) -> Negotiation:
    env = Negotiation(num_agents=len(names), max_rounds=max_rounds)
    env.reset(seed)
    agents = [make_context_agent(n) for n in names]
    rng = random.Random(seed)
    while not env.done:
        result = env.step(agents[env.current_seat].act(env, rng))
        assert result.legal, result
    return env


def fixed_env(num_agents: int = 2) -> Negotiation:
    """An env with a known pool and values, so tests need not depend on the seed's draw."""
    env = Negotiation(num_agents=num_agents, max_rounds=3)
    env.reset(0)
    env.pool = dict(POOL)
    env.values = [{"books": 1, "hats": 4, "balls": 1}, {"books": 3, "hats": 0, "balls": 2},
                  {"books": 0, "hats": 2, "balls": 2}][:num_agents]
    return env


def test_protocol_and_seeded_determinism():
    env = Negotiation()
    assert isinstance(env, TurnBasedEnv) and env.name == "negotiation" and env.num_seats == 2
    other = Negotiation()
    env.reset(11)
    other.reset(11)
    assert (env.pool, env.values) == (other.pool, other.values)
    draws = set()
    for seed in range(10):
        env.reset(seed)
        assert len(env.pool) == 3 and all(1 <= n <= 4 for n in env.pool.values())
        assert all(env.max_value(s) > 0 for s in range(env.num_seats))
        draws.add(json.dumps([env.pool, env.values]))
    assert len(draws) > 5
    assert env.role(0) == "alice" and env.role(1) == "bob"
    with pytest.raises(ValueError):
        Negotiation(num_agents=4)


def test_observation_shows_only_own_values():
    env = fixed_env()
    env.values[1] = {"books": 97, "hats": 98, "balls": 99}
    mine = "\n".join(m["content"] for m in env.observation(0))
    theirs = "\n".join(m["content"] for m in env.observation(1))
    assert "books=1, hats=4, balls=1" in mine and "97" not in mine and "99" not in mine
    assert "books=97, hats=98, balls=99" in theirs
    assert "PROPOSE: alice=" in mine and "ACCEPT" in mine and "Your turn, alice" in mine
    assert env.observation(0)[0]["role"] == "system"


def test_parsing_is_robust_to_case_singulars_and_layout():
    expected = {"alice": {"books": 2, "hats": 0, "balls": 1},
                "bob": {"books": 0, "hats": 1, "balls": 2}}
    texts = [
        "Here is my idea. PROPOSE: alice=books:2,hats:0,balls:1; bob=books:0,hats:1,balls:2",
        "propose: Alice: book 2, ball 1; Bob = hat=1, balls 2. thanks",
        "I think this is fair.\n**PROPOSE:**\nalice=books:2,balls:1\nbob=hats:1,balls:2\nOK?",
        "PROPOSE: alice=books:2 and balls:1 bob=hats:1 and balls:2",
    ]
    for text in texts:
        found = find_proposal(text)
        assert found is not None, text
        assert parse_allocation(found, AGENTS, POOL) == expected, text
    assert parse_allocation(format_allocation(expected), AGENTS, POOL) == expected
    # Agents or items left out get nothing.
    left_out = parse_allocation("bob=balls:3", AGENTS, POOL)
    assert left_out["alice"] == {"books": 0, "hats": 0, "balls": 0}
    assert find_proposal("no proposal here") is None
    assert wants_accept("ACCEPT") and wants_accept("ok, I ACCEPT.") and wants_accept("accept!")
    assert not wants_accept("I would not accept that") and not wants_accept("acceptable?")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("alice=books:lots", "cannot read"),
        ("alice=books:2; bob=books:1", "over-allocates books"),
        ("alice=hats:9", "over-allocates hats"),
        ("alice=swords:1", "unknown item"),
        ("dave=books:1", "unknown agent"),
        ("alice=books:1; alice=hats:1", "listed twice"),
        ("alice=books:1,books:1", "listed twice"),
        ("books 2 for me", "no 'name=item:count'"),
        ("alice=books:" + "9" * 5000, "too large"),
    ],
)
def test_bad_proposals_are_rejected_with_a_reason(text, why):
    with pytest.raises(ProposalError, match=why):
        parse_allocation(text, AGENTS, POOL)


def test_illegal_moves_are_counted_and_the_negotiation_goes_on():
    env = fixed_env()
    bad = env.step("Give me all. PROPOSE: alice=books:5")  # alice over-allocates
    assert not bad.legal and not bad.done and "over-allocates" in bad.reason
    assert env.proposal is None and env.current_seat == 1
    assert not env.step("ACCEPT").legal  # bob: nothing to accept
    assert env.step("PROPOSE: alice=hats:1; bob=books:2,balls:3").legal  # alice
    assert not env.step("PROPOSE: bob=balls:1; carol=hats:1").legal  # bob: no carol here
    standing = env.proposal
    assert not env.step("ACCEPT").legal  # alice accepts her own proposal
    assert env.proposal == standing and not env.done
    info = env.outcome().info
    assert info["illegal"] == {"alice": 2, "bob": 2}
    assert [m["agent"] for m in info["illegal_moves"]] == ["alice", "bob", "bob", "alice"]
    assert [e["kind"] for e in info["transcript"]] == [
        "illegal", "illegal", "propose", "illegal", "illegal"]
    ok = env.step("Fine by me.\nACCEPT")  # bob
    assert ok.legal and ok.done and ok.reason == "deal"


def test_deal_allocation_utilities_and_scores():
    env = fixed_env()
    assert env.step("Hi bob. PROPOSE: alice=hats:1,books:1; bob=books:1,balls:3").legal
    assert env.legal_actions() == ["ACCEPT"]
    assert env.step("Deal.\nACCEPT").done
    out = env.outcome()
    assert out.reason == "deal" and out.winner is None and out.illegal_seat is None
    info = json.loads(json.dumps(out.info))  # what the stream carries
    assert info["deal"] is True and info["proposer"] == "alice"
    assert info["allocation"]["bob"] == {"books": 1, "hats": 0, "balls": 3}
    # alice: (1*1 + 4) / (2 + 4 + 3) = 5/9; bob: (3 + 6) / (6 + 0 + 6) = 9/12.
    assert info["value"] == {"alice": 5, "bob": 9}
    assert info["utility"] == pytest.approx({"alice": 5 / 9, "bob": 0.75})
    assert [e["agent"] for e in info["transcript"]] == ["alice", "bob"]
    assert info["transcript"][1]["text"] == "Deal.\nACCEPT"
    scores = negotiation_scores(info)
    assert scores["deal"] == 1.0
    assert scores["nash"] == pytest.approx(5 / 9 * 0.75)
    assert scores["min_utility"] == pytest.approx(5 / 9)
    assert scores["welfare"] == pytest.approx((5 / 9 + 0.75) / 2)
    assert scores["illegal"] == {"alice": 0, "bob": 0}
    assert not env.step("late").legal


def test_three_agents_need_every_other_agent_to_accept():
    env = fixed_env(3)
    env.step("PROPOSE: alice=hats:1; bob=books:2; carol=balls:3")
    env.step("ACCEPT")  # bob
    assert not env.done and env.accepted == {0, 1}
    env.step("PROPOSE: alice=hats:1; bob=books:2,balls:1; carol=balls:2")  # carol counters
    assert env.accepted == {2} and env.proposer == 2  # a new proposal resets acceptances
    env.step("ACCEPT")  # alice
    assert not env.done
    env.step("ACCEPT")  # bob
    assert env.done and env.outcome().info["allocation"]["carol"]["balls"] == 2


def test_scripted_episodes():
    fair = play(["fair", "fair"], seed=0)
    info = fair.outcome().info
    assert info["deal"] and info["turns"] == 2
    for kind in info["pool"]:  # an even split gives out every unit
        assert sum(info["allocation"][a][kind] for a in info["agents"]) == info["pool"][kind]
    assert all(0 < u < 1 for u in info["utility"].values())

    greedy = play(["greedy", "greedy"], seed=0, max_rounds=3)
    out = greedy.outcome()
    assert not out.info["deal"] and out.info["turns"] == 6 and out.info["allocation"] is None
    assert out.reason == "no deal after 3 rounds"
    scores = negotiation_scores(out.info)
    assert scores["nash"] == scores["welfare"] == scores["min_utility"] == 0.0

    # A conceder lowers its bar until the greedy agent's demand is met (or it accepts it).
    conceder = play(["conceder", "greedy"], seed=0).outcome().info
    assert conceder["deal"] and conceder["turns"] > 2
    assert conceder["utility"]["bob"] >= 0.7 - 1e-9

    trio = play(["fair", "fair", "fair"], seed=1).outcome().info
    assert trio["deal"] and trio["turns"] == 3 and len(trio["utility"]) == 3
    assert negotiation_scores(trio)["nash"] == pytest.approx(math.prod(trio["utility"].values()))


def test_scripted_episodes_are_deterministic_by_seed():
    a = play(["conceder", "fair", "greedy"], seed=7).outcome().info
    b = play(["conceder", "fair", "greedy"], seed=7).outcome().info
    assert a == b
