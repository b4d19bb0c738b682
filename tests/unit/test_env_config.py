"""Run-config fields of the negotiation, story and code_debug envs, context agents and the
opponent pool: the shipped configs load, and each kind of mistake names its field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from agora.config.base import ConfigError
from agora.config.run import parse_config

ROOT = Path(__file__).resolve().parents[2]
BASE = {
    "models": {"m": {"model": "tiny-random"}},
    "agents": [{"name": "learner", "base": "m"}],
}


def config(environment: dict, context_agents: dict | None = None, **sections) -> dict:
    data = {**copy.deepcopy(BASE), "environment": environment, **sections}
    if context_agents is not None:
        data["context_agents"] = context_agents
    return data


def error(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    return str(info.value)


NEGOTIATION = {"name": "negotiation", "seats": ["learner", "context:partner"]}
PARTNER = {"partner": {"strategy": "fair"}}


@pytest.mark.parametrize("name", ["negotiation", "story", "code_debug"])
def test_shipped_configs_load_with_a_learner_and_scheduled_context_agents(name):
    from agora.config.run import load_config

    cfg = load_config(ROOT / "configs" / f"{name}.yaml")
    assert cfg.environment.name == name
    assert cfg.models[cfg.agent(cfg.learner).base].model == "smollm2-135m"
    [context] = [s for s in cfg.environment.seats if s.startswith("context:")]
    spec = cfg.context_agents[context.removeprefix("context:")]
    schedule = spec.make_schedule()
    assert schedule is not None and len(schedule.names) >= 2  # the partner changes over time
    assert cfg.reward.verifier == {"negotiation": "deal", "story": "judge",
                                   "code_debug": "code_tests"}[name]


def test_env_options_default_and_verifier_follows_the_env():
    cfg = parse_config(config(NEGOTIATION, PARTNER))
    assert cfg.environment.negotiation.max_rounds == 4 and cfg.reward.verifier == "deal"
    assert cfg.environment.options is cfg.environment.negotiation and cfg.learner == "learner"
    assert not hasattr(cfg.environment, "story")  # only its own env's options section
    story = parse_config(config({"name": "story", "seats": ["learner", "learner"]}))
    assert story.environment.story.judge == "score" and story.reward.verifier == "judge"
    code = parse_config(config({"name": "code_debug", "seats": ["learner"],
                                "code_debug": {"mode": "fixer"}}))
    assert code.environment.code_debug.mode == "fixer" and code.reward.verifier == "code_tests"
    # The tictactoe default is unchanged.
    assert parse_config(config({"seats": ["learner", "learner"]})).reward.verifier == \
        "game_outcome"


@pytest.mark.parametrize(("options", "path"), [
    ({"negotiation": {"max_rounds": 0}}, "environment.negotiation.max_rounds"),
    ({"negotiation": {"fairness": -1}}, "environment.negotiation.fairness"),
    ({"negotiation": {"coherence": 11}}, "environment.negotiation.coherence"),
    ({"negotiation": {"rubric": "poetry"}}, "environment.negotiation.rubric: unknown rubric"),
    ({"negotiation": {"max_round": 3}}, "environment.negotiation.max_round: Extra inputs"),
])
def test_negotiation_options_name_the_bad_field(options, path):
    assert path in error(config({**NEGOTIATION, **options}, PARTNER))


@pytest.mark.parametrize(("options", "path"), [
    ({"rounds": 11}, "environment.story.rounds"),
    ({"premise": ""}, "environment.story.premise"),
    ({"judge": "vibes"}, "environment.story.judge"),
    ({"story_weight": 1.5}, "environment.story.story_weight"),
    ({"baseline": "greedy"}, "environment.story.baseline: 'greedy' is not a story context agent"),
    ({"rubric": "nope"}, "environment.story.rubric: unknown rubric"),
])
def test_story_options_name_the_bad_field(options, path):
    assert path in error(config({"name": "story", "seats": ["learner", "learner"],
                                 "story": options}))


@pytest.mark.parametrize(("options", "seats", "message"), [
    ({"mode": "solo"}, ["learner"], "environment.code_debug.mode"),
    ({"problem_id": "nope"}, ["learner", "learner"],
     "environment.code_debug.problem_id: unknown problem 'nope'"),
    ({"cpu_seconds": 0}, ["learner", "learner"], "environment.code_debug.cpu_seconds"),
    ({"wall_seconds": 61}, ["learner", "learner"], "environment.code_debug.wall_seconds"),
    ({"author_plants_bug": "maybe"}, ["learner", "learner"],
     "environment.code_debug.author_plants_bug"),
    ({"mode": "fixer"}, ["learner", "learner"],
     "seats: code_debug (fixer) has 1 seats, got 2"),
])
def test_code_debug_options_name_the_bad_field(options, seats, message):
    assert message in error(
        config({"name": "code_debug", "seats": seats, "code_debug": options}))


def test_seat_counts_and_options_of_another_env():
    assert "seats: negotiation has 2-3 seats, got 1" in error(
        config({"name": "negotiation", "seats": ["learner"]}))
    assert "seats: story has 2-3 seats, got 4" in error(
        config({"name": "story", "seats": ["learner"] * 4}))
    message = error(config({**NEGOTIATION, "story": {"rounds": 2}}, PARTNER))
    assert "environment: story: options of 'story', but environment.name is 'negotiation'" \
        in message


def test_context_seats_must_name_a_fitting_context_agent():
    assert "environment.seats: 'context:partner': no context_agents.partner" in error(
        config(NEGOTIATION))
    assert "context_agents.partner: unknown strategy ['haggler']" in error(
        config(NEGOTIATION, {"partner": {"strategy": "haggler"}}))
    assert "context_agents.partner: 'template_writer' cannot play negotiation" in error(
        config(NEGOTIATION, {"partner": {"cycle": ["fair", "template_writer"], "every": 2}}))
    # code_debug: authors write, fixers fix; the seat decides the role.
    message = error(config({"name": "code_debug", "seats": ["context:a", "learner"]},
                           {"a": {"strategy": "oracle_fixer"}}))
    assert "context_agents.a: 'oracle_fixer' cannot play the author seat of code_debug" in message
    assert "buggy_author" in message
    assert "context agents sit in" in error(
        config({"seats": ["learner", "context:partner"]}, PARTNER))
    assert "context_agents.bad name: names are letters" in error(
        config(NEGOTIATION, {**PARTNER, "bad name": {"strategy": "fair"}}))


@pytest.mark.parametrize(("spec", "message"), [
    ({}, "give exactly one of strategy, cycle (+ every) or schedule (+ period); got none"),
    ({"strategy": "fair", "cycle": ["fair", "greedy"], "every": 1}, "exactly one"),
    ({"cycle": ["fair", "greedy"]}, "cycle and every go together"),
    ({"cycle": ["fair"], "every": 1}, "context_agents.partner.cycle"),
    ({"cycle": ["fair", "greedy"], "every": 0}, "context_agents.partner.every"),
    ({"schedule": [[1, "fair"]]}, "schedule: the first point must start at 0"),
    ({"schedule": [[0, "fair"], [5, "greedy"]], "period": 5}, "period must be after"),
    ({"strategy": "fair", "period": 3}, "period applies to schedule only"),
])
def test_context_agent_forms(spec, message):
    out = error(config(NEGOTIATION, {"partner": spec}))
    assert message in out and "context_agents.partner" in out


def test_schedules_switch_on_the_update_clock():
    cfg = parse_config(config(NEGOTIATION, {"partner": {
        "schedule": [[0, "fair"], [10, "conceder"]], "period": 20}}))
    schedule = cfg.context_agents["partner"].make_schedule()
    assert [schedule.at(t) for t in (0, 9, 10, 19, 20)] == ["fair", "fair", "conceder",
                                                           "conceder", "fair"]
    assert cfg.clock_agent == "learner"


def test_opponents_bots_pool_and_trainable_seats():
    assert "game bots play games only" in error(
        config({**NEGOTIATION, "opponents": {"self": 1, "random": 1}}, PARTNER))
    cfg = parse_config(config({**NEGOTIATION, "opponents": {"self": 1, "pool": 1},
                               "pool": {"snapshot_every": 3}}, PARTNER))
    assert cfg.environment.pool.snapshot_every == 3 and cfg.environment.pool.sampling == "latest"
    for field, bad in (("sampling", "best"), ("snapshot_every", 0), ("max_snapshots", 0),
                       ("latest_prob", 2.0)):
        assert f"environment.pool.{field}" in error(
            config({**NEGOTIATION, "pool": {field: bad}}, PARTNER))
    two = config({"name": "negotiation", "seats": ["learner", "other"],
                  "opponents": {"pool": 1.0}})
    two["agents"].append({"name": "other", "base": "m"})
    assert parse_config(two).learner == "learner"  # a league: both learners' snapshots
    two["agents"][1]["trainable"] = False
    assert parse_config(two).learner == "learner"
    two["agents"][0]["trainable"] = False
    assert "'pool' plays snapshots of the trainable agents" in error(two)
    unseated = config(NEGOTIATION, PARTNER)
    unseated["agents"].append({"name": "idle", "base": "m"})
    assert "agents.idle: trainable but in no seat" in error(unseated)


def test_verifier_must_score_the_env():
    assert "reward.verifier: 'math' does not score a 'story' environment (use judge)" in error(
        config({"name": "story", "seats": ["learner", "learner"]}, reward={"verifier": "math"}))
    assert "reward.verifier: 'deal' does not score a 'tictactoe'" in error(
        config({"seats": ["learner", "learner"]}, reward={"verifier": "deal"}))


def test_json_round_trip_keeps_env_options_and_context_agents():
    """Workers rebuild the config from the payload's JSON."""
    import json

    cfg = parse_config(config({**NEGOTIATION, "negotiation": {"coherence": 0.3}},
                              {"partner": {"cycle": ["fair", "greedy"], "every": 2}}))
    assert parse_config(json.loads(cfg.model_dump_json())) == cfg
