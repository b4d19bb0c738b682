"""Bearer-key auth and per-key rate limits, as one FastAPI dependency on every route.

Auth is on once any key exists (``agora keys create``) or ``AGORA_GATEWAY_REQUIRE_KEYS=1``;
before that the gateway is open and ignores whatever ``Authorization`` a client sends (the
``openai`` client always sends one). ``/health`` and ``/metrics`` stay open for probes and
Prometheus. A key's scope (agora/gateway/keys.py) decides what it may do: ``/v1/runs`` needs
``admin``; a ``chat`` key gets 403 there. The key's name is kept on the request
(``request.state.api_key``): episodes belong to the key that made them.

Rate limits use the ``limits`` library's fixed window in Redis (one counter per key and
minute, shared by every gateway replica), not a hand-written counter: its window stats give
the reset time that ``Retry-After`` reports.
"""

from __future__ import annotations

import json
import math
import time

import redis.asyncio as aioredis
from fastapi import Request
from limits import RateLimitItemPerMinute
from limits.aio.storage import RedisStorage
from limits.aio.strategies import FixedWindowRateLimiter

from agora.gateway.errors import GatewayError
from agora.gateway.keys import DIGESTS_HASH, KEYS_HASH, LEGACY_SCOPE, SALT_KEY, key_digest
from agora.ops.metrics import GATEWAY_RATE_LIMITED

OPEN_PATHS = frozenset({"/health", "/metrics"})
ADMIN_PREFIX = "/v1/runs"  # training runs: start, list, read logs, stop


def requester(request: Request) -> str | None:
    """The name of the key that made this request; None on an open gateway."""
    return getattr(request.state, "api_key", None)


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


class Authorizer:
    def __init__(self, redis: aioredis.Redis | None, redis_url: str | None, *,
                 require: bool, default_rate: int | None, pepper: str) -> None:
        self.redis = redis
        self.require = require
        self.default_rate = default_rate
        self.pepper = pepper
        self._salt: str | None = None
        self.limiter = None
        if redis_url:
            storage = RedisStorage("async+" + redis_url, implementation="redispy",
                                   key_prefix="agora:gateway:rate")
            self.limiter = FixedWindowRateLimiter(storage)

    async def __call__(self, request: Request) -> None:
        if request.url.path in OPEN_PATHS or self.redis is None:
            return
        token = bearer_token(request)
        key = await self.lookup(token) if token else None
        if key is None:
            if not self.require and not await self.redis.hlen(KEYS_HASH):
                return  # no keys yet: the gateway is open
            if token is None:
                message = "missing API key: send 'Authorization: Bearer <key>'"
            else:
                message = "invalid or revoked API key"
            raise GatewayError(401, message, "invalid_api_key",
                               headers={"www-authenticate": "Bearer"})
        request.state.api_key = key["name"]
        scope = key.get("scope", LEGACY_SCOPE)
        path = request.url.path
        if scope != "admin" and (path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")):
            raise GatewayError(403, f"key '{key['name']}' has scope '{scope}': training runs "
                               "need an admin key (agora keys create NAME --scope admin)",
                               "insufficient_scope")
        rate = key.get("rate") or self.default_rate
        if rate and self.limiter is not None:
            await self.check_rate(key["name"], int(rate))

    async def salt(self, refresh: bool = False) -> str | None:
        if self._salt is None or refresh:
            self._salt = await self.redis.get(SALT_KEY)
        return self._salt

    async def lookup(self, token: str) -> dict | None:
        """The key record of ``token``, or None. The salt is cached; if Redis was reset since
        (a new salt), one miss re-reads it."""
        for refresh in (False, True):
            salt = await self.salt(refresh)
            if salt is None:
                return None
            raw = await self.redis.hget(DIGESTS_HASH, key_digest(token, salt, self.pepper))
            if raw is not None:
                return json.loads(raw)
        return None

    async def check_rate(self, name: str, per_minute: int) -> None:
        item = RateLimitItemPerMinute(per_minute)
        if await self.limiter.hit(item, name):
            return
        stats = await self.limiter.get_window_stats(item, name)
        retry_after = max(1, math.ceil(stats.reset_time - time.time()))
        GATEWAY_RATE_LIMITED.labels(name).inc()
        message = (f"rate limit of {per_minute} requests per minute reached for key '{name}'; "
                   f"retry in {retry_after} s")
        raise GatewayError(429, message, "rate_limit_exceeded", "requests",
                           headers={"retry-after": str(retry_after)})
