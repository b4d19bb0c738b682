"""Judge metrics (names start with ``agora_judge_``), defined with every other agora metric in
``agora.metrics`` and re-exported here under the short names the judge code uses. HTTP request
counts and latency per route come from ``agora.metrics.instrument``.

Rates for dashboards:
- cache hit rate = hits / (hits + misses);
- position-bias rate = position_bias / order_checks (judgments where both orders parsed, the
  only ones where bias can be seen); cache hits are not re-counted in either.
"""

from __future__ import annotations

from agora.metrics import JUDGE_CACHE_ERRORS as CACHE_ERRORS
from agora.metrics import JUDGE_CACHE_HITS as CACHE_HITS
from agora.metrics import JUDGE_CACHE_MISSES as CACHE_MISSES
from agora.metrics import JUDGE_LATENCY as LATENCY
from agora.metrics import JUDGE_MALFORMED as MALFORMED
from agora.metrics import JUDGE_ORDER_CHECKS as ORDER_CHECKS
from agora.metrics import JUDGE_POSITION_BIAS as POSITION_BIAS
from agora.metrics import JUDGE_REQUESTS as REQUESTS
from agora.metrics import JUDGE_UPSTREAM_ERRORS as UPSTREAM_ERRORS
from agora.metrics import init_judge_backend

__all__ = [
    "CACHE_ERRORS", "CACHE_HITS", "CACHE_MISSES", "LATENCY", "MALFORMED", "ORDER_CHECKS",
    "POSITION_BIAS", "REQUESTS", "UPSTREAM_ERRORS", "init_judge_backend",
]
