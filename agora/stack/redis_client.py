"""Redis clients that ride out a Redis restart (the trainer's and the rollout workers').

The embedded Redis runs with an append-only file and the launcher restarts it if it dies
(agora/stack/supervisor.py); on Kubernetes it is a StatefulSet that comes back the same way. Either
way the clients see a few seconds of refused connections and then ``LOADING`` replies while the
AOF is replayed. redis-py's own ``Retry`` (reconnect, back off, re-send) covers exactly that
for every command, pipeline and Lua script, so nothing here is hand-written retry logic: this
module only picks a budget long enough for a restart, where redis-py's default (10 quick
retries, a few seconds) would turn a restart into a crashed trainer.

Re-sending is safe for what agora writes, because Redis may have run a command and been killed
before replying: SET, XACK and SADD are idempotent, and the three counting steps are Lua scripts
that count only what they add (append-once, enqueue-once and fail-once in
agora/rollout/stream.py), so no counter or episode index is ever bumped twice. One read is not:
a re-sent ``XREADGROUP >`` leaves the first read's entries pending for the trainer (they are read
again on ``--resume``, never twice). Per-episode rollout statistics (HINCRBY) may count one
episode twice across a restart; they feed dashboards, not the trainer.
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
