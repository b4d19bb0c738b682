"""Curriculum over difficulty: the promote/demote rule, what a level changes in each task, the
state in the session's real Redis, the reward service replaying openings, and real episodes on
tiny-random (session vLLM) through the rollout task body, the trainer's report and the progress
view, where a threshold of 0 makes the level rise and the records show it."""

from __future__ import annotations

import json
import random
import re
import uuid

import httpx
import pytest
import redis
from prometheus_client import REGISTRY
from rich.console import Console

from agora.cli.main import progress_table
from agora.config.base import ConfigError
from agora.data import Task
from agora.envs.tictactoe import MARKS, TicTacToe
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import episode_payload, play
from agora.stack.launcher import Stack
from agora.train.curriculum import episode as curriculum_episode
from agora.train.curriculum.controller import LevelState, Rule, observe
from agora.train.curriculum.ladders import (
    GSM_STEP_BOUNDS,
    OpeningEnv,
    build_ladder,
    ladder_problem,
    reasoning_steps,
)
from agora.train.curriculum.openings import OPENING_LEVELS, check_opening, opening, winning_cells
from agora.train.curriculum.store import CurriculumStore
from agora.train.curriculum.tracker import CurriculumTracker, success_of
from agora.train.feed import Collected
from agora.train.trainer import Trainer
from tests.stack_helpers import tiny_config


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _discussion(name: str, size: int = 400, **curriculum) -> dict:
    return {"agents": [{"name": "a", "base": "tiny", "lora_rank": 8}],
            "reward": {"verifier": "math"},
            "environment": {"name": "discussion", "seats": ["a"], "opponents": {"self": 1.0},
                            "task": {"source": "reasoning_gym", "name": name, "size": size}},
            "curriculum": {"enabled": True, **curriculum}}


# --- the rule -------------------------------------------------------------------------------------

def test_controller_promotes_demotes_and_waits_between_changes():
    rule = Rule(window=4, promote_at=0.75, demote_below=0.25, patience=6, top=2)
    state = LevelState(level=0)
    # A full window of successes is not enough before `patience` episodes at the level.
    moves = [observe(state, 1.0, rule) for _ in range(5)]
    assert moves == [0] * 5 and state.level == 0 and state.success_rate == 1.0
    assert observe(state, 1.0, rule) == 1 and state.level == 1
    assert state.window == [] and state.played == 0 and state.changes == 1
    # In the band between the thresholds nothing happens, however long it lasts.
    for success in [1.0, 0.0] * 10:
        assert observe(state, success, rule) == 0
    assert state.level == 1 and state.success_rate == 0.5
    # A collapse demotes: once the window's rate drops below 0.25 (3 zeros of 4).
    moves = [observe(state, 0.0, rule) for _ in range(3)]
    assert moves == [0, 0, -1] and state.level == 0 and state.changes == 2
    # Already at the bottom: failures keep it there; at the top, successes keep it there.
    assert all(observe(state, 0.0, rule) == 0 for _ in range(12)) and state.level == 0
    top = LevelState(level=2)
    assert all(observe(top, 1.0, rule) == 0 for _ in range(12)) and top.level == 2
    # Outcomes are clipped to 0..1 (a reward-like 2.0 cannot outweigh a failure).
    clipped = LevelState(level=1)
    observe(clipped, 2.0, rule)
    assert clipped.window == [1.0]


def test_backoff_makes_each_return_to_a_failed_level_wait_longer():
    """An agent that masters level 0 and fails everything at level 1: with backoff 2 it is
    promoted after 4, 8, 16 episodes at level 0; without backoff it flaps every 4."""

    def promotions(backoff: float, episodes: int) -> list[int]:
        rule = Rule(window=4, promote_at=0.75, demote_below=0.25, patience=4, top=1,
                    backoff=backoff)
        state, played_at_0, out = LevelState(level=0), 0, []
        for _ in range(episodes):
            if state.level == 0:
                played_at_0 += 1
            if observe(state, 1.0 if state.level == 0 else 0.0, rule) > 0:
                out.append(played_at_0)
                played_at_0 = 0
        assert state.demotions.get(1, 0) >= len(out) - 1
        return out

    assert promotions(2.0, 60) == [4, 8, 16]  # each stay at level 1 lasts 4 episodes
    assert promotions(1.0, 60) == [4] * 8


def test_success_of_an_agent_per_kind_of_episode():
    def rec(seats, results, **info):
        return EpisodeRecord(run_id="r", episode_id="e", env="tictactoe", seed=0, seats=seats,
                             results=results, info=info)

    assert success_of(rec(["p", "bot:random"], ["win", "loss"]), "p") == 1.0
    assert success_of(rec(["bot:random", "p"], ["win", "loss"]), "p") == 0.0
    assert success_of(rec(["p", "bot:random"], ["draw", "draw"]), "p") == 0.5
    # Self-play of one policy: playing the game through legally is what counts.
    assert success_of(rec(["p", "p"], ["win", "loss"]), "p") == 1.0
    assert success_of(rec(["p", "p"], ["win", "illegal"]), "p") == 0.0
    # Discussions: the last round's correctness; env metrics: their success value.
    assert success_of(rec(["a", "b"], [], scores=[[0, 0], [1, 0]]), "a") == 1.0
    assert success_of(rec(["a", "b"], [], scores=[[0, 0], [1, 0]]), "b") == 0.0
    assert success_of(rec(["a"], ["x"], metrics={"a": {"task_success": 0.25}}), "a") == 0.25
    assert success_of(rec(["a"], ["win"]), "zed") is None


# --- what a level changes -------------------------------------------------------------------------

def test_tictactoe_openings_are_legal_and_get_harder_level_by_level():
    for level, spec in enumerate(OPENING_LEVELS):
        for mover in (0, 1):
            for seed in range(60):
                cells = opening(level, mover, seed)
                assert cells == opening(level, mover, seed)  # the seed decides
                assert len(cells) == spec.moves[mover]
                game = check_opening(cells, mover)  # legal, not over, `mover` to play
                wins = winning_cells(game.board, MARKS[mover])
                assert bool(wins) == spec.win_in_one
                if wins:  # the win in one really wins
                    game.step(f"[{wins[0]}]")
                    assert game.done and game.outcome().winner == mover
    counts = [max(spec.moves) for spec in OPENING_LEVELS]
    assert counts == sorted(counts, reverse=True) and counts[-1] == 0  # the top: the real game
    # The env the worker plays: reset pre-plays the opening, the wrapped game is the same.
    env = OpeningEnv(TicTacToe(), ["[4]", "[0]"])
    env.reset(7)
    assert env.board[4] == "O" and env.board[0] == "X" and env.current_seat == 0
    assert env.legal_cells() == [1, 2, 3, 5, 6, 7, 8] and env.name == "tictactoe"
    with pytest.raises(ValueError, match="opening move 1"):
        OpeningEnv(TicTacToe(), ["[4]", "[4]"]).reset(0)


def _terms(question: str) -> int:
    return len(re.findall(r"\d+", question))


def test_reasoning_gym_levels_change_the_generated_questions():
    arithmetic = build_ladder(tiny_config(**_discussion("basic_arithmetic")))
    # reasoning-gym's own curriculum for the dataset: terms 2..6, digits 1..4.
    assert arithmetic.size == 5
    assert arithmetic.params(0) == {"min_terms": 2, "max_terms": 2,
                                    "min_digits": 1, "max_digits": 1}
    assert arithmetic.params(4)["max_terms"] == 6 and arithmetic.params(4)["max_digits"] == 4
    tasks = {level: [Task.model_validate(arithmetic.shape({"seed": s}, level)["task"])
                     for s in range(40)] for level in (0, 4)}
    easy, hard = tasks[0], tasks[4]
    assert all(_terms(t.question) == 2 for t in easy)
    assert all(len(n) == 1 for t in easy for n in re.findall(r"\d+", t.question))
    assert sum(map(_terms, (t.question for t in hard))) > 1.5 * sum(
        map(_terms, (t.question for t in easy)))
    assert max(_terms(t.question) for t in hard) >= 5
    # The task carries its level's knobs, so the reward service scores it with them.
    assert easy[0].metadata["rg_config"]["max_terms"] == 2 and easy[0].difficulty == 0
    assert easy[0].task_id.startswith("rg:basic_arithmetic@") and ":train:" in easy[0].task_id

    gsm = build_ladder(tiny_config(**_discussion("gsm_symbolic")))
    assert gsm.size == len(GSM_STEP_BOUNDS)
    steps = {level: [reasoning_steps(Task.model_validate(gsm.shape({"seed": s}, level)["task"]))
                     for s in range(30)] for level in range(gsm.size)}
    for level, bound in enumerate(GSM_STEP_BOUNDS):
        if bound is not None:
            assert max(steps[level]) <= bound
    means = [sum(v) / len(v) for v in steps.values()]
    assert means[0] < means[-1] and max(steps[gsm.size - 1]) > GSM_STEP_BOUNDS[-2]

    custom = build_ladder(tiny_config(**_discussion(
        "basic_arithmetic", knobs=[{"max_terms": 2, "min_terms": 2}, {"min_terms": 5,
                                                                      "max_terms": 5}])))
    assert custom.size == 2
    assert _terms(Task.model_validate(custom.shape({"seed": 1}, 1)["task"]).question) == 5


def test_config_and_launch_checks_name_the_bad_field():
    def error(**overrides) -> str:
        with pytest.raises(ConfigError) as info:
            tiny_config(**overrides)
        return str(info.value)

    assert "curriculum: demote_below (0.9) must not exceed promote_at (0.5)" in error(
        curriculum={"enabled": True, "promote_at": 0.5, "demote_below": 0.9})
    assert "curriculum.window: Input should be greater than or equal to 1" in error(
        curriculum={"window": 0})
    assert "curriculum.levles: Extra inputs are not permitted" in error(
        curriculum={"levles": 3})
    assert "curriculum: start_level: 3 is not below the number of levels (2)" in error(
        curriculum={"levels": 2, "start_level": 3})
    assert "curriculum.knobs: reasoning-gym knobs, but the environment is 'tictactoe'" in error(
        curriculum={"enabled": True, "knobs": [{"max_terms": 2}, {"max_terms": 3}]})
    assert "environment 'negotiation' has no difficulty levels" in error(
        environment={"name": "negotiation", "seats": ["player", "context:p"],
                     "opponents": {"self": 1.0}},
        context_agents={"p": {"strategy": "fair"}}, curriculum={"enabled": True})
    jsonl = _discussion("x")
    jsonl["environment"]["task"] = {"source": "jsonl", "path": "data/samples/gsm8k_sample.jsonl",
                                    "format": "gsm8k"}
    assert "a discussion on 'jsonl' tasks has no difficulty levels" in error(**jsonl)
    # Disabled, nothing is checked against the environment.
    assert not tiny_config(curriculum={"knobs": [{"a": 1}, {"a": 2}]}).curriculum.enabled
    # What needs the task's ladder is checked before a run starts (agora up's preflight).
    assert ladder_problem(tiny_config(curriculum={"enabled": True, "levels": 6})) == (
        "curriculum.levels: tictactoe has 4 levels, not 6")
    assert ladder_problem(tiny_config(curriculum={"enabled": True, "start_level": 4})) == (
        "curriculum.start_level: tictactoe has levels 0-3, not 4")
    bad_knob = tiny_config(**_discussion("basic_arithmetic", knobs=[{"max_terms": 2},
                                                                   {"max_termz": 3}]))
    assert "max_termz" in ladder_problem(bad_knob)
    assert ladder_problem(tiny_config(curriculum={"enabled": True, "levels": 3})) is None


# --- Redis, the reward service, real episodes -----------------------------------------------------

def _record(episode: str, level: int, result: str, task: str = "tictactoe") -> EpisodeRecord:
    other = "loss" if result == "win" else "win"
    return EpisodeRecord(run_id="r", episode_id=episode, env="tictactoe", seed=0,
                         opponent="random", seats=["p", "bot:random"], results=[result, other],
                         info={"curriculum": {"task": task, "level": level}})


def test_levels_round_trip_through_redis_and_survive_a_trainer_restart(redis_url):
    run_id = f"cur-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    cfg = tiny_config(agents=[{"name": "p", "base": "tiny", "lora_rank": 8}],
                      environment={"seats": ["p", "p"], "opponents": {"random": 1.0}},
                      curriculum={"enabled": True, "window": 3, "promote_at": 0.6,
                                  "demote_below": 0.3, "start_level": 1})
    store = CurriculumStore(client, run_id)
    store.reset("p", "tictactoe", 3)  # left over by an earlier run with this id
    tracker = CurriculumTracker(cfg, client, run_id, resume=False)
    assert store.load("p", "tictactoe", 0) == LevelState(level=1)  # a fresh run starts over
    gauge = {"agent": "p", "task": "tictactoe"}
    assert REGISTRY.get_sample_value("agora_curriculum_level", gauge) == 1.0

    batch = [_record("e1", 1, "win"), _record("e2", 1, "loss"),
             _record("e3", 0, "win"),  # played at another level: not counted
             _record("e4", 1, "win", task="basic_arithmetic")]  # another task: not counted
    assert tracker.observe(batch) == {"p": {"curriculum_level": 1.0, "curriculum_changes": 0.0,
                                            "curriculum_success": 0.5}}
    assert store.load("p", "tictactoe", 0) == LevelState(level=1, window=[1.0, 0.0], played=2)
    # The trainer dies before acking; its successor re-reads e1-e2: they are not counted twice.
    restarted = CurriculumTracker(cfg, client, run_id, resume=True)
    assert restarted.observe(batch)["p"]["curriculum_success"] == 0.5
    stats = restarted.observe([_record("e5", 1, "win")])  # 2 of 3 >= 0.6: promoted
    assert stats["p"]["curriculum_level"] == 2.0 and stats["p"]["curriculum_changes"] == 1.0
    assert REGISTRY.get_sample_value("agora_curriculum_level", gauge) == 2.0
    raw = {k.decode(): v.decode() for k, v in client.hgetall(store.key("p", "tictactoe")).items()}
    assert raw == {"level": "2", "played": "0", "changes": "1"}
    assert store.key("p", "tictactoe") == f"agora:{run_id}:curriculum:p:tictactoe"

    # Workers read the level when they build an episode: an opening of level 2 ("midgame").
    payload = episode_payload(cfg, run_id, 1, random.Random(0), redis_url)
    prepared = curriculum_episode.prepare(cfg, payload, client)
    assert prepared["curriculum"]["level"] == 2 and prepared["curriculum"]["agents"] == {"p": 2}
    mover = prepared["learner_seat"]
    assert len(prepared["opening"]) == OPENING_LEVELS[2].moves[mover]
    assert curriculum_episode.prepare(cfg, prepared, client) is prepared
    # Three failures in a row at level 2 demote it (0 of 3 < 0.3).
    stats = restarted.observe([_record(f"f{i}", 2, "loss") for i in range(3)])
    assert stats["p"]["curriculum_level"] == 1.0
    raw = {k.decode(): v.decode() for k, v in client.hgetall(store.key("p", "tictactoe")).items()}
    assert raw["demoted:2"] == "1"
    # The demotion is remembered across a restart: back to level 2 takes twice the patience.
    again = CurriculumTracker(cfg, client, run_id, resume=True)
    assert again.observe([_record(f"g{i}", 1, "win") for i in range(5)])["p"][
        "curriculum_level"] == 1.0
    assert again.observe([_record("g5", 1, "win")])["p"]["curriculum_level"] == 2.0


def test_reward_service_replays_the_opening_before_the_turns(reward_url):
    body = {"env": "tictactoe", "opening": ["[4]", "[0]", "[1]", "[2]"], "seed": 3,
            "actions": ["[7]"], "rewards": {"win": 1.0, "loss": -1.0}}
    verdict = httpx.post(f"{reward_url}/v1/verify", json=body, timeout=30).json()
    # O holds 4 and 1 and plays 7: a column. The opening moves get no reward of their own.
    assert verdict["results"] == ["win", "loss"] and verdict["turn_rewards"] == [1.0]
    bad = httpx.post(f"{reward_url}/v1/verify", timeout=30,
                     json={**body, "opening": ["[4]", "[4]"]})
    assert bad.status_code == 422 and "opening move 1" in bad.text


def test_real_episodes_climb_a_level_and_records_show_it(
        vllm_tiny, reward_url, redis_url, tmp_path):
    url, _ = vllm_tiny
    cfg = tiny_config(
        models={"tiny": {"model": "tiny-random", "port": _port(url), "max_model_len": 512,
                         "max_loras": 2, "max_lora_rank": 16, "dtype": "float32"}},
        agents=[{"name": "climber", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 4, "stop": ["]"]}}],
        environment={"seats": ["climber", "climber"], "opponents": {"random": 1.0}},
        # A threshold of 0: every full window promotes, whatever tiny-random plays.
        curriculum={"enabled": True, "window": 2, "promote_at": 0.0, "demote_below": 0.0},
        trainer={"pin_cpus": False, "nice": 0},
        services={"reward_port": _port(reward_url), "redis_port": _port(redis_url)},
    )
    run_id = f"climb-{uuid.uuid4().hex[:6]}"
    trainer = Trainer(cfg, run_id, tmp_path, redis_url, serve_metrics=False)
    trainer.setup()  # publishes climber v0 to the session vLLM; levels start at 0
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    rng = random.Random(1)

    def play_and_read(first: int, count: int) -> list[EpisodeRecord]:
        for index in range(first, first + count):
            assert play(episode_payload(cfg, run_id, index, rng, redis_url)) == "added"
        return [record for _, record in stream.read_new(count=64, block_ms=100)]

    early = play_and_read(1, 2)
    for record in early:
        assert record.info["curriculum"]["level"] == 0
        assert record.info["curriculum"]["params"]["opening"] == "win in one"
        mover = record.seats.index("climber")
        cells = [int(a.strip("[]")) for a in record.info["opening"]]
        assert len(cells) == OPENING_LEVELS[0].moves[mover]
        assert record.turns[0].agent == "climber"  # the learner moves first, after the opening
        assert record.results[mover] in {"win", "loss", "draw", "illegal"}  # verified
    trainer.report(Collected(turns={"climber": []}, records=early), {"climber": {}})

    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["agents"]["climber"]["curriculum_level"] == 1.0
    gauge = {"agent": "climber", "task": "tictactoe"}
    assert REGISTRY.get_sample_value("agora_curriculum_level", gauge) == 1.0
    [later] = play_and_read(3, 1)
    assert later.info["curriculum"]["level"] == 1
    assert later.info["curriculum"]["params"]["opening"] == "endgame"
    assert len(later.info["opening"]) == OPENING_LEVELS[1].moves[later.seats.index("climber")]

    # The progress view of `agora up` shows the level column.
    stack = Stack(cfg=cfg, run_id=run_id, run_dir=tmp_path, redis_url=redis_url)
    console = Console(record=True, width=200)
    console.print(progress_table(stack, 0.0))
    text = console.export_text()
    assert "level" in text
    [line] = [x for x in text.splitlines() if "climber" in x]
    cells = [c.strip() for c in re.split(r"[│|┃]", line) if c.strip()]
    assert cells[0] == "climber" and cells[-1] == "1"
