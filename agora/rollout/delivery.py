"""Sending episodes to the rollout workers, and sending again the ones the broker lost.

Celery's Redis transport (kombu) takes a message off the queue with BRPOP and only then records
it in its ``unacked`` hash: a worker killed between the two loses that message for good (Celery
issue 4354, kombu issues 305 and 1836). Late acks and the visibility timeout cover a worker killed
while it runs an episode, not this window, and ``tests/e2e/test_faults.py`` hit it: one episode
of 55 never arrived after a worker was SIGKILLed. So the trainer keeps what it sent (the run's
``sent`` hash: episode id -> payload) and, every few seconds, looks for episodes that are neither
finished (in the stream, or given up on) nor anywhere in the broker (the queue's lists or the
unacked hash). One missing from two looks in a row was lost: it is sent again under the same id
(should a copy still run somewhere, ``append_once`` drops the second). After ``max_sends`` the
episode is counted as failed, so the trainer stops waiting for it. A trainer killed between
recording new episodes and publishing them leaves the same kind of entry: its resumed self sends
those at once (``send_unpublished``). A trainer whose budget is spent keeps looking for a while
(``settle``): an episode lost just before the end would otherwise stay in flight for good.
"""

from __future__ import annotations

import json
import logging
import time

import redis
from celery import Celery

from agora.ops.metrics import ROLLOUT_RESENT
from agora.rollout.queue_metrics import queue_keys
from agora.rollout.stream import EpisodeStream

log = logging.getLogger(__name__)

UNACKED_KEY = "unacked"  # kombu's Redis channel default (Channel.unacked_key)


def broker_task_ids(client: redis.Redis, queue: str) -> set[str]:
    """The ids of the tasks the broker holds for ``queue``: waiting in one of its lists, or taken
    by a worker and not yet acknowledged. Celery's message protocol 2 keeps the id in
    ``headers.id``; kombu stores unacked messages as ``[message, exchange, routing_key]``."""
    pipe = client.pipeline(transaction=False)
    for key in queue_keys(queue):
        pipe.lrange(key, 0, -1)
    pipe.hvals(UNACKED_KEY)
    *waiting, unacked = pipe.execute()
    messages = [json.loads(raw) for raws in waiting for raw in raws]
    messages += [json.loads(raw)[0] for raw in unacked]
    return {str(m.get("headers", {}).get("id")) for m in messages}


class Delivery:
    """The trainer's side of the rollout queue: ``send`` an episode, ``resend_lost`` ones."""

    def __init__(self, stream: EpisodeStream, celery: Celery, task_name: str, queue: str,
                 check_every_s: float = 5.0, max_sends: int = 3) -> None:
        self.stream = stream
        self.celery = celery
        self.task_name = task_name
        self.queue = queue
        self.check_every_s = check_every_s
        self.max_sends = max_sends
        self.missing_before: set[str] = set()
        self.checked_at = float("-inf")

    def send_new(self, payloads: list[dict], last_index: int) -> None:
        """Record new episodes (and the last index handed out), then publish them. Recorded
        first: a trainer killed in between leaves entries that the next look finds missing
        from the broker and sends."""
        self.stream.enqueue(payloads, last_index)
        for payload in payloads:
            self._publish(payload)

    def send(self, payload: dict, sends: int = 1) -> None:
        """Send an episode again: record the send, then publish under the same id."""
        self.stream.record_sent(payload["episode_id"], payload, sends)
        self._publish(payload)

    def _publish(self, payload: dict) -> None:
        self.celery.send_task(self.task_name, args=[payload], queue=self.queue,
                              task_id=payload["episode_id"])

    def resend_lost(self) -> list[str]:
        """Send again the episodes missing from the broker in this look and the last one;
        returns their ids. At most every ``check_every_s`` seconds."""
        now = time.monotonic()
        if now - self.checked_at < self.check_every_s:
            return []
        self.checked_at = now
        unfinished = self.stream.unfinished_sent()
        missing = set(unfinished) - broker_task_ids(self.stream.r, self.queue)
        lost = sorted(missing & self.missing_before)
        self.missing_before = missing - set(lost)
        self._send_again(lost, unfinished, "was lost by the broker (a worker killed as it took "
                         "the task)")
        return lost

    def settle(self, within_s: float, period_s: float = 1.0) -> int:
        """At the end of a run: wait up to ``within_s`` for the episodes still in flight,
        sending again those the broker lost, so the run ends with every episode it sent in the
        stream or counted as failed. Returns how many were still in flight at the deadline
        (left to the workers; nothing trains on them)."""
        deadline = time.monotonic() + within_s
        while (left := self.stream.outstanding()) and time.monotonic() < deadline:
            self.resend_lost()
            time.sleep(period_s)
        return left

    def send_unpublished(self) -> list[str]:
        """On --resume: send at once every recorded episode that is neither finished nor in the
        broker; returns their ids. A trainer killed between ``send_new``'s record and its
        publish leaves such episodes, and the trainer may finish its budget before two looks
        of ``resend_lost`` find them. A copy a worker took in that same instant is harmless:
        ``append_once`` drops the second."""
        unfinished = self.stream.unfinished_sent()
        missing = sorted(set(unfinished) - broker_task_ids(self.stream.r, self.queue))
        self._send_again(missing, unfinished, "was recorded but not published (the trainer "
                         "was killed)")
        return missing

    def _send_again(self, episode_ids: list[str], unfinished: dict[str, dict], why: str
                    ) -> None:
        for episode_id in episode_ids:
            entry = unfinished[episode_id]
            if entry["sends"] >= self.max_sends:
                log.error("episode %s was lost %d times: counted as failed", episode_id,
                          entry["sends"])
                self.stream.mark_failed(episode_id)
                continue
            log.warning("episode %s %s: sending it again", episode_id, why)
            ROLLOUT_RESENT.inc()
            self.send(entry["payload"], entry["sends"] + 1)
