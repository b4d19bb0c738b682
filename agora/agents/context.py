"""Context agents: the world a learner meets, made to change (docs/architecture.md
"Learning": non-stationary partners).

Three pieces:

* Scripted agents with the bots' interface (``act(env, rng) -> str``, see ``agora.agents.bots``), so
  the rollout runner seats them like any bot: negotiators (``greedy``, ``fair``, ``conceder``),
  two story writers (``template_writer``, the weaker ``short_writer``), two code authors (the
  known bug, ``buggy_author``, or the reference solution, ``reference_author``) and two
  reference fixers (``oracle_fixer``, ``copy_fixer``). They read the env's state, not the
  prompt, so they never make an illegal move.
* ``ScheduledAgent``: several strategies behind one seat, switched on a ``Schedule`` over a
  clock the caller advances (episode index or training update), so the learner cannot overfit
  one fixed partner.
* ``OpponentPool``: frozen snapshots of a learner (adapter name, path, version) with Elo
  ratings, sampled as opponents and persisted as JSON.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import random
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from agora.envs.code_debug import CodeDebug
from agora.envs.negotiation import Allocation, Negotiation
from agora.envs.research_agents import RESEARCH_AGENT_FITS, RESEARCH_AGENTS
from agora.envs.story import StoryWriting
from agora.envs.support_agents import SUPPORT_AGENT_FITS, SUPPORT_AGENTS
from agora.judge.rubric_backend import STOP_WORDS, words


class ContextAgent(Protocol):
    name: str

    def act(self, env: Any, rng: random.Random) -> str: ...


# --------------------------------------------------------------------------- negotiators


def share_offer(env: Negotiation, seat: int, share: float) -> Allocation:
    """An allocation giving ``seat`` at least ``share`` of its best total (if reachable).

    ``seat`` keeps its most valuable units first until it reaches ``share`` (never a unit worth
    0 to it); every other unit is dealt round-robin to the others. ``share=1`` is greedy.
    """
    me = env.agents[seat]
    others = [a for a in env.agents if a != me]
    alloc: Allocation = {a: dict.fromkeys(env.pool, 0) for a in env.agents}
    units = sorted(
        ((env.values[seat][k], i, k) for i, k in enumerate(env.pool) for _ in range(env.pool[k])),
        key=lambda u: (-u[0], u[1]),
    )
    best, got, dealt = env.max_value(seat), 0, 0
    for value, _, kind in units:
        if value > 0 and got < share * best - 1e-9:
            alloc[me][kind] += 1
            got += value
        else:
            alloc[others[dealt % len(others)]][kind] += 1
            dealt += 1
    return alloc


def even_split(env: Negotiation, seat: int) -> Allocation:
    """Each item's units dealt round-robin over all agents, the others served first."""
    order = env.agents[seat + 1 :] + env.agents[: seat + 1]
    alloc: Allocation = {a: dict.fromkeys(env.pool, 0) for a in env.agents}
    dealt = 0
    for kind, count in env.pool.items():
        for _ in range(count):
            alloc[order[dealt % len(order)]][kind] += 1
            dealt += 1
    return alloc


def negotiate(env: Negotiation, offer: Allocation, threshold: float, message: str) -> str:
    """The shared policy: accept a standing offer worth ``threshold`` or more to me, else put
    ``offer`` on the table (or wait if it is already standing)."""
    seat = env.current_seat
    standing = env.proposal
    if standing is not None and env.proposer != seat and (
        env.utility(seat, standing) >= threshold - 1e-9
    ):
        return "That works for me.\nACCEPT"
    if env.proposer == seat and env.proposal == offer:
        return "My offer stands."
    return f"{message}\n{env.format_proposal(offer)}"


class GreedyNegotiator:
    """Asks for every unit it values; accepts only offers worth ``threshold`` of its best."""

    name = "greedy"

    def __init__(self, threshold: float = 0.7) -> None:
        self.threshold = threshold

    def act(self, env: Negotiation, rng: random.Random) -> str:
        offer = share_offer(env, env.current_seat, 1.0)
        return negotiate(env, offer, self.threshold, "I need the things I value most.")


class FairNegotiator:
    """Proposes an even split; accepts offers worth ``slack`` times an equal share (1/n)."""

    name = "fair"

    def __init__(self, slack: float = 0.8) -> None:
        self.slack = slack

    def act(self, env: Negotiation, rng: random.Random) -> str:
        offer = even_split(env, env.current_seat)
        threshold = self.slack / env.num_seats
        return negotiate(env, offer, threshold, "Let us split everything evenly.")


class ConcederNegotiator:
    """Starts demanding, lowers its bar every round: ``max(floor, start - decay * round)``; it
    both asks for and accepts that share."""

    name = "conceder"

    def __init__(self, start: float = 0.9, decay: float = 0.15, floor: float = 0.2) -> None:
        self.start, self.decay, self.floor = start, decay, floor

    def threshold(self, round_index: int) -> float:
        return max(self.floor, self.start - self.decay * round_index)

    def act(self, env: Negotiation, rng: random.Random) -> str:
        threshold = self.threshold(env.round)
        offer = share_offer(env, env.current_seat, threshold)
        return negotiate(env, offer, threshold, "I can give a little more this time.")


# --------------------------------------------------------------------------- story, code

_OPENINGS = (
    "Then something changed around the {w}.",
    "Nobody had expected the {w} to matter so much.",
    "By evening, the {w} was all anyone could think about.",
    "A quiet sound drifted from somewhere near the {w}.",
)
_MIDDLES = (
    "Every step forward felt heavier than the last, yet curiosity kept pulling them on.",
    "Old stories about the {v} came back, half remembered and strangely vivid.",
    "A cold wind carried the smell of rain, and the light began to fade.",
    "Someone laughed nervously, trying to pretend that nothing unusual was happening.",
)
_ENDINGS = (
    "Whatever waited ahead, it was clear that the {w} held the answer.",
    "They agreed to follow the {v} wherever it led, no matter the cost.",
    "For the first time, turning back no longer seemed like a choice.",
    "Somewhere in the distance, a door closed softly, as if in reply.",
)


class TemplateStoryWriter:
    """Writes a template paragraph around words of the premise (a judge-friendly baseline:
    on topic, 30+ words, no repeated phrases). Never repeats an earlier paragraph."""

    name = "template_writer"

    def act(self, env: StoryWriting, rng: random.Random) -> str:
        topic = [w for w in words(env.premise) if len(w) >= 4 and w not in STOP_WORDS]
        topic = topic or ["journey"]
        taken = {" ".join(str(p["text"]).lower().split()) for p in env.paragraphs}
        text = ""
        for _ in range(20):
            w, v = rng.choice(topic), rng.choice(topic)
            text = " ".join(rng.choice(part).format(w=w, v=v)
                            for part in (_OPENINGS, _MIDDLES, _ENDINGS))
            if " ".join(text.lower().split()) not in taken:
                break
        return text


_SHORT = (
    "Then the {w} moved.",
    "Nobody spoke about the {w}.",
    "The {w} was gone by morning.",
    "Someone whispered about the {w} again.",
    "It all began with the {w}.",
    "The {w} and the {v} were connected.",
)


class ShortStoryWriter:
    """A lazy co-writer: one short sentence around a word of the premise. A weaker partner
    than ``template_writer`` (the judge's length and continuity scores of the story drop), so
    a writer scheduled against both has to carry the story sometimes."""

    name = "short_writer"

    def act(self, env: StoryWriting, rng: random.Random) -> str:
        topic = [w for w in words(env.premise) if len(w) >= 4 and w not in STOP_WORDS]
        topic = topic or ["door"]
        taken = {" ".join(str(p["text"]).lower().split()) for p in env.paragraphs}
        text = ""
        for _ in range(20):
            text = rng.choice(_SHORT).format(w=rng.choice(topic), v=rng.choice(topic))
            if " ".join(text.lower().split()) not in taken:
                break
        return text


class BuggyAuthor:
    """Emits the problem's known-buggy solution (the bug list), like a model answer."""

    name = "buggy_author"

    def act(self, env: CodeDebug, rng: random.Random) -> str:
        return f"Here is the function.\n```python\n{env.problem.buggy}```"


class ReferenceAuthor:
    """Emits the reference solution as the author: code with no bug, so a fixer that rewrites
    working code is punished. Alternated with ``buggy_author`` on a schedule, it keeps a fixer
    from learning "always change something"."""

    name = "reference_author"

    def act(self, env: CodeDebug, rng: random.Random) -> str:
        return f"Here is the function.\n```python\n{env.problem.solution}```"


class OracleFixer:
    """Emits the reference solution: an upper bound, and SFT data for the fixer."""

    name = "oracle_fixer"

    def act(self, env: CodeDebug, rng: random.Random) -> str:
        return f"```python\n{env.problem.solution}```"


class CopyFixer:
    """Returns the author's code unchanged: the do-nothing baseline."""

    name = "copy_fixer"

    def act(self, env: CodeDebug, rng: random.Random) -> str:
        return f"```python\n{env.author_code or ''}\n```"


CONTEXT_AGENTS: dict[str, type] = {
    "greedy": GreedyNegotiator,
    "fair": FairNegotiator,
    "conceder": ConcederNegotiator,
    "template_writer": TemplateStoryWriter,
    "short_writer": ShortStoryWriter,
    "buggy_author": BuggyAuthor,
    "reference_author": ReferenceAuthor,
    "oracle_fixer": OracleFixer,
    "copy_fixer": CopyFixer,
    **SUPPORT_AGENTS,  # support_oracle, support_router, support_guesser
    **RESEARCH_AGENTS,  # oracle_researcher, lazy_researcher, copy_writer
}
# Which env (and which role in it, None = any seat) each strategy plays: they read that env's
# state, so a run config seating one elsewhere is refused before anything starts.
CONTEXT_AGENT_FITS: dict[str, tuple[str, str | None]] = {
    "greedy": ("negotiation", None),
    "fair": ("negotiation", None),
    "conceder": ("negotiation", None),
    "template_writer": ("story", None),
    "short_writer": ("story", None),
    "buggy_author": ("code_debug", "author"),
    "reference_author": ("code_debug", "author"),
    "oracle_fixer": ("code_debug", "fixer"),
    "copy_fixer": ("code_debug", "fixer"),
    **SUPPORT_AGENT_FITS,
    **RESEARCH_AGENT_FITS,
}


def make_context_agent(name: str, **kwargs: Any) -> ContextAgent:
    try:
        return CONTEXT_AGENTS[name](**kwargs)
    except KeyError:
        raise ValueError(
            f"unknown context agent '{name}'; known: {sorted(CONTEXT_AGENTS)}"
        ) from None


# --------------------------------------------------------------------------- schedules


@dataclass(frozen=True)
class Schedule:
    """Which strategy is active at time ``t`` (an episode index or a training update).

    ``points`` are ``(start, name)`` with strictly increasing starts, the first at 0: strategy
    ``name`` is active from ``start`` until the next start. With ``period`` the schedule
    repeats: ``t`` is taken modulo ``period``.
    """

    points: tuple[tuple[int, str], ...]
    period: int | None = None

    def __post_init__(self) -> None:
        points = tuple((int(s), str(n)) for s, n in self.points)
        object.__setattr__(self, "points", points)
        starts = [s for s, _ in points]
        if not points or starts[0] != 0:
            raise ValueError("schedule: the first point must start at 0")
        if any(b <= a for a, b in zip(starts, starts[1:], strict=False)):
            raise ValueError("schedule: starts must be strictly increasing")
        if self.period is not None and self.period <= starts[-1]:
            raise ValueError("schedule: period must be after the last start")

    @classmethod
    def cycling(cls, names: list[str], every: int) -> Schedule:
        """Each name for ``every`` steps in turn, round and round."""
        if every < 1 or not names:
            raise ValueError("schedule: cycling needs names and every >= 1")
        return cls(tuple((i * every, n) for i, n in enumerate(names)), period=every * len(names))

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(n for _, n in self.points))

    def at(self, t: int) -> str:
        if t < 0:
            raise ValueError("schedule: time must be >= 0")
        if self.period is not None:
            t %= self.period
        i = bisect.bisect_right([s for s, _ in self.points], t) - 1
        return self.points[i][1]


class ScheduledAgent:
    """One seat, several strategies, switched by ``schedule`` as the caller advances time.

    The clock is external on purpose: rollout workers are separate processes, so the trainer
    (which knows the episode index or its update number) passes the time in with ``set_time``
    (``next_episode`` for a local loop). ``switches`` logs ``(t, old, new)`` for metrics.
    """

    def __init__(
        self,
        strategies: dict[str, ContextAgent],
        schedule: Schedule | list[tuple[int, str]],
        clock: Literal["episode", "update"] = "episode",
    ) -> None:
        self.schedule = schedule if isinstance(schedule, Schedule) else Schedule(tuple(schedule))
        missing = [n for n in self.schedule.names if n not in strategies]
        if missing:
            raise ValueError(f"scheduled agent: no strategy for {missing}")
        self.strategies = strategies
        self.clock = clock
        self.time = 0
        self.active = self.schedule.at(0)
        self.switches: list[tuple[int, str, str]] = []

    @classmethod
    def from_names(
        cls,
        schedule: Schedule | list[tuple[int, str]],
        clock: Literal["episode", "update"] = "episode",
    ) -> ScheduledAgent:
        """Strategies built by name from ``CONTEXT_AGENTS`` with default settings."""
        sched = schedule if isinstance(schedule, Schedule) else Schedule(tuple(schedule))
        return cls({n: make_context_agent(n) for n in sched.names}, sched, clock)

    @property
    def name(self) -> str:
        return f"scheduled:{self.active}"

    def set_time(self, t: int) -> str:
        """Move the clock to ``t``; returns the strategy now active."""
        new = self.schedule.at(t)
        if new != self.active:
            self.switches.append((t, self.active, new))
        self.time, self.active = t, new
        return new

    def next_episode(self) -> str:
        return self.set_time(self.time + 1)

    def act(self, env: Any, rng: random.Random) -> str:
        return self.strategies[self.active].act(env, rng)


# --------------------------------------------------------------------------- opponent pool


@dataclass
class Snapshot:
    """A rated player. Frozen learner snapshots have a path and a version; other players (the
    live learner, a scripted bot) are rated too but never sampled as opponents."""

    name: str
    path: str | None = None
    version: int | None = None
    rating: float = 1000.0
    games: int = 0

    @property
    def frozen(self) -> bool:
        return self.path is not None

    @property
    def owner(self) -> str | None:
        """The agent a snapshot froze (its name is ``<agent>@v<N>``; "" for a snapshot named
        otherwise); None for other players."""
        return snapshot_owner(self.name) if self.frozen else None


def snapshot_owner(name: str) -> str:
    return name.rsplit("@v", 1)[0] if "@v" in name else ""


def elo_expected(rating_a: float, rating_b: float) -> float:
    """A's expected score against B: ``1 / (1 + 10 ** ((R_b - R_a) / 400))``."""
    return 1.0 / (1.0 + 10.0 ** ((rating_b - rating_a) / 400.0))


class OpponentPool:
    """Frozen learner snapshots with Elo ratings; sampled as opponents, saved as JSON.

    One pool may hold the snapshots of several learners (a league: every rating on one scale);
    ``owner`` picks one learner's snapshots when adding (``max_snapshots`` is per learner),
    listing and sampling.

    Elo update for a game between A and B where A scores ``s`` (1 win, 0.5 draw, 0 loss):
    ``E = 1 / (1 + 10 ** ((R_B - R_A) / 400))``, ``R_A += K (s - E)``, ``R_B += K ((1 - s) -
    (1 - E))``. Both changes are equal and opposite, so the total rating is conserved.

    Sampling (``sample``): ``"latest"`` picks the newest snapshot with probability
    ``latest_prob``, else one uniformly from all of them (recent strength plus old strategies,
    against forgetting); ``"uniform"`` ignores age; ``"recency"`` weights a snapshot by
    ``gamma ** age`` where age 0 is the newest; ``"pfsp"`` is AlphaStar's prioritised
    fictitious self-play: a snapshot weighs ``(1 - p) ** power``, p the Elo-expected score of
    ``against`` (the learner) versus it, so the learner meets most the snapshots it does not
    yet beat, and rarely those it beats every time (``power`` 0 is uniform).
    """

    def __init__(
        self, k: float = 32.0, initial_rating: float = 1000.0, max_snapshots: int | None = None
    ) -> None:
        self.k = k
        self.initial_rating = initial_rating
        self.max_snapshots = max_snapshots
        self.players: dict[str, Snapshot] = {}

    # ---- members

    def add_snapshot(
        self, name: str, path: str, version: int, rating: float | None = None
    ) -> Snapshot:
        """Freeze a learner version. Without ``rating`` it starts at the newest snapshot's
        rating (it is that learner, a bit later), or at ``initial_rating`` for the first."""
        if name in self.players:
            raise ValueError(f"opponent pool: '{name}' is already in the pool")
        owner = snapshot_owner(name)
        if rating is None:
            latest = self.latest(owner) if self.snapshots(owner) else None
            rating = latest.rating if latest else self.initial_rating
        snap = Snapshot(name=name, path=str(path), version=int(version), rating=float(rating))
        self.players[name] = snap
        self._evict(owner)
        return snap

    def player(self, name: str) -> Snapshot:
        """A rated player by name; unknown names (the live learner, bots) join at
        ``initial_rating``."""
        if name not in self.players:
            self.players[name] = Snapshot(name=name, rating=self.initial_rating)
        return self.players[name]

    def snapshots(self, owner: str | None = None) -> list[Snapshot]:
        """Frozen snapshots (of ``owner`` only, if given), oldest first."""
        frozen = [p for p in self.players.values()
                  if p.frozen and (owner is None or p.owner == owner)]
        return sorted(frozen, key=lambda p: (p.version or 0, p.name))

    def latest(self, owner: str | None = None) -> Snapshot:
        snaps = self.snapshots(owner)
        if not snaps:
            raise LookupError("opponent pool: no snapshots yet")
        return snaps[-1]

    def _evict(self, owner: str | None) -> None:
        """Keep ``owner``'s newest ``max_snapshots`` snapshots (their ratings go with them)."""
        snaps = self.snapshots(owner)
        if self.max_snapshots is not None:
            for old in snaps[: max(0, len(snaps) - self.max_snapshots)]:
                del self.players[old.name]

    # ---- sampling

    def sample(
        self,
        rng: random.Random,
        mode: Literal["latest", "uniform", "recency", "pfsp"] = "latest",
        latest_prob: float = 0.5,
        gamma: float = 0.8,
        against: str | None = None,
        power: float = 2.0,
        owner: str | None = None,
    ) -> Snapshot:
        snaps = self.snapshots(owner)
        if not snaps:
            raise LookupError("opponent pool: no snapshots to sample")
        if mode == "pfsp":
            return rng.choices(snaps, weights=self.pfsp_weights(against, power, owner))[0]
        if mode == "latest":
            return snaps[-1] if rng.random() < latest_prob else rng.choice(snaps)
        if mode == "uniform":
            return rng.choice(snaps)
        if mode == "recency":
            weights = [gamma ** (len(snaps) - 1 - i) for i in range(len(snaps))]
            return rng.choices(snaps, weights=weights)[0]
        raise ValueError(f"opponent pool: unknown sampling mode '{mode}'")

    def pfsp_weights(self, against: str | None, power: float = 2.0,
                     owner: str | None = None) -> list[float]:
        """PFSP's sampling weight of each snapshot (of ``owner``, oldest first) for the player
        ``against``."""
        if against is None:
            raise ValueError("opponent pool: pfsp sampling needs the learner's name")
        rating = self.player(against).rating
        weights = [(1.0 - elo_expected(rating, s.rating)) ** power
                   for s in self.snapshots(owner)]
        # Elo never gives p = 1 exactly, but floats can: keep every snapshot reachable.
        return [max(w, 1e-6) for w in weights]

    # ---- ratings

    def update(self, a: str, b: str, score_a: float) -> tuple[float, float]:
        """Record one game (``score_a`` = 1 win, 0.5 draw, 0 loss for A); returns new ratings."""
        if a == b:
            raise ValueError("opponent pool: a player cannot play itself")
        if not 0.0 <= score_a <= 1.0:
            raise ValueError("opponent pool: score must be in [0, 1]")
        pa, pb = self.player(a), self.player(b)
        delta = self.k * (score_a - elo_expected(pa.rating, pb.rating))
        pa.rating += delta
        pb.rating -= delta
        pa.games += 1
        pb.games += 1
        return pa.rating, pb.rating

    def record(self, a: str, b: str, result: str) -> tuple[float, float]:
        """``update`` from a result as ``Outcome.result_for`` names it, from A's side (an
        illegal move counts as a loss)."""
        scores = {"win": 1.0, "draw": 0.5, "loss": 0.0, "illegal": 0.0}
        if result not in scores:
            raise ValueError(f"opponent pool: unknown result '{result}'")
        return self.update(a, b, scores[result])

    def ratings(self) -> dict[str, float]:
        return {n: p.rating for n, p in self.players.items()}

    # ---- persistence

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "initial_rating": self.initial_rating,
            "max_snapshots": self.max_snapshots,
            "players": [asdict(p) for p in self.players.values()],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpponentPool:
        pool = cls(k=data["k"], initial_rating=data["initial_rating"],
                   max_snapshots=data.get("max_snapshots"))
        for p in data["players"]:
            if not math.isfinite(float(p["rating"])):
                raise ValueError(f"opponent pool: bad rating for '{p['name']}'")
            pool.players[p["name"]] = Snapshot(**p)
        return pool

    def save(self, path: str | Path) -> None:
        """Write atomically (temp file + rename): a crash mid-write keeps the old file."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.to_dict(), fh, indent=1)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: str | Path) -> OpponentPool:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
