"""An opponent pool for every learner of a multi-agent run (a league), on tiny-random and the
session's real vLLM server: two learners, alice and bob, negotiate with each other's frozen
snapshots (served under their own LoRA names, each on its agent's server); one
real update trains both on their live turns only, snapshots both, and rates everyone on one
Elo scale (pool file, /metrics, the update's row)."""

from __future__ import annotations

import json
import random
import uuid

from prometheus_client import REGISTRY

from agora.agents.context import OpponentPool
from agora.rollout.worker import episode_payload, play
from agora.serving.client import PolicyAdmin
from agora.train.trainer import Trainer
from tests.integration.test_env_llm import _port, _records
from tests.stack_helpers import tiny_config

LEARNERS = ("alice", "bob")


def test_two_learners_train_against_each_others_snapshots(vllm_tiny, reward_url, judge_url,
                                                           redis_url, tmp_path):
    url, _ = vllm_tiny
    cfg = tiny_config(
        models={"tiny": {"model": "tiny-random", "port": _port(url), "max_model_len": 512,
                         "max_loras": 2, "max_lora_rank": 16, "dtype": "float32"}},
        agents=[{"name": name, "base": "tiny", "lora_rank": 8, "lora_alpha": 16,
                 "sampling": {"max_tokens": 12, "stop": []}} for name in LEARNERS],
        # Negotiation: every seat speaks every round (in a game the random model's first
        # illegal move ends it before the second seat ever moves).
        environment={"name": "negotiation", "seats": list(LEARNERS), "prefill": "",
                     "opponents": {"pool": 1.0}, "negotiation": {"max_rounds": 2},
                     "pool": {"snapshot_every": 1, "sampling": "pfsp"}},
        ppo={"batch_turns": 2, "minibatch_turns": 2, "kl_coef": 0.0},
        trainer={"max_updates": 1, "pin_cpus": False, "nice": 0},
        workers={"queue_ahead": 1},
        services={"reward_port": _port(reward_url), "judge_port": _port(judge_url),
                  "redis_port": _port(redis_url)})
    run_id = f"league-{uuid.uuid4().hex[:6]}"
    trainer = Trainer(cfg, run_id, tmp_path / run_id, redis_url, serve_metrics=False)
    trainer.setup()  # both learners live at v0, both snapshotted
    assert trainer.snapshots is not None and trainer.snapshots.agents == list(LEARNERS)
    assert [s.name for s in trainer.snapshots.pool.snapshots()] == ["alice@v0", "bob@v0"]

    rng = random.Random(0)
    live_turns = dict.fromkeys(LEARNERS, 0)
    for index in range(1, 25):  # until both have a batch (no worker runs: collect() reads these)
        payload = episode_payload(cfg, run_id, index, rng, redis_url, None,
                                  trainer.snapshots.draw)
        assert play(payload) == "added"
        record = _records(redis_url, run_id)[-1]
        for turn in record.turns:
            if turn.agent in live_turns and turn.completion_token_ids:
                live_turns[turn.agent] += 1
        if min(live_turns.values()) >= cfg.ppo.batch_turns:
            break
    assert min(live_turns.values()) >= cfg.ppo.batch_turns, live_turns
    records = _records(redis_url, run_id)
    for record in records:
        seat = next(s for s, name in enumerate(record.seats) if name in LEARNERS)
        other = 1 - seat
        # The live learner's opponent is the *other* learner's snapshot, on its own adapter.
        assert record.seats[other] == f"{LEARNERS[other]}@v0"
        assert record.info["snapshots"][str(other)]["agent"] == LEARNERS[other]
        assert set(record.rewards) == {LEARNERS[seat], f"{LEARNERS[other]}@v0"}
    assert {"alice@v0", "bob@v0"} <= set(PolicyAdmin(url).models())

    collected = trainer.collect()
    assert collected is not None
    for name in LEARNERS:  # only live turns train; a snapshot's are no one's
        live = sum(1 for r in collected.records for t in r.turns
                   if t.agent == name and t.completion_token_ids)
        assert len(collected.turns[name]) == live
    assert sum(len(turns) for turns in collected.turns.values()) > 0
    trainer.step(collected)

    [row] = [json.loads(x) for x in trainer.metrics_path.read_text().splitlines()]
    pool = OpponentPool.load(tmp_path / run_id / "opponent_pool.json")
    assert {s.name for s in pool.snapshots()} == {"alice@v0", "alice@v1", "bob@v0", "bob@v1"}
    for name in LEARNERS:
        # Every episode this learner played live is one rated game against a snapshot.
        played = sum(1 for r in collected.records if name in r.seats)
        assert pool.players[name].games == played
        assert row["agents"][name]["pool_elo"] == pool.players[name].rating
        value = REGISTRY.get_sample_value("agora_pool_rating", {"agent": name, "player": name})
        assert value == pool.players[name].rating
