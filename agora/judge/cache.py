"""Verdict cache in Redis: ``agora:judge:{sha256}`` -> the response JSON, with a TTL.

Why cache: rollouts re-judge the same (context, candidates) often (self-play mirrors, re-queued
episodes, eval sweeps), and a judge model call costs two generations. The key hashes everything a
verdict depends on (the backend's identity: name, model, prompt version, sampling; the resolved
rubric; the inputs), so a changed rubric or model can never be answered from an old entry.

The cache is an optimisation, never a dependency: with no ``REDIS_URL`` it is off, and a Redis
error (down, slow) counts in ``agora_judge_cache_errors_total`` and reads as a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from agora.ops.metrics import JUDGE_CACHE_ERRORS

KEY_PREFIX = "agora:judge:"
DEFAULT_TTL_S = 7 * 24 * 3600
log = logging.getLogger(__name__)


def cache_key(kind: str, identity: dict, payload: dict) -> str:
    """A canonical JSON of everything the verdict depends on, hashed (the hex digest, without the
    prefix: the response reports it so a caller can find the entry)."""
    canonical = json.dumps(
        {"kind": kind, "judge": identity, "input": payload},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


class VerdictCache:
    def __init__(self, url: str | None, ttl_s: int = DEFAULT_TTL_S) -> None:
        self.url = url or None
        self.ttl_s = ttl_s
        # One quick retry, not redis-py's default ten with backoff: a hung Redis must cost a
        # judge request at most a few seconds, since the cache is only an optimisation.
        self.client: aioredis.Redis | None = (
            aioredis.from_url(
                self.url,
                socket_timeout=1.0,
                socket_connect_timeout=1.0,
                retry=Retry(NoBackoff(), 1),
            )
            if self.url
            else None
        )

    async def get(self, digest: str) -> dict | None:
        if self.client is None:
            return None
        try:
            raw = await self.client.get(KEY_PREFIX + digest)
        except (RedisError, OSError) as err:
            self._failed("get", err)
            return None
        if raw is None:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None  # not ours, or truncated: judge again and overwrite

    async def set(self, digest: str, value: dict) -> None:
        if self.client is None:
            return
        try:
            await self.client.set(KEY_PREFIX + digest, json.dumps(value), ex=self.ttl_s)
        except (RedisError, OSError) as err:
            self._failed("set", err)

    async def status(self) -> str:
        """For /health: "disabled" (no REDIS_URL), "ok" or "unavailable"."""
        if self.client is None:
            return "disabled"
        try:
            await self.client.ping()
        except (RedisError, OSError):
            return "unavailable"
        return "ok"

    async def close(self) -> None:
        if self.client is not None:
            await self.client.aclose()

    def _failed(self, op: str, err: Exception) -> None:
        JUDGE_CACHE_ERRORS.labels(op).inc()
        log.warning("judge cache %s failed (%s: %s); continuing uncached", op, type(err).__name__,
                    err)
