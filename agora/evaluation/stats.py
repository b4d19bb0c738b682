"""The statistics of ``agora eval``: intervals, pass@k, majority vote.

Kept free of I/O so each formula is unit-tested on its own (tests/integration/test_eval_cli.py).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Hashable, Sequence

Z95 = statistics.NormalDist().inv_cdf(0.975)  # 1.959964...

__all__ = ["Z95", "mean_interval", "majority_vote", "paired_difference",
           "paired_mean_difference", "pass_at_k", "rate", "wilson"]


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval of a success rate (95% by default): unlike p +/- 1.96 SE it stays
    inside [0, 1] and is honest at 0 or n successes. Five lines, so not worth statsmodels."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def rate(successes: float, n: int) -> dict[str, object]:
    """A proportion with its 95% Wilson score interval, as eval.json stores it. ``successes``
    may be fractional (a judge's 0.5 for a tie): the interval then treats the mean as the
    observed proportion of ``n`` trials."""
    p = successes / n if n else 0.0
    return {"rate": p, "n": n, "ci95": list(wilson(successes, n))}  # type: ignore[arg-type]


def mean_interval(values: Sequence[float], low: float | None = None,
                  high: float | None = None) -> dict[str, object]:
    """Mean with a 95% normal-approximation interval (mean +- 1.96 x sample sd / sqrt(n)),
    clipped to the metric's range [low, high] when it has one (a share cannot go below 0).
    No interval (None) under two values: one value says nothing about the spread."""
    n = len(values)
    if n == 0:
        return {"mean": 0.0, "n": 0, "ci95": None}
    mean = statistics.fmean(values)
    if n < 2:
        return {"mean": mean, "n": n, "ci95": None}
    half = Z95 * statistics.stdev(values) / math.sqrt(n)
    lo = mean - half if low is None else max(low, mean - half)
    hi = mean + half if high is None else min(high, mean + half)
    return {"mean": mean, "n": n, "ci95": [lo, hi]}


def paired_difference(evaluated: Sequence[bool], baseline: Sequence[bool]
                      ) -> dict[str, object]:
    """Difference of two success rates measured on the same seeds (evaluated - baseline), with
    Newcombe's (1998) square-and-add interval for paired proportions.

    Why paired: both policies play the same held-out seeds, and a seed that is hard for one is
    mostly hard for the other. Two separate Wilson intervals ignore that and overlap long after
    the difference is clear; this interval uses only the seeds where the two disagree
    (``evaluated_only``, ``baseline_only``) for the spread, through the phi correlation of the
    2x2 table (continuity-corrected, as Newcombe's method 10). Matches the published value for
    the table [[59, 6], [16, 80]]: -0.0621 (-0.1186 to -0.0046). Hand-written: neither scipy
    nor statsmodels offers it, and it is Wilson's interval plus six lines."""
    if len(evaluated) != len(baseline):
        raise ValueError(f"paired_difference: {len(evaluated)} evaluated outcomes against "
                         f"{len(baseline)} baseline ones; pairs need the same seeds")
    pairs = list(zip((bool(x) for x in evaluated), (bool(y) for y in baseline), strict=True))
    n = len(pairs)
    both = sum(x and y for x, y in pairs)
    evaluated_only = sum(x and not y for x, y in pairs)
    baseline_only = sum(y and not x for x, y in pairs)
    neither = n - both - evaluated_only - baseline_only
    counts = {"n": n, "both": both, "evaluated_only": evaluated_only,
              "baseline_only": baseline_only, "neither": neither}
    if n == 0:
        return {"difference": 0.0, "ci95": None, **counts}
    p1, p2 = (both + evaluated_only) / n, (both + baseline_only) / n
    (l1, u1), (l2, u2) = wilson(both + evaluated_only, n, Z95), wilson(both + baseline_only, n, Z95)
    margins = ((both + evaluated_only) * (baseline_only + neither)
               * (both + baseline_only) * (evaluated_only + neither))
    phi = 0.0
    if margins:
        cross = both * neither - evaluated_only * baseline_only
        corrected = cross - n / 2 if cross > n / 2 else min(cross, 0)
        phi = corrected / math.sqrt(margins)
    d = p1 - p2
    lo = d - math.sqrt(max(0.0, (p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2))
    hi = d + math.sqrt(max(0.0, (p2 - l2) ** 2 - 2 * phi * (p2 - l2) * (u1 - p1) + (u1 - p1) ** 2))
    return {"difference": d, "ci95": [max(-1.0, lo), min(1.0, hi)], **counts}


def paired_mean_difference(evaluated: Sequence[float], baseline: Sequence[float]
                           ) -> dict[str, object]:
    """Mean of per-unit differences (evaluated - baseline) of rates in [0, 1], with a 95%
    normal interval over the units: for scores that are themselves means (a task's accuracy
    over k discussions and both seats), where the task, not the single answer, is what varies
    independently. Answers to one task are not independent draws, so an interval over all
    answers is too narrow."""
    if len(evaluated) != len(baseline):
        raise ValueError(f"paired_mean_difference: {len(evaluated)} evaluated units against "
                         f"{len(baseline)} baseline ones")
    diffs = [float(x) - float(y) for x, y in zip(evaluated, baseline, strict=True)]
    summary = mean_interval(diffs, -1.0, 1.0)  # differences of rates stay within -1..1
    return {"difference": summary["mean"], "n": summary["n"], "ci95": summary["ci95"],
            "better": sum(v > 0 for v in diffs), "worse": sum(v < 0 for v in diffs)}


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chance that at least one of ``k`` samples drawn without replacement from ``n`` samples,
    ``c`` of them correct, is correct: the unbiased estimator of Chen et al. 2021 (Codex),
    ``1 - C(n-c, k) / C(n, k)``. With ``k = n`` it is 1 if any sample is correct, else 0."""
    if not 0 <= c <= n:
        raise ValueError(f"pass@k: need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k: need 1 <= k <= n, got k={k}, n={n}")
    if n - c < k:
        return 1.0
    # The product form avoids huge binomials: prod_{i=n-c+1}^{n} (1 - k / i).
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def majority_vote(answers: Sequence[Hashable | None]) -> Hashable | None:
    """The most common answer, ignoring None (no parsable answer). A tie goes to the answer
    that appeared first, so the vote is deterministic; None if no sample gave an answer."""
    given = [a for a in answers if a is not None]
    if not given:
        return None
    counts = Counter(given)
    top = max(counts.values())
    return next(a for a in given if counts[a] == top)
