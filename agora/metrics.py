"""Prometheus metric names (all start with ``agora_``) and the HTTP instrumentation every
FastAPI service shares: request count, latency histogram and errors, per route."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest

HTTP_REQUESTS = Counter(
    "agora_http_requests_total", "HTTP requests served", ["service", "route", "method", "status"]
)
HTTP_LATENCY = Histogram(
    "agora_http_request_seconds",
    "HTTP request latency",
    ["service", "route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
HTTP_ERRORS = Counter("agora_http_errors_total", "HTTP 5xx responses", ["service", "route"])


def instrument(app: FastAPI, service: str) -> None:
    """Add request metrics and a ``/metrics`` route to ``app``."""

    @app.middleware("http")
    async def _observe(request: Request, call_next):
        started = time.perf_counter()
        route = request.scope.get("route")
        response = await call_next(request)
        route = request.scope.get("route") or route
        path = getattr(route, "path", "unmatched")
        HTTP_LATENCY.labels(service, path).observe(time.perf_counter() - started)
        HTTP_REQUESTS.labels(service, path, request.method, str(response.status_code)).inc()
        if response.status_code >= 500:
            HTTP_ERRORS.labels(service, path).inc()
        return response

    @app.get("/metrics", include_in_schema=False)
    def metrics() -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
