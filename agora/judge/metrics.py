"""Judge metrics (Prometheus, names start with ``agora_judge_``). HTTP request counts and
latency per route come from ``agora.metrics.instrument``; these add what only the judge knows.

Rates for dashboards:
- cache hit rate = hits / (hits + misses);
- position-bias rate = position_bias / order_checks (judgments where both orders parsed, the
  only ones where bias can be seen); cache hits are not re-counted in either.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

REQUESTS = Counter(
    "agora_judge_requests_total", "Valid judge requests", ["endpoint", "backend"]
)
CACHE_HITS = Counter("agora_judge_cache_hits_total", "Verdicts served from Redis", ["endpoint"])
CACHE_MISSES = Counter(
    "agora_judge_cache_misses_total", "Verdicts not in the cache (judged afresh)", ["endpoint"]
)
CACHE_ERRORS = Counter(
    "agora_judge_cache_errors_total", "Redis errors, treated as misses", ["op"]
)
POSITION_BIAS = Counter(
    "agora_judge_position_bias_total",
    "Pairwise judgments whose two presentation orders disagreed",
    ["backend"],
)
ORDER_CHECKS = Counter(
    "agora_judge_order_checks_total",
    "Pairwise judgments with both orders parsed (denominator of the position-bias rate)",
    ["backend"],
)
MALFORMED = Counter(
    "agora_judge_malformed_verdicts_total",
    "Judge outputs without a parseable verdict or with missing scores (one per output)",
    ["endpoint", "backend"],
)
UPSTREAM_ERRORS = Counter(
    "agora_judge_upstream_errors_total",
    "Judge-model calls that failed after retries",
    ["status"],
)
LATENCY = Histogram(
    "agora_judge_seconds",
    "Time to answer a judge request",
    ["endpoint", "backend", "cached"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
