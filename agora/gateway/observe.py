"""``agora_gateway_*`` metrics: requests by route and status, latency by route.

Separate from ``agora.ops.metrics.instrument`` (the ``agora_http_*`` series every service has)
because the gateway is the public door: its dashboards count 401/429 by route and watch its
own latency, apart from the internal services'. Latency is to the response headers; for a
stream that is the first byte, the number a user waits before tokens start.
"""

from __future__ import annotations

import time

from fastapi import FastAPI, Request

from agora.ops.metrics import GATEWAY_LATENCY, GATEWAY_REQUESTS


def observe_gateway(app: FastAPI) -> None:
    @app.middleware("http")
    async def _observe(request: Request, call_next):
        started = time.perf_counter()
        response = await call_next(request)
        route = getattr(request.scope.get("route"), "path", "unmatched")
        GATEWAY_LATENCY.labels(route).observe(time.perf_counter() - started)
        GATEWAY_REQUESTS.labels(route, str(response.status_code)).inc()
        return response
