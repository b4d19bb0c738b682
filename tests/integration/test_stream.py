"""The run's episode stream on a real Redis: at-most-once append, delivery and lag counting."""

from __future__ import annotations

import json
import uuid

import redis

from agora.rollout.delivery import Delivery, broker_task_ids
from agora.rollout.records import EpisodeRecord
from agora.rollout.stream import EpisodeStream
from agora.rollout.worker import TASK_NAME, make_celery


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


def test_an_episode_the_broker_lost_is_sent_again_and_given_up_after_max_sends(redis_url):
    """kombu loses a message a worker took with BRPOP and died before recording as unacked:
    the trainer's Delivery finds it missing from the broker twice in a row and sends it again
    under the same id; finished episodes are forgotten; after max_sends it counts as failed."""
    run_id = f"lost-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    queue = f"rollouts-{run_id}"  # a queue of its own: no worker of another test takes these
    delivery = Delivery(stream, make_celery(redis_url), TASK_NAME, queue, check_every_s=0,
                        max_sends=2)
    for n in range(3):
        delivery.send({"episode_id": f"{run_id}-{n}", "run_id": run_id, "n": n})
    assert broker_task_ids(client, queue) == {f"{run_id}-{n}" for n in range(3)}
    assert delivery.resend_lost() == [] and delivery.resend_lost() == []  # all in the queue

    # A worker takes episode 0 and dies before kombu records it; episode 1 finishes.
    raws = client.lrange(queue, 0, -1)
    taken = next(r for r in raws if json.loads(r)["headers"]["id"] == f"{run_id}-0")
    client.lrem(queue, 1, taken)
    client.lrem(queue, 1, next(r for r in raws if json.loads(r)["headers"]["id"] == f"{run_id}-1"))
    assert stream.append_once(_record(run_id, 1).model_copy(update={"episode_id": f"{run_id}-1"}))
    assert delivery.resend_lost() == []  # missing once: perhaps in a worker's hands right now
    assert delivery.resend_lost() == [f"{run_id}-0"]  # missing twice: lost, sent again
    assert set(stream.unfinished_sent()) == {f"{run_id}-0", f"{run_id}-2"}  # 1 is forgotten
    again = [json.loads(r) for r in client.lrange(queue, 0, -1)]
    assert sorted(m["headers"]["id"] for m in again) == [f"{run_id}-0", f"{run_id}-2"]

    # Lost a second time: with max_sends=2 it is given up on, and counted as failed.
    client.delete(queue)
    delivery.send({"episode_id": f"{run_id}-2", "run_id": run_id, "n": 2})
    assert delivery.resend_lost() == [] and delivery.resend_lost() == [f"{run_id}-0"]
    assert client.get(stream.keys.episodes_failed) == b"1"
    assert client.sismember(stream.keys.failed_ids, f"{run_id}-0")
    assert set(stream.unfinished_sent()) == {f"{run_id}-2"}
    client.delete(queue)
