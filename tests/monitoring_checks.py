"""What the monitoring tests check against a live Prometheus, shared by the embedded stack's
test (tests/e2e/test_monitoring.py) and the containers' (tests/e2e/test_containers.py): the
dashboards' queries, instant queries, and the traffic that gives every panel data."""

from __future__ import annotations

import json
import math

import httpx

from agora.ops.dashboards import DASHBOARD_DIR


def dashboards() -> dict[str, dict]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def queries(dashboard: dict) -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in dashboard["panels"]
            for target in panel["targets"]]


def instant(prom: str, expr: str, at: float | None = None) -> list[dict]:
    params = {"query": expr, **({"time": f"{at:.3f}"} if at is not None else {})}
    resp = httpx.get(prom + "/api/v1/query", params=params, timeout=10)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def has_data(result: list[dict]) -> bool:
    """At least one series with a finite value (NaN: a ratio or quantile over no events)."""
    return any(math.isfinite(float(series["value"][1])) for series in result)


def send_traffic(gateway: str, judge: str, reward: str, wave: int, service_key: str,
                 gateway_key: str | None = None) -> None:
    """What a tic-tac-toe run does not do by itself: users asking the gateway, a client of the
    judge (each pairwise twice: a miss, then a cache hit), and bad requests. The judge and
    reward want the stack's service key, as the workers send it; the gateway a user's key
    unless it is open."""
    keyed = {"authorization": f"Bearer {service_key}"}
    user = {"authorization": f"Bearer {gateway_key}"} if gateway_key else {}
    chat = {"model": "player", "messages": [{"role": "user", "content": "Your move?"}],
            "max_tokens": 2}
    assert httpx.post(gateway + "/v1/chat/completions", json=chat, timeout=60,
                      headers=user).status_code == 200
    missing = {**chat, "model": "nobody"}
    assert httpx.post(gateway + "/v1/chat/completions", json=missing, timeout=10,
                      headers=user).status_code == 404
    pair = {"context": f"Name a prime ({wave}).", "a": f"{7 + wave} is prime.", "b": "",
            "rubric": "helpfulness"}
    for cached in (False, True):
        resp = httpx.post(judge + "/v1/judge/pairwise", json=pair, timeout=30, headers=keyed)
        assert resp.status_code == 200 and resp.json()["cached"] is cached
    score = {"context": "Say hi.", "response": f"Hello there ({wave})!", "rubric": "helpfulness"}
    for url, body, status in ((judge + "/v1/judge/score", score, 200),
                              (judge + "/v1/judge/score", {}, 422),
                              (reward + "/v1/verify", {"env": 3}, 422)):
        assert httpx.post(url, json=body, timeout=30, headers=keyed).status_code == status


def panels_without_data(prom: str, agents: list[str], at: float | None = None) -> list[str]:
    """Every dashboard panel query (Grafana's $agent and $__rate_interval filled in) that has
    no finite value in Prometheus at ``at`` (a Unix time; None: now)."""
    empty = []
    for name, dashboard in dashboards().items():
        for title, expr in queries(dashboard):
            filled = expr.replace("$agent", "|".join(agents)).replace("$__rate_interval", "1m")
            if not has_data(instant(prom, filled, at)):
                empty.append(f"{name} / {title}")
    return empty
