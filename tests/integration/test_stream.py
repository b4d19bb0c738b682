"""The run's episode stream on a real Redis: at-most-once append, delivery and lag counting."""

from __future__ import annotations

import json
import threading
import time
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


def test_enqueue_and_give_up_count_once_when_redis_py_sends_them_again(redis_url):
    """A Redis killed after running a command but before replying gets the command again from
    redis-py's retry: enqueueing the same episodes twice, or giving up on one twice (the
    worker's last retry and the trainer's lost-task check), must count once and leave no gap
    in the episode indices."""
    run_id = f"once-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    assert stream.last_episode_index() == 0
    group = [{"episode_id": f"{run_id}-{n:08d}", "n": n} for n in (1, 2)]
    assert stream.enqueue(group, last_index=2) == 2
    assert stream.enqueue(group, last_index=2) == 0  # the re-sent script adds nothing
    assert client.get(stream.keys.episodes_enqueued) == b"2"
    assert stream.last_episode_index() == 2
    assert stream.enqueue([{"episode_id": f"{run_id}-00000003", "n": 3}], last_index=3) == 1
    assert stream.enqueue(group, last_index=2) == 0  # a late re-send never moves it back
    assert stream.last_episode_index() == 3 and stream.outstanding() == 3
    assert {k: v["sends"] for k, v in stream.unfinished_sent().items()} == {
        f"{run_id}-{n:08d}": 1 for n in (1, 2, 3)}

    assert stream.mark_failed(f"{run_id}-00000002") is True
    assert stream.mark_failed(f"{run_id}-00000002") is False
    assert client.get(stream.keys.episodes_failed) == b"1" and stream.outstanding() == 2
    assert set(stream.unfinished_sent()) == {f"{run_id}-00000001", f"{run_id}-00000003"}


def test_a_resumed_trainer_publishes_what_its_killed_self_recorded_but_never_sent(redis_url):
    run_id = f"unpub-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    queue = f"rollouts-{run_id}"
    delivery = Delivery(stream, make_celery(redis_url), TASK_NAME, queue, check_every_s=0)
    delivery.send_new([{"episode_id": f"{run_id}-1", "run_id": run_id}], last_index=1)
    # Killed after recording 2 and 3, before publishing them; 3 was played anyway (a copy).
    stream.enqueue([{"episode_id": f"{run_id}-{n}", "run_id": run_id} for n in (2, 3)], 3)
    assert stream.append_once(_record(run_id, 3).model_copy(update={"episode_id": f"{run_id}-3"}))
    assert broker_task_ids(client, queue) == {f"{run_id}-1"}

    resumed = Delivery(stream, make_celery(redis_url), TASK_NAME, queue, check_every_s=0)
    assert resumed.send_unpublished() == [f"{run_id}-2"]  # at once, no second look
    assert broker_task_ids(client, queue) == {f"{run_id}-1", f"{run_id}-2"}
    assert stream.unfinished_sent()[f"{run_id}-2"]["sends"] == 2
    assert resumed.send_unpublished() == []  # now in the broker: nothing twice
    assert client.get(stream.keys.episodes_enqueued) == b"3"
    client.delete(queue)


def test_settle_sends_again_what_the_broker_lost_after_the_budget_and_waits_for_it(redis_url):
    """The trainer's budget is spent with one episode lost by the broker (a Redis killed just
    before, or a worker): ``settle`` must still find it, send it again and wait for it, or the
    run ends with an episode in flight for good. With no worker left it gives up at the
    deadline and says how many are left."""
    run_id = f"settle-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    stream = EpisodeStream(client, run_id)
    queue = f"rollouts-{run_id}"
    delivery = Delivery(stream, make_celery(redis_url), TASK_NAME, queue, check_every_s=0)
    ids = [f"{run_id}-{n}" for n in (1, 2)]
    delivery.send_new([{"episode_id": i, "run_id": run_id} for i in ids], last_index=2)
    client.delete(queue)  # both lost
    stop = threading.Event()

    def worker() -> None:
        """Plays whatever reaches the queue (only episode 2 is still wanted)."""
        while not stop.is_set():
            raw = client.rpop(queue)
            if raw is None:
                time.sleep(0.05)
                continue
            episode_id = json.loads(raw)["headers"]["id"]
            stream.append_once(_record(run_id, 0).model_copy(update={"episode_id": episode_id}))

    assert stream.append_once(_record(run_id, 1).model_copy(update={"episode_id": ids[0]}))
    assert stream.outstanding() == 1
    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        assert delivery.settle(within_s=20, period_s=0.05) == 0
    finally:
        stop.set()
        thread.join()
    assert stream.outstanding() == 0 and stream.has_episode(ids[1])

    delivery.send_new([{"episode_id": f"{run_id}-3", "run_id": run_id}], last_index=3)
    client.delete(queue)
    started = time.monotonic()
    assert delivery.settle(within_s=0.5, period_s=0.05) == 1  # nobody plays it: left, said so
    assert time.monotonic() - started < 5
    client.delete(queue)
