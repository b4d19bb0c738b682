"""Non-stationarity: how a learner fares when its scripted partner switches strategy.

A scheduled context agent (``context_agents.<key>.cycle`` / ``schedule``) plays the strategy
its schedule gives at the clock, the learner's policy version; each episode records both (its
seat ``bot:context:<key>/<strategy>`` and ``info.clock``). From a run's episodes.jsonl this
module rebuilds the learner's mean reward per update, the segments of updates played against
one strategy, and for every return to a strategy met before:

* **forgetting**: the reward at the end of the previous segment against it minus the reward at
  the start of this one (what the updates against other strategies cost);
* **recovery**: the updates into the segment until the reward is back to that earlier level
  (None when it never is within the segment).

Rewards of different strategies are not compared with each other: a greedy partner leaves less
to win than a fair one, so "back to the level before the switch" only means something against
the same strategy.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

CONTEXT_SEAT = "bot:context:"


def seated_strategies(seats: list[str]) -> dict[str, str]:
    """``{context agent key: the strategy it played}`` from an episode's seats, which name a
    context seat ``bot:context:<key>/<strategy>`` (``rollout.seating.ContextSeat``)."""
    out = {}
    for seat in seats:
        if seat.startswith(CONTEXT_SEAT) and "/" in seat:
            key, strategy = seat.removeprefix(CONTEXT_SEAT).split("/", 1)
            out[key] = strategy
    return out


@dataclass(frozen=True)
class Segment:
    strategy: str
    start: int  # first update (clock) of the segment
    end: int  # last update
    rewards: list[float]  # the learner's mean reward per update, start..end (None-free)


@dataclass(frozen=True)
class Return:
    """A segment against a strategy the learner met before."""

    strategy: str
    start: int
    before: float  # reward at the end of the previous segment against it
    first: float  # reward in this segment's first update
    forgetting: float  # before - first
    recovered_after: int | None  # updates into the segment until reward >= before


def reward_by_update(episodes: Path, learner: str, seat_key: str | None = None
                     ) -> dict[int, tuple[str, float]]:
    """``{clock: (partner strategy, the learner's mean reward)}`` over the episodes played
    against a scheduled context seat (``seat_key``: which one, when there are several)."""
    grouped: dict[int, tuple[str, list[float]]] = {}
    for line in episodes.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:  # a cut last line of a killed run
            continue
        clock = record.get("info", {}).get("clock")
        played = seated_strategies(record["seats"])
        strategy = (played.get(seat_key) if seat_key is not None
                    else next(iter(played.values()), None))
        if clock is None or strategy is None or learner not in record.get("rewards", {}):
            continue
        grouped.setdefault(int(clock), (strategy, []))[1].append(
            float(record["rewards"][learner]))
    return {clock: (strategy, statistics.fmean(values))
            for clock, (strategy, values) in sorted(grouped.items())}


def segments(by_update: dict[int, tuple[str, float]]) -> list[Segment]:
    """Runs of consecutive updates against one strategy."""
    out: list[Segment] = []
    for clock, (strategy, reward) in sorted(by_update.items()):
        if out and out[-1].strategy == strategy:
            last = out[-1]
            out[-1] = Segment(strategy, last.start, clock, [*last.rewards, reward])
        else:
            out.append(Segment(strategy, clock, clock, [reward]))
    return out


def returns(parts: list[Segment], window: int = 2) -> list[Return]:
    """Every segment against a strategy seen before, against its previous segment's level
    (the mean of that segment's last ``window`` updates)."""
    seen: dict[str, Segment] = {}
    out = []
    for segment in parts:
        previous = seen.get(segment.strategy)
        if previous is not None:
            before = statistics.fmean(previous.rewards[-window:])
            recovered = next((i for i, r in enumerate(segment.rewards) if r >= before), None)
            out.append(Return(segment.strategy, segment.start, before, segment.rewards[0],
                              before - segment.rewards[0], recovered))
        seen[segment.strategy] = segment
    return out


def switching_report(episodes: Path, learner: str) -> dict:
    """The curve, its segments and the returns, as results.json stores them ({} when the run
    had no scheduled partner that switched)."""
    if not episodes.is_file():
        return {}
    by_update = reward_by_update(episodes, learner)
    parts = segments(by_update)
    if len({s.strategy for s in parts}) < 2:
        return {}
    back = returns(parts)
    recovered = [r.recovered_after for r in back if r.recovered_after is not None]
    # The learner's mean reward against each strategy over the run: when these hardly differ,
    # the partner's switches change nothing for the learner, and "recovered" is vacuous.
    per_strategy = {strategy: round(statistics.fmean(r for _, (s, r) in by_update.items()
                                                     if s == strategy), 4)
                    for strategy in dict.fromkeys(s.strategy for s in parts)}
    return {
        "learner": learner,
        "curve": [[clock, strategy, round(reward, 4)]
                  for clock, (strategy, reward) in by_update.items()],
        "segments": [{"strategy": s.strategy, "start": s.start, "end": s.end,
                      "first": s.rewards[0], "last": s.rewards[-1]} for s in parts],
        "returns": [asdict(r) for r in back],
        "summary": {
            "switches": len(parts) - 1,
            "returns": len(back),
            "recovered": len(recovered),
            "median_updates_to_recover": statistics.median(recovered) if recovered else None,
            "mean_forgetting": statistics.fmean(r.forgetting for r in back) if back else None,
            "reward_by_strategy": per_strategy,
            "partner_effect": round(max(per_strategy.values()) - min(per_strategy.values()), 4),
        },
    }
