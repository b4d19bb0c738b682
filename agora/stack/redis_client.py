"""Redis clients that ride out a Redis restart (the trainer's and the rollout workers').

The embedded Redis runs with an append-only file and the launcher restarts it if it dies
(agora/stack/supervisor.py); on Kubernetes it is a StatefulSet that comes back the same way. Either
way the clients see a few seconds of refused connections and then ``LOADING`` replies while the
AOF is replayed. redis-py's own ``Retry`` (reconnect, back off, re-send) covers exactly that
for every command, pipeline and Lua script, so nothing here is hand-written retry logic: this
module only picks a budget long enough for a restart, where redis-py's default (10 quick
retries, a few seconds) would turn a restart into a crashed trainer.

Re-sending is safe for what agora sends: SET, XACK, SADD and the append-once script are
idempotent by construction. Two commands are not, in the microsecond window where Redis ran a
command and was killed before replying: a re-sent ``INCR`` of the enqueue counter skips an
episode index (no episode carries it), and a re-sent ``XREADGROUP >`` leaves the first read's
entries pending for the trainer (they are read again on ``--resume``, never twice).
"""

from __future__ import annotations

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.retry import Retry

# Long enough for the launcher to notice a dead Redis (one 2 s watch tick), start it again and
# replay the AOF of a long run; short enough that a Redis that is really gone ends the run.
DEFAULT_RETRY_FOR_S = 120.0
BACKOFF_CAP_S = 1.0


def resilient_redis(url: str, retry_for_s: float = DEFAULT_RETRY_FOR_S, **kwargs) -> redis.Redis:
    """``redis.Redis.from_url`` that retries connection errors (and ``LOADING``, a subclass)
    for about ``retry_for_s`` seconds before raising."""
    # Backoff 0.05, 0.1, ... capped at 1 s: after the first few retries each costs ~1 s.
    retry = Retry(ExponentialBackoff(cap=BACKOFF_CAP_S, base=0.05),
                  retries=max(1, int(retry_for_s / BACKOFF_CAP_S)))
    kwargs.setdefault("socket_connect_timeout", 5)
    return redis.Redis.from_url(url, retry=retry, **kwargs)


def fail_fast_redis(url: str, **kwargs) -> redis.Redis:
    """A client that raises at once while Redis is away: for readers that must not block on it
    (a Prometheus scrape, the progress view of ``agora up``, whose loop restarts Redis)."""
    kwargs.setdefault("socket_connect_timeout", 2)
    kwargs.setdefault("socket_timeout", 5)
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), retries=0), **kwargs)
