"""Rollout queue gauges read from Redis when Prometheus scrapes (a custom collector).

Why at scrape time and in the trainer: the queue depth lives in the broker, not in any worker
(workers only see the tasks they took), and a gauge set in a loop would be as stale as the loop
is slow (a PPO update takes tens of seconds). The trainer already holds the run's Redis (the
Celery broker too), so its metrics endpoint reads both on each scrape: one LLEN per priority
level of the queue and one MGET. Not through kombu's ``queue_declare``: with Redis down, its
connection retries stalled a scrape for 6 s, past Prometheus' timeout, which would have lost
the trainer's own gauges too; redis-py fails at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import redis
from kombu.transport.redis import PRIORITY_STEPS
from kombu.transport.redis import Channel as KombuRedisChannel
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from redis.exceptions import RedisError

from agora.ops.metrics import ROLLOUT_IN_FLIGHT, ROLLOUT_QUEUE_DEPTH, SCRAPE_TIME_GAUGES
from agora.rollout.stream import EpisodeStream

log = logging.getLogger(__name__)


def queue_keys(queue: str) -> list[str]:
    """The Redis lists kombu keeps ``queue`` in: one per priority step, the default step (0)
    under the plain name (kombu's ``Channel._q_for_pri``, from its own constants)."""
    return [queue if step == 0 else f"{queue}{KombuRedisChannel.sep}{step}"
            for step in PRIORITY_STEPS]


def queue_depth(client: redis.Redis, queue: str) -> int:
    """Messages waiting in ``queue`` (all priority levels), as the broker holds them."""
    pipe = client.pipeline(transaction=False)
    for key in queue_keys(queue):
        pipe.llen(key)
    return int(sum(pipe.execute()))


class RolloutQueueCollector(Collector):
    """``agora_rollout_queue_depth`` and ``agora_rollout_in_flight`` for one run.

    A Redis error yields no sample (the panel shows a gap) rather than failing the whole scrape,
    which would also blank the trainer's own metrics.
    """

    def __init__(self, stream: EpisodeStream, queue: str) -> None:
        self.stream = stream
        self.queue = queue

    def describe(self) -> list:
        # Describing with no samples keeps registration from calling collect() (and Redis).
        return [GaugeMetricFamily(name, help_) for name, help_ in SCRAPE_TIME_GAUGES.items()]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            depth = queue_depth(self.stream.r, self.queue)
            in_flight = self.stream.outstanding()
        except (RedisError, OSError) as err:
            log.warning("rollout queue metrics unavailable: %s: %s", type(err).__name__, err)
            return
        yield GaugeMetricFamily(ROLLOUT_QUEUE_DEPTH, SCRAPE_TIME_GAUGES[ROLLOUT_QUEUE_DEPTH],
                                value=depth)
        yield GaugeMetricFamily(ROLLOUT_IN_FLIGHT, SCRAPE_TIME_GAUGES[ROLLOUT_IN_FLIGHT],
                                value=in_flight)
