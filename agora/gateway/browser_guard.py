"""Requests a web page could forge against the gateway, refused before any route runs.

Why: the gateway listens on 127.0.0.1:8200 and is open until the first API key exists, so any
page the user visits could make the browser POST to it (start a run, play episodes). Browsers
send such a cross-site request without asking first (a CORS "simple request") only when its
body is ``text/plain``, a form, or has no type; anything else, JSON included, needs a preflight
that the gateway never grants (it sends no CORS headers). So:

- a request with a body must declare a JSON type (or YAML, which ``/v1/runs`` also reads):
  anything else is 415, which leaves a page no body it may send unasked;
- a request whose ``Origin`` header (browsers add it to cross-site requests; SDKs, curl and
  the CLI do not) names another site than the gateway itself is 403, unless that origin is in
  ``AGORA_GATEWAY_ALLOWED_ORIGINS``.

``/health`` and ``/metrics`` read no body and are left alone like everything else that has
none (a GET, a body-less POST).
"""

from __future__ import annotations

from collections.abc import Iterable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from agora.gateway.errors import GatewayError

BODY_TYPES = ("application/json", "application/yaml", "application/x-yaml", "text/yaml")


def declares_a_body_type(content_type: str) -> bool:
    """JSON (also ``application/<x>+json``) or YAML, parameters such as charset ignored."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media in BODY_TYPES or (media.startswith("application/") and media.endswith("+json"))


def has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    if length is not None:
        return length.strip() != "0"
    return "transfer-encoding" in request.headers


def own_origin(request: Request) -> str:
    """The origin of a page served by the gateway itself (its /docs), as a browser names it."""
    return f"{request.url.scheme}://{request.headers.get('host', '')}".lower()


def refusal(request: Request, allowed_origins: frozenset[str]) -> GatewayError | None:
    """Why ``request`` is refused, or None."""
    origin = request.headers.get("origin")
    if origin is not None and origin.lower() not in allowed_origins | {own_origin(request)}:
        return GatewayError(
            403, f"cross-site request from origin {origin!r} refused: add it to "
            "AGORA_GATEWAY_ALLOWED_ORIGINS to let pages of that site call the gateway",
            "origin_not_allowed")
    if has_body(request) and not declares_a_body_type(request.headers.get("content-type", "")):
        sent = request.headers.get("content-type") or "none"
        return GatewayError(
            415, f"request bodies must be JSON: send 'Content-Type: application/json' "
            f"(/v1/runs also reads application/yaml); got {sent}", "unsupported_media_type")
    return None


def guard_against_browsers(app: FastAPI, allowed_origins: Iterable[str] = ()) -> None:
    allowed = frozenset(origin.strip().lower().rstrip("/") for origin in allowed_origins
                        if origin.strip())

    @app.middleware("http")
    async def _guard(request: Request, call_next):
        refused = refusal(request, allowed)
        if refused is not None:
            return JSONResponse(refused.body(), status_code=refused.status)
        return await call_next(request)
