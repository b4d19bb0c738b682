"""Exactly-once training across a trainer's death, at the two points where it used to fail:

- killed after a checkpoint is renamed into place but before the XACK of the entries it holds:
  the resumed trainer must not train on them again (the checkpoint names them);
- killed before its first checkpoint: the entries it had read are still pending in the stream
  and the resumed trainer must read them (a resume used to re-read only after a checkpoint).

The trainer runs in this process on real episodes (tiny-random through the session's vLLM,
verified by the reward service, in a real Redis stream); the kill is the exception a dead
process would leave at that line.
"""

from __future__ import annotations

import json
import random
import uuid

import pytest
import redis

from agora.rollout.stream import GROUP, EpisodeStream
from agora.rollout.worker import episode_payload, play
from agora.train.checkpoints import CONSUMED
from agora.train.trainer import Trainer
from tests.stack_helpers import tiny_config


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture
def run(vllm_tiny, reward_url, redis_url, tmp_path):
    """A tiny run's config, id, folder and stream; episodes are played with ``play_episodes``."""
    url, _ = vllm_tiny
    cfg = tiny_config(
        models={"tiny": {"port": _port(url), "max_loras": 2, "max_lora_rank": 16}},
        environment={"seats": ["player", "player"], "opponents": {"random": 1.0}},
        ppo={"batch_turns": 4, "minibatch_turns": 4},
        trainer={"checkpoint_every": 1, "pin_cpus": False, "nice": 0},
        services={"reward_port": _port(reward_url), "redis_port": _port(redis_url)},
    )
    run_id = f"ckpt-fault-{uuid.uuid4().hex[:6]}"
    client = redis.Redis.from_url(redis_url)
    return cfg, run_id, tmp_path / run_id, redis_url, client, EpisodeStream(client, run_id)


def play_episodes(cfg, run_id: str, redis_url: str, first: int, count: int) -> None:
    rng = random.Random(first)
    for index in range(first, first + count):
        assert play(episode_payload(cfg, run_id, index, rng, redis_url)) == "added"


def pending_ids(client: redis.Redis, stream: EpisodeStream) -> set[str]:
    return {e["message_id"].decode() for e in
            client.xpending_range(stream.keys.stream, GROUP, "-", "+", 1000)}


def test_a_kill_between_checkpoint_and_ack_trains_nothing_twice(run, monkeypatch):
    cfg, run_id, run_dir, redis_url, client, stream = run
    first = Trainer(cfg, run_id, run_dir, redis_url, serve_metrics=False)
    first.setup()
    play_episodes(cfg, run_id, redis_url, 1, 8)
    batch = first.collect()
    assert batch is not None and batch.entry_ids

    def killed(_entry_ids):
        raise RuntimeError("killed after the checkpoint's rename, before its XACK")

    monkeypatch.setattr(first.checkpoints.stream, "ack", killed)
    with pytest.raises(RuntimeError, match="before its XACK"):
        first.step(batch)
    checkpoint = first.checkpoints.latest()
    assert checkpoint is not None and checkpoint.name == "ckpt-000001"
    assert json.loads((checkpoint / CONSUMED).read_text()) == batch.entry_ids
    assert set(batch.entry_ids) <= pending_ids(client, stream)  # the XACK never happened
    left_in_backlog = {entry_id for entry_id, _ in first.feed.backlog}

    resumed = Trainer(cfg, run_id, run_dir, redis_url, resume=True, serve_metrics=False)
    resumed.setup()
    assert resumed.update_index == 1
    reread = {entry_id for entry_id, _ in resumed.feed.backlog}
    assert not reread & set(batch.entry_ids), "entries of the checkpoint were read again"
    assert reread == left_in_backlog  # delivered, in no batch: read again
    assert not pending_ids(client, stream) & set(batch.entry_ids)  # acked at resume


def test_a_kill_before_the_first_checkpoint_leaves_nothing_unread(run):
    cfg, run_id, run_dir, redis_url, client, stream = run
    first = Trainer(cfg, run_id, run_dir, redis_url, serve_metrics=False)
    first.setup()
    play_episodes(cfg, run_id, redis_url, 1, 8)
    batch = first.collect()  # read (pending in the stream), then the trainer dies
    assert batch is not None and first.checkpoints.latest() is None
    delivered = set(batch.entry_ids) | {entry_id for entry_id, _ in first.feed.backlog}
    assert delivered <= pending_ids(client, stream)

    resumed = Trainer(cfg, run_id, run_dir, redis_url, resume=True, serve_metrics=False)
    resumed.setup()
    assert resumed.update_index == 0
    assert {entry_id for entry_id, _ in resumed.feed.backlog} == delivered
    again = resumed.collect()
    assert again is not None and set(again.entry_ids) >= set(batch.entry_ids)
    resumed.step(again)  # trained on, checkpointed, acked
    assert not pending_ids(client, stream) & set(again.entry_ids)
