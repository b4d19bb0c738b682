"""Hanabi wired into runs: config, the game verifier's team rewards (directly and through the
real reward service), role-conditioned advantages, and a tiny-random learner playing full
games through ``play`` and ``agora.evaluation.games`` on the session's real vLLM server."""

from __future__ import annotations

import asyncio
import random
import uuid

import httpx
import pytest
import redis
import torch

from agora.algos.ppo import PPOLearner, whiten_by_group
from agora.config.run import parse_config
from agora.envs.base import DEFAULT_TURN_LIMIT
from agora.envs.hanabi import Hanabi
from agora.envs.registry import make_bot, make_env
from agora.evaluation.games import evaluate
from agora.rewards.verifiers.game import RewardScheme, verify_game
from agora.rollout.records import EpisodeRecord
from agora.rollout.runner import BotPlayer, run_episode
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import episode_payload, play
from agora.serving.client import PolicyAdmin
from agora.serving.weights import adapter_dir
from tests.stack_helpers import session_servers_config

SCHEME = RewardScheme(win=1.0, draw=0.0, loss=-1.0, illegal=-1.0)


def _bot_game(seed: int, players: int) -> tuple[list[str], Hanabi]:
    env = Hanabi(num_players=players)
    env.reset(seed)
    bot, rng, actions = make_bot("hanabi_simple"), random.Random(seed), []
    while not env.done:
        action = bot.act(env, rng)
        actions.append(action)
        env.step(action)
    return actions, env


@pytest.mark.parametrize("players", [2, 3, 4])
def test_finished_game_gives_every_move_the_team_score(players):
    actions, env = _bot_game(seed=5, players=players)
    score = env.outcome().info["score"]
    assert score > 0
    verdict = verify_game("hanabi", actions, SCHEME, seed=5, num_seats=players)
    assert verdict.finished and verdict.results == ["draw"] * players
    assert verdict.turn_rewards == [pytest.approx(score / 25)] * len(actions)
    assert verdict.seat_rewards == [pytest.approx(score / 25)] * players


def test_forfeit_costs_only_the_illegal_move_and_keeps_the_teams_score():
    actions, _ = _bot_game(seed=7, players=2)
    env = Hanabi(num_players=2)
    env.reset(7)
    for action in actions[:12]:
        env.step(action)
    score_so_far, offender = env.score, env.current_seat
    assert score_so_far > 0
    verdict = verify_game("hanabi", actions[:12] + ["I pass"], SCHEME, seed=7, num_seats=2)
    assert verdict.results[offender] == "illegal"
    assert verdict.turn_rewards[-1] == -1.0
    assert verdict.turn_rewards[:-1] == [pytest.approx(score_so_far / 25)] * 12
    assert verdict.seat_rewards[offender] == -1.0
    assert verdict.seat_rewards[1 - offender] == pytest.approx(score_so_far / 25)


def _scores_before_each_move(actions: list[str], seed: int, players: int) -> list[int]:
    env = Hanabi(num_players=players)
    env.reset(seed)
    before = []
    for action in actions:
        before.append(env.score)
        env.step(action)
    return before


def test_to_go_credit_gives_each_move_the_score_made_from_it_on():
    actions, env = _bot_game(seed=5, players=2)
    final = env.outcome().info["score"]
    before = _scores_before_each_move(actions, seed=5, players=2)
    to_go = SCHEME.model_copy(update={"team_credit": "to_go"})
    verdict = verify_game("hanabi", actions, to_go, seed=5, num_seats=2)
    assert verdict.turn_rewards == [pytest.approx((final - b) / 25) for b in before]
    # The first move is credited with the whole game, the last with what it alone added;
    # the seats' results stay the team's score.
    assert verdict.turn_rewards[0] == pytest.approx(final / 25)
    assert verdict.turn_rewards[-1] < verdict.turn_rewards[0]
    rewards = verdict.turn_rewards
    assert all(a >= b for a, b in zip(rewards[:-1], rewards[1:], strict=True))
    assert verdict.seat_rewards == [pytest.approx(final / 25)] * 2
    # A forfeit still costs only the illegal move; the moves before it keep what came after.
    cut = verify_game("hanabi", actions[:12] + ["I pass"], to_go, seed=5, num_seats=2)
    made = before[12]
    assert cut.turn_rewards == [pytest.approx((made - b) / 25) for b in before[:12]] + [-1.0]


def test_to_go_credit_through_the_reward_service_and_refused_for_competitive_games(reward_url):
    actions, env = _bot_game(seed=11, players=3)
    before = _scores_before_each_move(actions, seed=11, players=3)
    body = {"env": "hanabi", "actions": actions, "seed": 11, "num_seats": 3,
            "rewards": {"team_credit": "to_go"}}
    resp = httpx.post(f"{reward_url}/v1/verify", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    final = env.outcome().info["score"]
    assert resp.json()["turn_rewards"] == [pytest.approx((final - b) / 25) for b in before]
    bad = httpx.post(f"{reward_url}/v1/verify",
                     json={**body, "rewards": {"team_credit": "later"}}, timeout=30)
    assert bad.status_code == 422 and "team_credit" in bad.text
    with pytest.raises(Exception) as err:
        parse_config({"models": {"m": {"model": "tiny-random"}},
                      "agents": [{"name": "p", "base": "m"}],
                      "environment": {"name": "tictactoe", "seats": ["p", "p"]},
                      "reward": {"team_credit": "to_go"}}, "t")
    assert "reward.team_credit" in str(err.value) and "cooperative" in str(err.value)
    assert parse_config({**_hanabi_cfg(), "reward": {"team_credit": "to_go"}},
                        "t").reward.team_credit == "to_go"


def test_runner_plays_a_long_game_to_its_end():
    """Two scripted bots take ~74 moves; the runner's old fixed cap of 64 cut such games as
    'unfinished' (no reward in training, left out of the evaluation's score)."""
    players = [BotPlayer(make_bot("hanabi_simple")) for _ in range(2)]
    record = asyncio.run(run_episode(Hanabi(num_players=2), players, run_id="t",
                                     episode_id="long", seed=0))
    assert len(record.turns) > DEFAULT_TURN_LIMIT
    assert record.results == ["draw", "draw"] and record.info["score"] > 0
    _, env = _bot_game(seed=0, players=2)
    assert len(record.turns) == env.turns and record.info["score"] == env.score
    # An explicit cap still cuts (the gateway and tests rely on it).
    cut = asyncio.run(run_episode(Hanabi(num_players=2), players, run_id="t",
                                  episode_id="cut", seed=0, max_turns=10))
    assert len(cut.turns) == 10 and cut.results == ["unfinished", "unfinished"]


def test_reward_service_replays_a_three_player_game(reward_url):
    actions, env = _bot_game(seed=11, players=3)
    body = {"env": "hanabi", "actions": actions, "seed": 11, "num_seats": 3}
    resp = httpx.post(f"{reward_url}/v1/verify", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.json()["turn_rewards"][0] == pytest.approx(env.outcome().info["score"] / 25)
    # The same actions as a 2-player game deal other hands: replayed, they do not fit, or
    # a seat count the game does not have is refused with a message.
    bad = httpx.post(f"{reward_url}/v1/verify", json={**body, "num_seats": 7}, timeout=30)
    assert bad.status_code == 422 and "hanabi has 2-5 seats, got 7" in bad.text


def test_make_env_sets_the_player_count_and_refuses_a_fixed_games_wrong_count():
    assert make_env("hanabi", num_seats=4).num_seats == 4
    assert make_env("hanabi").num_seats == 2
    with pytest.raises(ValueError, match="tictactoe has 2 seats"):
        make_env("tictactoe", num_seats=3)


def _hanabi_cfg(**environment):
    return {
        "models": {"m": {"model": "tiny-random"}},
        "agents": [{"name": "p", "base": "m"}],
        "environment": {"name": "hanabi", "seats": ["p", "p"], **environment},
    }


def test_config_checks_hanabi_seats_bots_and_eval_opponents():
    cfg = parse_config(_hanabi_cfg(opponents={"self": 1, "hanabi_simple": 1}), "t")
    assert cfg.reward.verifier == "game_outcome"
    assert cfg.eval.opponents == ["hanabi_random", "hanabi_simple"]  # the game's own bots
    assert parse_config(_hanabi_cfg(seats=["p"] * 5), "t").environment.seats == ["p"] * 5
    cases = [
        (_hanabi_cfg(seats=["p"] * 6), "environment.seats", "2-5 seats"),
        (_hanabi_cfg(opponents={"minimax": 1}), "environment", "hanabi's bots"),
        ({**_hanabi_cfg(), "eval": {"opponents": ["minimax"]}}, "eval.opponents",
         "cannot play hanabi"),
    ]
    for raw, field, message in cases:
        with pytest.raises(Exception) as err:
            parse_config(raw, "t")
        assert field in str(err.value) and message in str(err.value), str(err.value)


def test_role_conditioned_whitening_centres_each_role_on_its_own():
    values = torch.tensor([10.0, 12.0, 14.0, -1.0, 0.0, 1.0])
    roles = torch.tensor([0, 0, 0, 1, 1, 1])
    out = whiten_by_group(values, roles)
    for role in (0, 1):
        part = out[roles == role]
        assert abs(float(part.mean())) < 1e-6
        assert float(part.std()) == pytest.approx(1.0, abs=1e-4)
    # Batch-wide whitening would have called every role-1 turn below average.
    assert float(out[3:].max()) > 0


def test_tiny_random_learner_plays_hanabi_through_the_queue_task_and_eval(
        vllm_tiny, reward_url, redis_url, tiny_model, tmp_path):
    cfg = session_servers_config(
        vllm_tiny[0], reward_url, redis_url,
        agents=[{"name": "learner", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 8, "stop": []}}],
        environment={"name": "hanabi", "seats": ["learner", "learner", "learner"],
                     "prefill": "[Play] ", "opponents": {"self": 1.0, "hanabi_simple": 1.0}},
        ppo={"advantage_norm": "role"}, trainer={"pin_cpus": False, "nice": 0},
        eval={"games": 4, "opponents": ["self", "hanabi_simple"]},
    )
    run_id = f"hanabi-{uuid.uuid4().hex[:6]}"
    # Serve the learner's version 0 (a fresh LoRA = the base model) under the agent's name.
    learner = PPOLearner(tiny_model, cfg.agent("learner"), cfg.ppo, compute=cfg.trainer)
    path = learner.save_adapter(adapter_dir(tmp_path, "learner", 0))
    PolicyAdmin(cfg.policy_url("learner")).load_adapter("learner", str(path))

    rng = random.Random(0)
    opponents = set()
    for index in range(1, 7):
        payload = episode_payload(cfg, run_id, index, rng, redis_url)
        opponents.add(payload["opponent"])
        assert play(payload) == "added"
    assert opponents == {"self", "hanabi_simple"}
    client = redis.Redis.from_url(redis_url)
    records = [EpisodeRecord.model_validate_json(f[b"record"])
               for _, f in client.xrange(EpisodeStream(client, run_id).keys.stream)]
    for record in records:
        assert len(record.seats) == 3
        score = record.info["score"]
        # Legal moves earn the team's score, the forfeiting move (noise text) the penalty.
        for turn in record.turns:
            assert turn.reward == pytest.approx(score / 25 if turn.legal else -1.0)
        learners = {a for a in record.seats if not a.startswith("bot:")}
        assert record.info["metrics"] == {a: {"hanabi_score": float(score)} for a in learners}
    results = evaluate(cfg, "learner", "learner", games=4)
    assert set(results) == {"self", "hanabi_simple"}
    for match in results.values():
        summary = match.as_dict()
        assert match.games == 4 and 0 <= summary["score"] <= 25
        assert match.llm_turns > 0
