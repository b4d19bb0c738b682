"""Negotiation over a pool of items among 2-3 agents with private values (Deal-or-No-Deal style).

Why this env: agents must communicate to find a split, each seeing only its own values, so the
learner has to model the others from what they say and propose. The pool (3 item kinds with
1-4 units each) and every agent's per-unit values (0-5) are drawn from the seed.

Turns go round-robin, ``max_rounds`` rounds of one turn each. A turn is free text: a message,
optionally with one of

* a proposal line ``PROPOSE: alice=books:2,hats:0,balls:1; bob=books:0,hats:1,balls:2``
  (case-insensitive; ``alice:`` for ``alice=``, ``books 2`` or a singular item name also
  read; the allocation may continue on following lines that contain ``=``; words that are
  neither counts nor items are ignored; agents or items left out get 0, and units given to
  nobody are lost);
* ``ACCEPT`` (in capitals anywhere, or any case at the start of a line): agree to the standing
  proposal.

A valid proposal replaces the standing one (its proposer counts as accepting it, nobody else
does); a deal is made as soon as every other agent has accepted it. A proposal wins over an
ACCEPT in the same turn (and a bad proposal voids that ACCEPT too). After ``max_rounds``
rounds without a deal everyone gets nothing.

Illegal moves (an unreadable proposal, one that over-allocates or names an unknown agent or
item, ACCEPT with nothing to accept or of one's own proposal) are *not* forfeits: a negotiation
should go on, so the turn's proposal/acceptance is ignored, the move is counted per agent and
logged, and the next agent plays. ``StepResult.legal`` is False for them.

Like the discussion env, nobody "wins": ``Outcome.winner`` is None and the scores come from
``negotiation_scores(outcome.info)``.
"""

from __future__ import annotations

import math
import random
import re

from pydantic import Field

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.spec import EnvOptions, EnvSpec, RubricName

AGENT_NAMES = ("alice", "bob", "carol")
ITEM_KINDS = ("books", "hats", "balls", "pens", "cups", "apples")
NUM_KINDS = 3
MAX_COUNT = 4
MAX_VALUE = 5
MAX_STORED_CHARS = 1000  # per transcript entry: a runaway generation must not bloat records
MAX_SHOWN_CHARS = 200  # per message in the prompt (a 135M model reads it)
# The prompt shows the last num_agents + 1 messages: everyone's latest word plus the one before
# (with 3 agents and full proposals that keeps the prompt near 500 SmolLM2 tokens).

_PROPOSE = re.compile(r"propose\s*:", re.IGNORECASE)
_ACCEPT_LINE = re.compile(r"^[\W_]*accept\b", re.IGNORECASE | re.MULTILINE)
_ACCEPT_WORD = re.compile(r"\bACCEPT\b")
# "alice=" or "alice:" for a known name, "name=" for any other word, but never "books=2".
_AGENT_START = re.compile(
    r"\b(?:(" + "|".join(AGENT_NAMES) + r")\s*[=:](?!\s*\d)|([A-Za-z]+)\s*=(?!\s*\d))",
    re.IGNORECASE,
)
_ITEM_PAIR = re.compile(r"([A-Za-z]+)\s*[:=]?\s*(\d+)")

Allocation = dict[str, dict[str, int]]


class ProposalError(ValueError):
    """A proposal that cannot be read or cannot be carried out; the message is shown in logs."""


def find_proposal(text: str) -> str | None:
    """The allocation text after the first ``PROPOSE:``; None when the turn has no proposal.

    The allocation may run over several lines (``PROPOSE:`` then one ``name=...`` per line): the
    first line is always taken, following lines while they contain ``=``.
    """
    match = _PROPOSE.search(text)
    if match is None:
        return None
    lines = text[match.end() :].split("\n")
    taken = [lines[0]]
    for line in lines[1:]:
        if "=" not in line:
            break
        taken.append(line)
    return " ".join(taken)


def wants_accept(text: str) -> bool:
    return bool(_ACCEPT_WORD.search(text) or _ACCEPT_LINE.search(text))


def _item_name(word: str, pool: dict[str, int]) -> str:
    word = word.lower()
    for kind in pool:
        if word in (kind, kind.rstrip("s")):
            return kind
    raise ProposalError(f"unknown item '{word}' (items: {', '.join(pool)})")


def _is_item(word: str, pool: dict[str, int]) -> bool:
    try:
        _item_name(word, pool)
    except ProposalError:
        return False
    return True


def parse_allocation(text: str, agents: list[str], pool: dict[str, int]) -> Allocation:
    """Read ``alice=books:2,hats:0; bob=...`` into a full allocation (every agent, every item).

    Raises ProposalError for anything unreadable or impossible, so the env can count it.
    """
    starts = list(_AGENT_START.finditer(text))
    if not starts:
        raise ProposalError("no 'name=item:count' part after PROPOSE:")
    alloc: Allocation = {a: dict.fromkeys(pool, 0) for a in agents}
    seen: set[str] = set()
    for i, match in enumerate(starts):
        name = match.group(1) or match.group(2)
        body = text[match.end() : starts[i + 1].start() if i + 1 < len(starts) else len(text)]
        agent = name.lower()
        if agent not in alloc:
            raise ProposalError(f"unknown agent '{name}' (agents: {', '.join(agents)})")
        if agent in seen:
            raise ProposalError(f"agent '{agent}' is listed twice")
        seen.add(agent)
        items: set[str] = set()
        for word, digits in _ITEM_PAIR.findall(body):
            kind = _item_name(word, pool)
            if kind in items:
                raise ProposalError(f"item '{kind}' is listed twice for {agent}")
            if len(digits) > 6:
                raise ProposalError(f"count {digits[:8]}... for {kind} is too large")
            items.add(kind)
            alloc[agent][kind] = int(digits)
        # Chatter after a share ("... balls:2. thanks") is fine; a count or an item that did
        # not pair up ("books:lots", "3 books") is not.
        leftover = re.findall(r"[A-Za-z0-9]+", _ITEM_PAIR.sub(" ", body))
        unread = [w for w in leftover if w.isdigit() or _is_item(w, pool)]
        if unread:
            raise ProposalError(f"cannot read '{' '.join(unread)[:40]}' in {agent}'s share")
    for kind, count in pool.items():
        given = sum(share[kind] for share in alloc.values())
        if given > count:
            raise ProposalError(f"over-allocates {kind}: {given} given, {count} in the pool")
    return alloc


def format_allocation(alloc: Allocation) -> str:
    """The canonical proposal text (what scripted agents write and prompts show)."""
    return "; ".join(
        f"{agent}=" + ",".join(f"{kind}:{n}" for kind, n in share.items())
        for agent, share in alloc.items()
    )


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


class Negotiation:
    """2-3 agents split a seeded pool of items; see the module docstring for the rules."""

    name = "negotiation"

    def __init__(self, num_agents: int = 2, max_rounds: int = 4) -> None:
        if not 2 <= num_agents <= len(AGENT_NAMES):
            raise ValueError(f"negotiation: needs 2-{len(AGENT_NAMES)} agents")
        if max_rounds < 1:
            raise ValueError("negotiation: needs at least one round")
        self.num_seats = num_agents
        self.max_rounds = max_rounds
        self.agents = list(AGENT_NAMES[:num_agents])
        self.reset(0)

    def reset(self, seed: int = 0) -> None:
        rng = random.Random(seed)
        kinds = sorted(rng.sample(ITEM_KINDS, NUM_KINDS), key=ITEM_KINDS.index)
        self.pool: dict[str, int] = {k: rng.randint(1, MAX_COUNT) for k in kinds}
        self.values: list[dict[str, int]] = []
        for _ in range(self.num_seats):
            values = {k: rng.randint(0, MAX_VALUE) for k in kinds}
            while not any(values.values()):  # everyone must have something to negotiate for
                values = {k: rng.randint(0, MAX_VALUE) for k in kinds}
            self.values.append(values)
        self.proposal: Allocation | None = None
        self.proposer: int | None = None
        self.accepted: set[int] = set()
        self.deal = False
        self.transcript: list[dict[str, object]] = []
        self.illegal = [0] * self.num_seats
        self.illegal_moves: list[dict[str, object]] = []
        self._turn = 0

    # ------------------------------------------------------------------ protocol

    @property
    def current_seat(self) -> int:
        return self._turn % self.num_seats

    @property
    def round(self) -> int:
        return self._turn // self.num_seats

    @property
    def done(self) -> bool:
        return self.deal or self._turn >= self.max_rounds * self.num_seats

    def role(self, seat: int) -> str:
        return self.agents[seat]

    def legal_actions(self) -> list[str]:
        """Only ``ACCEPT`` is enumerable; proposals are free-form (see ``format_allocation``)."""
        if self.done or self.proposal is None or self.proposer == self.current_seat:
            return []
        return ["ACCEPT"]

    def observation(self, seat: int) -> list[ChatMessage]:
        me = self.agents[seat]
        others = [a for a in self.agents if a != me]
        system = (
            f"You are {me}, splitting items with {' and '.join(others)}. Each values the items "
            "differently and sees only their own values. You score the value of the items you "
            "get; with no deal everyone scores 0. Write a short message. To propose a split, add "
            f"a line like\nPROPOSE: {format_allocation(self._example())}\n"
            "To agree to the standing proposal, write ACCEPT. A deal needs everyone else to "
            "accept. Items given to nobody are lost."
        )
        lines = [
            "Items: " + ", ".join(f"{k}={n}" for k, n in self.pool.items()),
            "Your value per item: " + ", ".join(f"{k}={v}" for k, v in self.values[seat].items())
            + f" (all items are worth {self.max_value(seat)} to you)",
            f"Round {min(self.round, self.max_rounds - 1) + 1} of {self.max_rounds}.",
        ]
        shown = self.transcript[-(self.num_seats + 1) :]
        if shown:
            lines.append("Messages:")
            lines += [f"{e['agent']}: {_clip(str(e['text']).strip(), MAX_SHOWN_CHARS)}"
                      for e in shown]
        if self.proposal is not None and self.proposer is not None:
            lines.append(f"Standing proposal by {self.agents[self.proposer]}: "
                         f"{format_allocation(self.proposal)}")
            lines.append("Accepted by: " + ", ".join(self.agents[s] for s in sorted(self.accepted)))
        lines.append(f"Your turn, {me}:")
        user = "\n".join(lines)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(legal=False, done=True, reason="negotiation is over")
        seat = self.current_seat
        entry: dict[str, object] = {
            "turn": self._turn,
            "agent": self.agents[seat],
            "text": _clip(action, MAX_STORED_CHARS),
            "kind": "message",
        }
        reason = self._apply(seat, action, entry)
        self.transcript.append(entry)
        if reason:
            entry["kind"] = "illegal"
            self.illegal[seat] += 1
            self.illegal_moves.append({"turn": self._turn, "agent": self.agents[seat],
                                       "reason": reason})
        self._turn += 1
        return StepResult(legal=not reason, done=self.done,
                          reason=reason or ("deal" if self.deal else ""))

    def _apply(self, seat: int, action: str, entry: dict[str, object]) -> str:
        """Apply the turn's proposal or acceptance; returns why it is illegal ('' if legal)."""
        found = find_proposal(action)
        if found is not None:
            try:
                alloc = parse_allocation(found, self.agents, self.pool)
            except ProposalError as err:
                return f"bad proposal: {err}"
            self.proposal, self.proposer, self.accepted = alloc, seat, {seat}
            entry.update(kind="propose", proposal=alloc)
            return ""
        if wants_accept(action):
            if self.proposal is None:
                return "ACCEPT with no standing proposal"
            if self.proposer == seat:
                return "ACCEPT of one's own proposal"
            self.accepted.add(seat)
            entry["kind"] = "accept"
            self.deal = len(self.accepted) == self.num_seats
        return ""

    def outcome(self) -> Outcome:
        if self.deal:
            reason = "deal"
        elif self.done:
            reason = f"no deal after {self.max_rounds} rounds"
        else:
            reason = "unfinished"
        alloc = self.proposal if self.deal else None
        info: dict[str, object] = {
            "agents": list(self.agents),
            "pool": dict(self.pool),
            "values": {a: dict(v) for a, v in zip(self.agents, self.values, strict=True)},
            "deal": self.deal,
            "allocation": alloc,
            "proposer": self.agents[self.proposer] if self.deal and self.proposer is not None
            else None,
            "utility": {a: (self.utility(s, alloc) if alloc else 0.0)
                        for s, a in enumerate(self.agents)},
            "value": {a: (self.value(s, alloc) if alloc else 0) for s, a in enumerate(self.agents)},
            "transcript": [dict(e) for e in self.transcript],
            "illegal": dict(zip(self.agents, self.illegal, strict=True)),
            "illegal_moves": list(self.illegal_moves),
            "turns": self._turn,
            "max_rounds": self.max_rounds,
        }
        return Outcome(winner=None, draw=False, reason=reason, info=info)

    # ------------------------------------------------------------------ helpers for agents

    def max_value(self, seat: int) -> int:
        """What the whole pool is worth to ``seat``: the normaliser of its utility."""
        return sum(self.pool[k] * v for k, v in self.values[seat].items())

    def value(self, seat: int, alloc: Allocation) -> int:
        share = alloc[self.agents[seat]]
        return sum(share[k] * v for k, v in self.values[seat].items())

    def utility(self, seat: int, alloc: Allocation) -> float:
        """Value of ``seat``'s share over the value of the whole pool to it, in [0, 1]."""
        return self.value(seat, alloc) / self.max_value(seat)

    def format_proposal(self, alloc: Allocation) -> str:
        return f"PROPOSE: {format_allocation(alloc)}"

    def _example(self) -> Allocation:
        """A format example for the prompt: units dealt round-robin (not a suggested deal)."""
        alloc: Allocation = {a: dict.fromkeys(self.pool, 0) for a in self.agents}
        i = 0
        for kind, count in self.pool.items():
            for _ in range(count):
                alloc[self.agents[i % self.num_seats]][kind] += 1
                i += 1
        return alloc


def negotiation_scores(info: dict) -> dict[str, object]:
    """Reward parts from ``Outcome.info`` (also after a JSON round trip).

    - ``utility``: per agent, the normalised value of what it got (0 without a deal);
    - ``nash``: the product of the utilities (Nash bargaining product): high only when every
      agent gets a good share, 0 if anyone gets nothing;
    - ``min_utility``: the worst-off agent's utility (egalitarian fairness);
    - ``welfare``: the mean utility (joint welfare, in [0, 1]);
    - ``deal``: 1.0 or 0.0; ``illegal``: illegal moves per agent.
    """
    agents = list(info["agents"])
    utility = {a: float(info["utility"][a]) for a in agents}
    values = list(utility.values())
    return {
        "deal": 1.0 if info["deal"] else 0.0,
        "utility": utility,
        "nash": math.prod(values),
        "min_utility": min(values),
        "welfare": sum(values) / len(values),
        "illegal": {a: int(info["illegal"][a]) for a in agents},
    }


class NegotiationOptions(EnvOptions):
    """``environment.name: negotiation`` (agora/envs/negotiation.py).

    A turn's reward is the agent's utility (its share's value over the whole pool's value to
    it; 0 without a deal) + ``fairness`` x the Nash product of everyone's utilities (high only
    when every agent gets a good share) + ``coherence`` x the judge's 0..1 score of the turn's
    message (one ``/v1/judge/score`` per LLM turn; 0 = no judge calls), plus
    ``environment.illegal_move_penalty`` on an illegal turn (a bad proposal or ACCEPT)."""

    max_rounds: int = Field(4, ge=1, le=20, description="rounds without a deal = no deal")
    fairness: float = Field(0.0, ge=0.0, le=10.0)
    coherence: float = Field(0.0, ge=0.0, le=10.0)
    rubric: RubricName = Field("dialogue", description="judge rubric of the coherence score")


def build(section, payload: dict) -> Negotiation:
    return Negotiation(num_agents=len(section.seats), max_rounds=section.negotiation.max_rounds)


SPEC = EnvSpec(
    "negotiation", seats=(2, 3), build=build, options=NegotiationOptions, context_seats=True,
    # fair first (the default warm start); conceder on request (warm_start.demonstrator): it
    # asks for 0.9 of its best and concedes 0.15 a round, which scripted against the three
    # partner strategies earns 0.55 utility where the fair split earns 0.38
    # (bench/negotiation_demonstrators.py; docs/recipes/context-agents.md "Which demonstrator").
    demonstrators=("fair", "conceder"),
    verifiers=("deal",), scorer="agora.rollout.scoring:score_negotiation",
    evaluation="episodes", judged=True, metrics={
        "deal_rate": "negotiation: share of episodes ending in a deal",
        "utility": "negotiation: value of the agent's share over the whole pool's, 0 = no deal",
        "coherence": "negotiation: judge's 0..1 score of the agent's messages",
    })
