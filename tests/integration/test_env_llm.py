"""A learner on tiny-random (the session's real vLLM server) in the new envs, end to end:
episodes through ``play`` against a scheduled context agent and against frozen snapshots of
itself (served under their own LoRA names), one real PPO update by the ``Trainer`` on them
(env metrics, opponent pool, Elo), then one story and one code_debug episode on the updated
adapter. The model's text is noise; what is checked is the plumbing around it."""

from __future__ import annotations

import json
import random
import uuid

import redis

from agora.agents.context import OpponentPool
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import episode_payload, play
from agora.serving.client import PolicyAdmin
from agora.train.trainer import Trainer
from tests.stack_helpers import tiny_config


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def _config(vllm_url: str, reward_url: str, judge_url: str, redis_url: str, environment: dict,
            context_agents: dict):
    return tiny_config(
        models={"tiny": {"model": "tiny-random", "port": _port(vllm_url), "max_model_len": 512,
                         "max_loras": 2, "max_lora_rank": 16, "dtype": "float32"}},
        agents=[{"name": "learner", "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 12, "stop": []}}],
        environment={"prefill": "", "illegal_move_penalty": -0.5, "opponents": {"self": 1.0},
                     **environment},
        context_agents=context_agents,
        # pin_cpus / nice would apply to the test process itself.
        ppo={"batch_turns": 4, "minibatch_turns": 4, "kl_coef": 0.0},
        trainer={"max_updates": 1, "pin_cpus": False, "nice": 0},
        workers={"queue_ahead": 1},
        services={"reward_port": _port(reward_url), "judge_port": _port(judge_url),
                  "redis_port": _port(redis_url)},
    )


def _records(redis_url: str, run_id: str) -> list[EpisodeRecord]:
    client = redis.Redis.from_url(redis_url)
    return [EpisodeRecord.model_validate_json(fields[b"record"])
            for _, fields in client.xrange(EpisodeStream(client, run_id).keys.stream)]


def test_learner_trains_on_negotiation_against_a_scheduled_partner_and_its_snapshots(
        vllm_tiny, reward_url, judge_url, redis_url, tmp_path):
    url, _ = vllm_tiny
    cfg = _config(url, reward_url, judge_url, redis_url, {
        "name": "negotiation", "seats": ["learner", "context:partner"],
        "opponents": {"self": 0.5, "pool": 0.5}, "pool": {"snapshot_every": 1},
        "negotiation": {"max_rounds": 2, "coherence": 0.5}},
        {"partner": {"cycle": ["fair", "greedy"], "every": 1}})
    run_id = f"nego-{uuid.uuid4().hex[:6]}"
    trainer = Trainer(cfg, run_id, tmp_path / run_id, redis_url, serve_metrics=False)
    trainer.setup()  # publishes learner v0 into vLLM and snapshots it as learner@v0
    assert trainer.snapshots is not None
    assert [s.name for s in trainer.snapshots.pool.snapshots()] == ["learner@v0"]

    rng = random.Random(2)  # draws pool, self, ...: the first update's batch holds both
    kinds: set[str] = set()
    for index in range(1, 9):
        payload = episode_payload(cfg, run_id, index, rng, redis_url, None,
                                  trainer.snapshots.draw)
        assert play(payload) == "added"
        kinds.add(payload["opponent"])
        if kinds == {"self", "pool"} and index >= 3:
            break
    assert kinds == {"self", "pool"}
    records = _records(redis_url, run_id)
    for record in records:
        llm = [t for t in record.turns if t.completion_token_ids]
        assert llm and all(len(t.completion_token_ids) == len(t.behaviour_logprobs) for t in llm)
        assert record.info["judge"] == {"requests": len(record.turns), "malformed": 0,
                                        "position_bias": 0}  # scores only, no preferences
        utility = record.info["negotiation"]["utility"]
        for turn in record.turns:  # utility + 0.5 x coherence (+ the penalty if illegal)
            base = utility[record.info["agents"][turn.seat]] + (0.0 if turn.legal else -0.5)
            assert base <= turn.reward <= base + 0.5
    self_play = next(r for r in records if r.opponent == "self")
    assert self_play.seats == ["learner", "bot:context:partner/fair"]  # clock 0
    pool_game = next(r for r in records if r.opponent == "pool")
    # The snapshot plays the other seat under its own adapter name, loaded by the worker.
    assert pool_game.seats == ["learner", "learner@v0"]
    assert pool_game.policy_versions == {"learner": 0, "learner@v0": 0}
    assert "learner@v0" in PolicyAdmin(url).models()

    collected = trainer.collect()
    assert collected is not None
    assert {t.role for t in collected.turns["learner"]} == {"alice"}  # snapshot turns skipped
    trainer.step(collected)

    [row] = [json.loads(x) for x in trainer.metrics_path.read_text().splitlines()]
    stats = row["agents"]["learner"]
    assert stats["policy_version"] == 1.0
    assert 0.0 <= stats["deal_rate"] <= 1.0 and 0.0 <= stats["utility"] <= 1.0
    assert 0.0 < stats["coherence"] <= 1.0
    pool = OpponentPool.load(tmp_path / run_id / "opponent_pool.json")
    assert [s.name for s in pool.snapshots()] == ["learner@v0", "learner@v1"]
    pool_games = sum(r.opponent == "pool" for r in collected.records)
    assert pool_games >= 1 and pool.players["learner"].games == pool_games
    assert stats["pool_elo"] == pool.players["learner"].rating
    state = redis.Redis.from_url(redis_url, decode_responses=True).hgetall(
        f"agora:{run_id}:state")
    assert "learner:deal_rate" in state and "learner:pool_elo" in state

    # Version 1 is live: the partner's schedule has moved on to "greedy".
    payload = episode_payload(cfg, run_id, 50, random.Random(1), redis_url, None,
                              trainer.snapshots.draw)
    assert payload["opponent"] == "self" and play(payload) == "added"
    latest = _records(redis_url, run_id)[-1]
    assert latest.seats[1] == "bot:context:partner/greedy" and latest.info["clock"] == 1
    assert {t.policy_version for t in latest.turns if t.completion_token_ids} == {1}

    # The same adapter writes a story and fixes code (scores from the judge / the sandbox).
    for environment, context_agents in (
        ({"name": "story", "seats": ["learner", "context:cowriter"],
          "story": {"rounds": 1, "judge": "both"}}, {"cowriter": {"strategy": "short_writer"}}),
        ({"name": "code_debug", "seats": ["learner"],
          "code_debug": {"mode": "fixer", "problem_id": "count_vowels"}}, {}),
    ):
        other = _config(url, reward_url, judge_url, redis_url, environment, context_agents)
        run = f"{environment['name']}-{uuid.uuid4().hex[:6]}"
        EpisodeStream(redis.Redis.from_url(redis_url), run).set_version("learner", 1, "")
        assert play(episode_payload(other, run, 1, random.Random(0), redis_url)) == "added"
        [record] = _records(redis_url, run)
        turn = record.turns[0]
        assert turn.agent == "learner" and turn.completion_token_ids
        if environment["name"] == "story":
            scores = record.info["story_scores"]
            expected = 0.5 * (0.5 * scores["own"]["0"] + 0.5 * scores["story"]) \
                + 0.5 * scores["preference"]["0"] + (0.0 if turn.legal else -0.5)
            assert abs(turn.reward - expected) < 1e-9
            assert record.info["judge"]["requests"] == 1 + 2 + 2
        else:
            fixer = record.info["code_debug"]["fixer"]
            # Noise does not pass the hidden tests; unparsable noise also costs the penalty.
            assert fixer["tests_passed"] < fixer["tests_total"] and not turn.legal
            assert turn.reward == fixer["pass_rate"] - 0.5
            assert record.results == ["failed"]
