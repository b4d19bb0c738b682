"""The gateway's one HTTP client to the policy servers (vLLM), shared by every request.

Why httpx's API on aiohttp's connection pool (the ``httpx-aiohttp`` transport, the one the
``openai`` client offers for the same reason): httpcore's pool re-scans every waiting request
against every connection on each state change (encode/httpx#3215), so at 64 concurrent chats
the gateway spent ~16 ms CPU per request in ``_assign_requests_to_connections`` and queued
requests behind its own pool; on aiohttp's pool the same proxying costs ~4 ms (measured with
bench/gateway_load.py's setup against a 0.3 s stub upstream). The transport keeps the httpx API
that proxy, models and episodes use (``post``, ``send(stream=True)``, ``aiter_raw``, httpx
exceptions), so nothing else changes.
"""

from __future__ import annotations

import httpx
from httpx_aiohttp import AiohttpTransport

from agora.serving.auth import vllm_headers

MAX_CONNECTIONS = 256
# Below vLLM's (uvicorn's) 5 s keep-alive: with equal timers the server can close an idle
# connection just as the gateway reuses it, and that request fails (a 502 ReadError, seen once
# under load on the old pool); a shorter client timer drops such connections first.
KEEPALIVE_S = 3.0


def upstream_client(timeout_s: float, connect_s: float) -> httpx.AsyncClient:
    """``timeout_s`` bounds each upstream read (over it: 504); connecting gets ``connect_s`` so
    a dead server is a fast 502."""
    limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=64,
                          keepalive_expiry=KEEPALIVE_S)
    return httpx.AsyncClient(timeout=httpx.Timeout(timeout_s, connect=connect_s),
                             transport=AiohttpTransport(limits=limits),
                             headers=vllm_headers())  # the policy servers' key, if any
