"""The internal services' key: a bearer key the reward and judge services require on their
``/v1`` routes when ``AGORA_SERVICE_KEY`` is set.

Why: the reward service runs model-written code in its sandbox (``/v1/sandbox/run``) and both
services spend CPU (and the judge a model) on every request; before this key anything that could
reach their ports could use them. ``agora up`` makes a fresh key per start (as it does for the
policy servers' vLLM key, agora/serving/auth.py) and gives it to every process it starts, whose
clients send it; compose and k8s set it from a secret. Unset: no key, the services stay open (a
service started alone for a test or a notebook).

``/health`` and ``/metrics`` stay open: orchestrators and Prometheus probe them without secrets,
and they reveal nothing a caller could use.
"""

from __future__ import annotations

import hmac
import json
import os

from starlette.types import ASGIApp, Receive, Scope, Send

SERVICE_KEY_ENV = "AGORA_SERVICE_KEY"
GUARDED_PREFIX = "/v1/"


def service_key() -> str | None:
    return os.environ.get(SERVICE_KEY_ENV) or None


def service_headers() -> dict[str, str]:
    """The Authorization header for the run's reward and judge services (empty without a key)."""
    key = service_key()
    return {"authorization": f"Bearer {key}"} if key else {}


class RequireServiceKey:
    """Pure ASGI: a guarded request (``/v1``) without ``Authorization: Bearer <key>`` gets 401
    before any route, body parsing or validation runs (compared in constant time). ``key``
    None lets everything through (a server started without one)."""

    key_env = SERVICE_KEY_ENV  # named in the 401, for whoever has to fix the caller

    def __init__(self, app: ASGIApp, key: str | None) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode() if key else None

    def guarded(self, path: str) -> bool:
        return path.startswith(GUARDED_PREFIX)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] != "http" or self.expected is None
                or not self.guarded(scope["path"])):
            await self.app(scope, receive, send)
            return
        given = dict(scope.get("headers") or []).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        body = json.dumps({"detail": f"missing or wrong key (Authorization: Bearer "
                                     f"${self.key_env})"}).encode()
        await send({"type": "http.response.start", "status": 401,
                    "headers": [(b"content-type", b"application/json"),
                                (b"www-authenticate", b"Bearer")]})
        await send({"type": "http.response.body", "body": body})


def guard(app, key: str | None = None) -> None:
    """Require the service key on ``app``'s /v1 routes when one is set (``key`` or the
    environment's)."""
    if key := key or service_key():
        app.add_middleware(RequireServiceKey, key=key)
