"""The run's episode stream on a real Redis: at-most-once append, delivery and lag counting."""

from __future__ import annotations

import uuid

import redis

from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream


def _record(run_id: str, n: int) -> EpisodeRecord:
    return EpisodeRecord(run_id=run_id, episode_id=f"ep-{n}", env="tictactoe", seed=n,
                         seats=["player", "bot:random"])


def test_append_is_once_per_episode_and_undelivered_counts_unread_entries(redis_url):
    run_id = f"stream-{uuid.uuid4().hex[:8]}"
    stream = EpisodeStream(redis.Redis.from_url(redis_url), run_id)
    stream.ensure_group()
    assert stream.undelivered(limit=10) == 0
    for n in range(5):
        assert stream.append_once(_record(run_id, n))
    assert not stream.append_once(_record(run_id, 0))  # a retried task's duplicate
    assert stream.undelivered(limit=10) == 5
    assert stream.undelivered(limit=3) == 3  # bounded count

    first = stream.read_new(count=2, block_ms=100)
    assert [r.episode_id for _, r in first] == ["ep-0", "ep-1"]
    assert stream.undelivered(limit=10) == 3
    # Delivered but unacked entries are pending, and come back on a re-read after a crash.
    assert [r.episode_id for _, r in stream.read_pending()] == ["ep-0", "ep-1"]
    stream.ack([entry_id for entry_id, _ in first])
    assert stream.read_pending() == []
    rest = stream.read_new(count=10, block_ms=100)
    assert [r.episode_id for _, r in rest] == ["ep-2", "ep-3", "ep-4"]
    assert stream.undelivered(limit=10) == 0
