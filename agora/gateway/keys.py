"""API keys: created once, shown once, stored only as a salted HMAC-SHA256 digest in Redis.

Layout (one Redis, shared by the CLI that manages keys and every gateway that checks them):

- ``agora:gateway:keys`` hash: key name -> JSON ``{digest, rate, scope, created, hint}``; its length
  decides whether auth is on at all (no keys and no ``AGORA_GATEWAY_REQUIRE_KEYS``: open);
- ``agora:gateway:key_digests`` hash: digest -> JSON ``{name, rate, scope}``, the lookup a
  request does (one round trip, no scan);
- ``agora:gateway:key_salt``: random salt made with the first key.

Why HMAC with a salt (and an optional pepper from ``AGORA_GATEWAY_KEY_PEPPER``) rather than a
slow password hash: keys are 256-bit random tokens, so a leaked digest cannot be brute-forced
anyway, and a per-request bcrypt would cost more than the request. The salt stops precomputed
tables across deployments; the pepper keeps a Redis dump alone from being enough.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

import redis

KEYS_HASH = "agora:gateway:keys"
DIGESTS_HASH = "agora:gateway:key_digests"
SALT_KEY = "agora:gateway:key_salt"
KEY_PREFIX = "agora-"
# What a key may do. chat: models, agents, chat completions, its own episodes. admin: also
# start, list, read and stop training runs. Keys made before scopes existed were all-powerful,
# so a record without one reads as admin (LEGACY_SCOPE); `agora keys create` defaults to chat.
SCOPES = ("chat", "admin")
LEGACY_SCOPE = "admin"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,62}$")


class KeyStoreError(ValueError):
    """A key operation that cannot be done; the message says why."""


def key_digest(key: str, salt: str, pepper: str = "") -> str:
    return hmac.new((salt + pepper).encode(), key.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class KeyInfo:
    name: str
    rate: int | None  # requests per minute; None = the gateway's default (or unlimited)
    scope: str  # one of SCOPES
    created: str
    hint: str  # the first characters of the key, to tell keys apart in listings


class KeyStore:
    """Key management (the ``agora keys`` CLI): synchronous, one short Redis call each."""

    def __init__(self, client: redis.Redis, pepper: str = "") -> None:
        self.r = client
        self.pepper = pepper

    def salt(self) -> str:
        self.r.set(SALT_KEY, secrets.token_hex(16), nx=True)
        value = self.r.get(SALT_KEY)
        return value.decode() if isinstance(value, bytes) else str(value)

    def create(self, name: str, rate: int | None = None, scope: str = "chat") -> str:
        """Store a new key for ``name`` and return it (the only time it is ever shown)."""
        if not NAME_PATTERN.match(name):
            raise KeyStoreError(f"key name '{name}': use letters, digits, '_', '.', '-' (max 63)")
        if rate is not None and rate < 1:
            raise KeyStoreError(f"--rate {rate}: must be at least 1 request per minute")
        if scope not in SCOPES:
            raise KeyStoreError(f"--scope {scope}: must be one of {', '.join(SCOPES)}")
        key = KEY_PREFIX + secrets.token_urlsafe(32)
        digest = key_digest(key, self.salt(), self.pepper)
        info = {"digest": digest, "rate": rate, "scope": scope, "hint": key[: len(KEY_PREFIX) + 4],
                "created": datetime.now(UTC).isoformat(timespec="seconds")}
        if not self.r.hsetnx(KEYS_HASH, name, json.dumps(info)):
            raise KeyStoreError(f"a key named '{name}' exists already (revoke it first)")
        self.r.hset(DIGESTS_HASH, digest, json.dumps({"name": name, "rate": rate,
                                                      "scope": scope}))
        return key

    def revoke(self, name: str) -> None:
        raw = self.r.hget(KEYS_HASH, name)
        if raw is None:
            raise KeyStoreError(f"no key named '{name}'")
        pipe = self.r.pipeline(transaction=True)
        pipe.hdel(DIGESTS_HASH, json.loads(raw)["digest"])
        pipe.hdel(KEYS_HASH, name)
        pipe.execute()

    def list(self) -> list[KeyInfo]:
        out = []
        for name, raw in self.r.hgetall(KEYS_HASH).items():
            info = json.loads(raw)
            out.append(KeyInfo(name.decode() if isinstance(name, bytes) else name,
                               info.get("rate"), info.get("scope", LEGACY_SCOPE),
                               info.get("created", ""), info.get("hint", "")))
        return sorted(out, key=lambda k: k.name)
