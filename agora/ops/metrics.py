"""Every Prometheus metric agora exports (all names start with ``agora_``), in one place.

Why one module: the Grafana dashboards (``agora/ops/dashboards.py``) and their test check each
queried name against this catalogue, and a name defined next to the code that bumps it is
easy to rename without noticing a dashboard went blank. The processes that export them:

- every FastAPI service (reward, judge, gateway): ``agora_http_*`` per route, via
  ``instrument`` (request count by status, latency histogram, 5xx errors);
- reward: ``agora_verifications_total``, ``agora_learned_scores_total``;
- judge: ``agora_judge_*`` (requests, cache hits/misses, position bias, malformed verdicts);
- rollout workers (Celery): ``agora_rollout_*`` counters and the episode-time histogram, served
  on ``AGORA_WORKER_METRICS_PORT`` by each worker (``serve_metrics``);
- trainer: ``agora_trainer_*`` per agent, and, read from Redis at scrape time, the Celery queue
  depth and the episodes in flight (``agora.rollout.queue_metrics``);
- the policy server is vLLM: its own ``vllm:*`` metrics.

Label values known in advance are created up front (``.labels(...)`` with no increment) so a
panel shows 0, not "no data", before the first event (e.g. no failure yet).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping

from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)
from prometheus_client.metrics import MetricWrapperBase

log = logging.getLogger(__name__)

# --- HTTP, every FastAPI service ------------------------------------------------------------

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


# --- trainer ----------------------------------------------------------------------------------

# Per-agent gauges ``agora_trainer_<name>{agent}``; the per-env ones (negotiation deal rate,
# story judge score, ...) are added by the trainer from agora.envs.registry.ENV_METRICS.
TRAINER_AGENT_METRICS: dict[str, str] = {
    "reward_mean": "mean turn reward in the last update",
    "win_rate": "win rate over the last 100 games vs the random bot",
    "accuracy_first": "discussions: share of right first-round answers (last 100)",
    "accuracy_last": "discussions: share of right last-round answers (last 100)",
    "legal_rate": "legal move rate over the last update's turns",
    "kl": "mean KL(behaviour || reference) per token",
    "entropy": "mean policy entropy per action token",
    "pg_loss": "policy-gradient loss",
    "vf_loss": "value loss",
    "grad_norm": "policy gradient norm before clipping (mean over the update's minibatches)",
    "clipfrac": "share of action tokens whose ratio was clipped",
    "policy_version": "live policy version",
    "staleness": "mean versions between behaviour policy and the updated policy",
    "update_seconds": "wall time of the last PPO update",
    "hotswap_seconds": "wall time of the last adapter hot-swap",
    "pool_elo": "learner's Elo vs its snapshots",
    # The learning signal (agora.algos.advantages.learning_signal): why a run does not learn.
    "reward_std": "spread of the last update's turn rewards (0: nothing to learn from)",
    "reward_nonzero": "share of the last update's turns with a non-zero reward",
    "adv_abs": "mean |advantage| per action token, before whitening",
    "explained_var": "share of the returns' variance the critic explains (gae)",
    "adv_zero": "share of turns whose group scored alike: zero advantage (grpo, rloo)",
    "filtered_turns": "turns of groups that scored alike, left out of the last update "
                      "(ppo.filter_groups)",
}


def trainer_gauge_name(key: str) -> str:
    return f"agora_trainer_{key}"


def trainer_agent_gauges(env_metrics: Mapping[str, str]) -> dict[str, Gauge]:
    """The trainer's per-agent gauges: ``TRAINER_AGENT_METRICS`` plus ``env_metrics`` (name ->
    help, averaged over each agent's last 100 episodes). Called once, by the trainer module."""
    gauges = {k: Gauge(trainer_gauge_name(k), h, ["agent"]) for k, h in
              TRAINER_AGENT_METRICS.items()}
    for key, help_ in env_metrics.items():
        gauges[key] = Gauge(trainer_gauge_name(key), help_ + " (last 100 episodes)", ["agent"])
    return gauges


POOL_RATINGS = Gauge(
    "agora_pool_rating",
    "Elo ratings in the run's opponent pool (one scale for every learner): each snapshot "
    "(agent = whose, player = <agent>@v<N>) and each live learner (player = agent)",
    ["agent", "player"],
)
TRAINER_EPISODES_CONSUMED = Counter(
    "agora_trainer_episodes_consumed_total", "episodes read from stream"
)
TRAINER_TURNS_DROPPED = Counter(
    "agora_trainer_stale_turns_dropped_total", "turns dropped as too stale"
)
TRAINER_UPDATES = Counter("agora_trainer_updates_total", "PPO updates done", ["agent"])
# agora.serving.adapter_keeper: adapters loaded again into a policy server that had lost them.
TRAINER_ADAPTER_RELOADS = Counter(
    "agora_trainer_adapter_reloads_total",
    "current adapters re-loaded into a restarted policy server", ["agent"])

# Read from Redis at scrape time by agora.rollout.queue_metrics (in the trainer's process).
ROLLOUT_QUEUE_DEPTH = "agora_rollout_queue_depth"
ROLLOUT_IN_FLIGHT = "agora_rollout_in_flight"
SCRAPE_TIME_GAUGES = {
    ROLLOUT_QUEUE_DEPTH: "rollout tasks waiting in the Celery queue (not yet taken by a worker)",
    ROLLOUT_IN_FLIGHT: "episodes enqueued but neither in the stream nor given up on",
}

# --- rollout workers --------------------------------------------------------------------------

WORKER_METRICS_PORT_ENV = "AGORA_WORKER_METRICS_PORT"
WORKER_METRICS_ADDR_ENV = "AGORA_WORKER_METRICS_ADDR"

ROLLOUT_EPISODES = Counter(
    "agora_rollout_episodes_total",
    "episodes played, scored and appended to the run's stream (rate = episodes/s)",
    ["env", "opponent"],
)
ROLLOUT_EPISODE_SECONDS = Histogram(
    "agora_rollout_episode_seconds",
    "wall time of one episode: play, score, append",
    ["env"],
    buckets=(0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600),
)
ROLLOUT_DUPLICATES = Counter(
    "agora_rollout_duplicate_episodes_total",
    "redelivered tasks whose episode was already in the stream (skipped)",
)
# Counted by the trainer (agora/rollout/delivery.py), which sends them.
ROLLOUT_RESENT = Counter(
    "agora_rollout_resent_episodes_total",
    "episodes the broker lost (a worker killed as it took the task), sent again",
)
ROLLOUT_RETRY_REASONS = ("unavailable", "error")
ROLLOUT_RETRIES = Counter(
    "agora_rollout_retries_total",
    "episode attempts that failed and were retried: unavailable = policy/reward server "
    "unreachable, error = anything else",
    ["reason"],
)
for _reason in ROLLOUT_RETRY_REASONS:
    ROLLOUT_RETRIES.labels(_reason)
ROLLOUT_FAILURES = Counter(
    "agora_rollout_failures_total", "episodes given up on after their retries"
)

# --- reward service ---------------------------------------------------------------------------

VERIFICATIONS = Counter(
    "agora_verifications_total",
    "Verifications by kind; math/nli count responses (correct|wrong|unparsable), code counts "
    "responses (passed|failed|<sandbox status> e.g. timeout, cpu_limit), games count requests "
    "(finished|unfinished), sandbox counts /v1/sandbox/run programs (a rollout's tool code) by "
    "sandbox status",
    ["kind", "result"],
)
PROGRAM_ANSWERS = Counter(
    "agora_reward_program_answers_total",
    "Math answers given as a program (answer: program | either), by outcome: right, wrong (ran, "
    "printed a wrong answer), or how the run failed (error, timeout, no_output, cpu_limit, ...)",
    ["outcome"],
)
LEARNED_SCORES = Counter(
    "agora_learned_scores_total", "Answers scored by the learned verifier", ["route"]
)

# --- judge service ----------------------------------------------------------------------------
# Rates for dashboards: cache hit rate = hits / (hits + misses); position-bias rate =
# position_bias / order_checks (judgments where both orders parsed, the only ones where bias
# can be seen); cache hits are not re-counted in either.

JUDGE_ENDPOINTS = ("pairwise", "score")
JUDGE_REQUESTS = Counter(
    "agora_judge_requests_total", "Valid judge requests", ["endpoint", "backend"]
)
JUDGE_CACHE_HITS = Counter(
    "agora_judge_cache_hits_total", "Verdicts served from Redis", ["endpoint"]
)
JUDGE_CACHE_MISSES = Counter(
    "agora_judge_cache_misses_total", "Verdicts not in the cache (judged afresh)", ["endpoint"]
)
for _endpoint in JUDGE_ENDPOINTS:
    JUDGE_CACHE_HITS.labels(_endpoint)
    JUDGE_CACHE_MISSES.labels(_endpoint)
JUDGE_CACHE_ERRORS = Counter(
    "agora_judge_cache_errors_total", "Redis errors, treated as misses", ["op"]
)
for _op in ("get", "set"):
    JUDGE_CACHE_ERRORS.labels(_op)
JUDGE_POSITION_BIAS = Counter(
    "agora_judge_position_bias_total",
    "Pairwise judgments whose two presentation orders disagreed",
    ["backend"],
)
JUDGE_ORDER_CHECKS = Counter(
    "agora_judge_order_checks_total",
    "Pairwise judgments with both orders parsed (denominator of the position-bias rate)",
    ["backend"],
)
JUDGE_MALFORMED = Counter(
    "agora_judge_malformed_verdicts_total",
    "Judge outputs without a parseable verdict or with missing scores (one per output)",
    ["endpoint", "backend"],
)
JUDGE_UPSTREAM_ERRORS = Counter(
    "agora_judge_upstream_errors_total",
    "Judge-model calls that failed after retries",
    ["status"],
)
JUDGE_LATENCY = Histogram(
    "agora_judge_seconds",
    "Time to answer a judge request",
    ["endpoint", "backend", "cached"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)


def init_judge_backend(backend: str) -> None:
    """Create a judge backend's series at 0, so its position-bias and malformed-verdict rates
    read 0 (not "no data") until the first disagreement."""
    JUDGE_POSITION_BIAS.labels(backend)
    JUDGE_ORDER_CHECKS.labels(backend)
    for endpoint in JUDGE_ENDPOINTS:
        JUDGE_REQUESTS.labels(endpoint, backend)
        JUDGE_MALFORMED.labels(endpoint, backend)


# --- gateway (agora/gateway/observe.py, agora/gateway/auth.py) -------------------------------
# Route labels are path templates (/v1/episodes/{episode_id}/moves), never raw paths.

GATEWAY_REQUESTS = Counter(
    "agora_gateway_requests_total", "Gateway requests by route and status", ["route", "status"]
)
GATEWAY_LATENCY = Histogram(
    "agora_gateway_request_seconds",
    "Gateway time to response headers (a stream's first byte), by route",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
GATEWAY_RATE_LIMITED = Counter(
    "agora_gateway_rate_limited_total", "Requests refused with 429, by API key name", ["key"]
)


# --- serving a process's metrics ------------------------------------------------------------


def serve_metrics(port: int | None, addr: str = "0.0.0.0") -> int | None:
    """Serve this process's metrics on ``port`` (None: don't), for processes that are not HTTP
    services (Celery workers: agora/rollout/settings.py reads their port). Returns the port.

    A taken port is logged, not raised: a worker's job is rollouts, and it must not stop
    playing episodes because its metrics side channel cannot bind.
    """
    if port is None:
        return None
    try:
        start_http_server(port, addr=addr)
    except OSError as err:
        log.error("cannot serve metrics on %s:%d (%s); serving none", addr, port, err)
        return None
    log.info("serving Prometheus metrics on %s:%d", addr, port)
    return port


# --- the catalogue ----------------------------------------------------------------------------


def exported_names() -> set[str]:
    """The name of every metric family agora exports (without the _total/_bucket/... suffixes
    Prometheus adds to samples), for checking dashboards against."""
    from agora.envs.registry import ENV_METRICS

    names = {m._name for m in globals().values() if isinstance(m, MetricWrapperBase)}
    trainer_keys = set(TRAINER_AGENT_METRICS)
    trainer_keys.update(k for metrics in ENV_METRICS.values() for k in metrics)
    names.update(trainer_gauge_name(k) for k in trainer_keys)
    names.update(SCRAPE_TIME_GAUGES)
    return names
