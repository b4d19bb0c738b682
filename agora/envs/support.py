"""Customer support with tools: a triage agent answers or hands off to billing or policy.

Seats (fixed): 0 ``triage`` (gets the customer's question), 1 ``billing`` (money and
arithmetic), 2 ``policy`` (rules and product facts). Each role has its own tools (options;
by default triage and policy may ``search`` the help pages, billing also has ``calculator``
and ``python``). The question and its ground truth come from ``support_tasks.make_task`` at
the env's ``level`` (1: one lookup, 2: lookup + arithmetic, 3: two lookups + arithmetic); a
curriculum sets it at construction or with ``reset(seed, level=...)``.

One step is one generation of the agent holding the conversation (the rollout runner records
each as a turn with its own tokens, so PPO trains on every call and every answer). What the
generation does, in this order of precedence:

* tool calls (``<tool>name: args</tool>``, ``agora.tools.calls``): each runs (at most
  ``max_tool_calls_per_turn`` tool runs per agent turn, i.e. per stretch of holding the
  conversation), and the results come back as the next user message,
  ``<result>...</result>``; the same agent goes on;
* ``ANSWER: ...``: the final answer to the customer; the episode ends;
* ``HANDOFF <role>``: the conversation passes to that agent (at most ``max_handoffs``);
* anything else non-empty: taken as the final answer too (the answer check reads it).

Illegal steps (``StepResult.legal`` False) are counted per role and answered with an error
message, never a forfeit: malformed calls, unknown tools or tools of another role, too many
calls, arguments that do not validate, a handoff to nobody or past the limit, an empty text.
A tool that runs and fails (``1/0``, a Python exception) is legal but not an accurate call.
A ``<result>`` block the model writes itself is cut out and counted (``forged_results``).

The env reports what happened (``outcome().info``); ``support_scores`` checks the answer and
computes the metrics (task success, tool-call accuracy, calls) from that info alone.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from agora.envs.base import ChatMessage, Outcome, StepResult
from agora.envs.support_tasks import LEVELS, SupportTask, check_answer, final_answer, make_task
from agora.tools import REGISTRY, ParsedCall, ToolRegistry, ToolResult, format_results
from agora.tools import parse_tool_calls as parse_calls
from agora.tools.registry import clip

ROLES = ("triage", "billing", "policy")
DEFAULT_TOOLS: dict[str, tuple[str, ...]] = {
    "triage": ("search",),
    "billing": ("search", "calculator", "python"),
    "policy": ("search",),
}
DUTIES = {
    "triage": "You receive customer questions. Answer simple ones yourself; hand money and "
              "arithmetic questions to billing and rule questions to policy.",
    "billing": "You answer questions about prices, fees and totals.",
    "policy": "You answer questions about rules, shipping, returns and products.",
}
# Errors that make a step illegal (bad form); "tool_error" (a tool that ran and failed) is not.
FORM_ERRORS = frozenset({"malformed", "unknown_tool", "not_allowed", "too_many",
                         "bad_arguments"})
_HANDOFF = re.compile(r"\bhand\s*-?\s*off\b\s*(?:to\s+)?:?\s*([A-Za-z_]+)?", re.IGNORECASE)
MAX_STORED_CHARS = 1000  # per transcript entry
SHOWN_TEXT_CHARS = 300  # an agent's own earlier message, in its prompt
NOTE_CHARS = 200  # the handoff note the next agent reads


class SupportEnv:
    """Triage + specialists answer one customer question with tools; see the module doc."""

    name = "support"
    num_seats = len(ROLES)

    def __init__(
        self,
        level: int = 1,
        *,
        tools: Mapping[str, Sequence[str]] | None = None,
        max_turns: int = 10,
        max_tool_calls_per_turn: int = 3,
        max_handoffs: int = 2,
        history: int = 3,
        result_chars: int = 300,
        registry: ToolRegistry | None = None,
    ) -> None:
        self.registry = registry or REGISTRY
        merged = {**DEFAULT_TOOLS, **(tools or {})}
        unknown_roles = set(merged) - set(ROLES)
        if unknown_roles:
            raise ValueError(f"support: unknown role(s) {sorted(unknown_roles)}; roles: {ROLES}")
        for role, names in merged.items():
            missing = [n for n in names if n not in self.registry]
            if missing:
                raise ValueError(f"support: {role} has unknown tool(s) {missing}; "
                                 f"known: {self.registry.names()}")
        self.tools = {role: list(merged[role]) for role in ROLES}
        if max_turns < 1 or max_tool_calls_per_turn < 1 or max_handoffs < 0 or history < 1:
            raise ValueError("support: max_turns, max_tool_calls_per_turn and history must be "
                             ">= 1, max_handoffs >= 0")
        self.max_turns = max_turns
        self.max_tool_calls_per_turn = max_tool_calls_per_turn
        self.max_handoffs = max_handoffs
        self.history = history
        self.result_chars = result_chars
        self.level = self._check_level(level)
        self.reset(0)

    @staticmethod
    def _check_level(level: int) -> int:
        if level not in LEVELS:
            raise ValueError(f"support: level must be one of {LEVELS}, got {level}")
        return int(level)

    def reset(self, seed: int = 0, level: int | None = None) -> None:
        if level is not None:
            self.level = self._check_level(level)
        self.seed = seed
        self.task: SupportTask = make_task(self.level, seed)
        self.holder = 0
        self.turn = 0
        self.stint_calls = 0  # calls run by the holder since it got the conversation
        # Per seat: its own (message, feedback) exchanges, shown back to it in order.
        self.exchanges: list[list[tuple[str, str]]] = [[] for _ in ROLES]
        self.notes: list[str] = ["" for _ in ROLES]  # the handoff note each seat got last
        self.transcript: list[dict[str, object]] = []
        self.calls: list[dict[str, object]] = []
        self.handoffs: list[dict[str, object]] = []
        self.illegal = dict.fromkeys(ROLES, 0)
        self.illegal_moves: list[dict[str, object]] = []
        self.forged = dict.fromkeys(ROLES, 0)
        self.answer: str | None = None
        self.answer_marked = False
        self.answered_by: str | None = None

    # ------------------------------------------------------------------ protocol

    @property
    def current_seat(self) -> int:
        return self.holder

    @property
    def done(self) -> bool:
        return self.answer is not None or self.turn >= self.max_turns

    def role(self, seat: int) -> str:
        return ROLES[seat]

    def legal_actions(self) -> list[str]:
        return []  # free text

    def observation(self, seat: int) -> list[ChatMessage]:
        role = ROLES[seat]
        others = [r for r in ROLES if r != role]
        tools = self.tools[role]
        lines = [f"You are the {role} agent of Brightwave's customer support. {DUTIES[role]}"]
        if tools:
            lines.append("Use a tool by writing one call, then stop:")
            lines.append(self.registry.describe(tools))
            lines.append("The result comes back as <result>...</result>.")
        lines.append(f"To pass the customer on, write HANDOFF and the agent ({', '.join(others)}).")
        lines.append("When you know the answer, write ANSWER: and the value, e.g. ANSWER: 42")
        user = f"Customer question: {self.task.question}"
        if self.notes[seat]:
            user += f"\n{self.notes[seat]}"
        messages: list[ChatMessage] = [{"role": "system", "content": "\n".join(lines)},
                                       {"role": "user", "content": user}]
        shown = self.exchanges[seat][-self.history:]
        if len(shown) < len(self.exchanges[seat]):
            messages[1]["content"] += "\n(Your earlier steps are not shown.)"
        for text, feedback in shown:
            messages.append({"role": "assistant", "content": clip(text, SHOWN_TEXT_CHARS)})
            messages.append({"role": "user", "content": feedback})
        return messages

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(legal=False, done=True, reason="episode is over")
        seat, role = self.holder, ROLES[self.holder]
        parsed = parse_calls(action)
        self.forged[role] += parsed.forged_results
        text = parsed.clean.strip()
        entry: dict[str, object] = {"turn": self.turn, "agent": role,
                                    "text": clip(text, MAX_STORED_CHARS), "kind": "message"}
        if parsed.forged_results:
            entry["forged_results"] = parsed.forged_results
        if parsed.calls:
            reason = self._run_calls(seat, text, parsed.calls, entry)
        else:
            reason = self._answer_or_handoff(seat, text, entry)
        self.transcript.append(entry)
        if reason:
            self.illegal[role] += 1
            self.illegal_moves.append({"turn": self.turn, "agent": role, "reason": reason})
        self.turn += 1
        return StepResult(legal=not reason, done=self.done, reason=reason)

    def _run_calls(self, seat: int, text: str, calls: list[ParsedCall],
                   entry: dict[str, object]) -> str:
        role = ROLES[seat]
        results: list[ToolResult] = []
        for call in calls:
            if call.malformed:
                result = ToolResult("", f"error: {call.problem}", "malformed")
            elif self.stint_calls >= self.max_tool_calls_per_turn:
                result = ToolResult(call.name, f"error: too many tool calls (at most "
                                    f"{self.max_tool_calls_per_turn} per turn); now ANSWER "
                                    "or HANDOFF", "too_many")
            else:
                name = call.name if call.name in self.registry else call.name.lower()
                result = self.registry.call(name, call.args, self.tools[role],
                                            max_chars=self.result_chars)
                if result.error in (None, "tool_error"):  # the tool ran: it uses the budget
                    self.stint_calls += 1
            results.append(result)
            self.calls.append({
                "turn": self.turn, "agent": role, "tool": result.tool or call.name,
                "args": clip(call.args or call.raw, 200), "error": result.error,
                "accurate": result.ok and result.tool in self.task.appropriate_tools,
                "output": clip(result.output, 200),
            })
        feedback = format_results(results)
        self.exchanges[seat].append((text, feedback))
        entry.update(kind="tool_calls", results=feedback)
        problems = [r.output for r in results if r.error in FORM_ERRORS]
        return "; ".join(problems)[:300]

    def _answer_or_handoff(self, seat: int, text: str, entry: dict[str, object]) -> str:
        role = ROLES[seat]
        answer, marked = final_answer(text)
        handoff = _HANDOFF.search(text)
        if handoff is not None and not marked:
            return self._hand_off(seat, (handoff.group(1) or "").lower(), text, entry)
        if not answer:
            self._feedback(seat, text, "error: write a tool call, ANSWER: <value> or "
                                       "HANDOFF <agent>")
            return "empty answer"
        self.answer, self.answer_marked, self.answered_by = answer, marked, role
        entry.update(kind="answer", answer=clip(answer, MAX_STORED_CHARS))
        return ""

    def _hand_off(self, seat: int, target: str, text: str, entry: dict[str, object]) -> str:
        role = ROLES[seat]
        others = [r for r in ROLES if r != role]
        if target not in others:
            problem = f"error: HANDOFF to whom? Write HANDOFF {' or HANDOFF '.join(others)}"
        elif len(self.handoffs) >= self.max_handoffs:
            problem = f"error: no more handoffs (at most {self.max_handoffs}); now ANSWER"
        else:
            to = ROLES.index(target)
            self.handoffs.append({"turn": self.turn, "from": role, "to": target})
            note = clip(_HANDOFF.sub("", text).strip(), NOTE_CHARS)
            self.notes[to] = f"Handed over by {role}" + (f": {note}" if note else ".")
            self.holder, self.stint_calls = to, 0
            entry.update(kind="handoff", to=target)
            return ""
        self._feedback(seat, text, problem)
        return problem.removeprefix("error: ")

    def _feedback(self, seat: int, text: str, message: str) -> None:
        self.exchanges[seat].append((text, message))

    def outcome(self) -> Outcome:
        if self.answer is not None:
            reason = "answered"
        elif self.done:
            reason = f"no answer after {self.max_turns} turns"
        else:
            reason = "unfinished"
        task = self.task
        info: dict[str, object] = {
            "level": task.level,
            "task_id": task.task_id,
            "question": task.question,
            "truth": task.answer,
            "desk": task.desk,
            "facts": list(task.facts),
            "expression": task.expression,
            "appropriate_tools": list(task.appropriate_tools),
            "answer": self.answer,
            "answer_marked": self.answer_marked,
            "answered_by": self.answered_by,
            "roles": list(ROLES),
            "tools": {r: list(t) for r, t in self.tools.items()},
            "calls": [dict(c) for c in self.calls],
            "handoffs": [dict(h) for h in self.handoffs],
            "transcript": [dict(e) for e in self.transcript],
            "illegal": dict(self.illegal),
            "illegal_moves": list(self.illegal_moves),
            "forged_results": dict(self.forged),
            "turns": self.turn,
        }
        return Outcome(winner=None, draw=False, reason=reason, info=info)

    # ------------------------------------------------------------------ helpers for agents

    def calls_this_turn(self) -> list[dict[str, object]]:
        """The current holder's calls since it got the conversation (scripted agents)."""
        role = ROLES[self.holder]
        since = max((h["turn"] for h in self.handoffs if h["to"] == role), default=-1)
        return [c for c in self.calls if c["agent"] == role and int(c["turn"]) > int(since)]

    def can_solve(self, role: str) -> bool:
        """Whether ``role`` has the tools the task needs (search, + arithmetic if any)."""
        tools = self.tools[role]
        arithmetic = any(t in tools for t in ("calculator", "python"))
        return "search" in tools and (arithmetic or not self.task.expression)


def support_scores(info: Mapping) -> dict[str, object]:
    """Success and tool-call metrics from ``Outcome.info`` (also after a JSON round trip).

    - ``success``: the final answer matches the ground truth (``check_answer``);
    - per role that acted: ``turns``, ``calls``, ``accurate_calls`` (well-formed, allowed, ran
      without error, and a tool the task needs), ``tool_accuracy`` (accurate / calls; None
      without calls);
    - ``calls``, ``accurate_calls``, ``tool_accuracy``, ``handoffs``, ``forged_results`` for
      the whole episode.
    """
    answer = info.get("answer")
    success = answer is not None and check_answer(str(answer), info["truth"])
    calls = list(info["calls"])
    per_role: dict[str, dict] = {}
    for entry in info["transcript"]:
        stats = per_role.setdefault(str(entry["agent"]),
                                    {"turns": 0, "calls": 0, "accurate_calls": 0})
        stats["turns"] += 1
    for call in calls:
        stats = per_role[str(call["agent"])]
        stats["calls"] += 1
        stats["accurate_calls"] += int(bool(call["accurate"]))
    for stats in per_role.values():
        stats["tool_accuracy"] = (stats["accurate_calls"] / stats["calls"] if stats["calls"]
                                  else None)
    accurate = sum(bool(c["accurate"]) for c in calls)
    return {
        "success": bool(success),
        "answered_by": info.get("answered_by"),
        "per_role": per_role,
        "calls": len(calls),
        "accurate_calls": accurate,
        "tool_accuracy": accurate / len(calls) if calls else None,
        "handoffs": len(info["handoffs"]),
        "forged_results": sum(dict(info["forged_results"]).values()),
    }


def support_metrics(info: Mapping, seats: list[str]) -> dict[int, dict[str, float]]:
    """Per agent (seat label), its episode metrics, put on its first seat (a shared policy in
    several seats gets one value per episode, not one per seat): ``task_success`` (the team's:
    a specialist nobody handed to still shares the outcome), ``tool_calls`` (the calls it made)
    and ``tool_accuracy`` (only when it made calls)."""
    scores = support_scores(info)
    per_role: dict[str, dict] = scores["per_role"]  # type: ignore[assignment]
    roles = list(info["roles"])
    by_label: dict[str, list[int]] = {}
    for seat, label in enumerate(seats):
        by_label.setdefault(label, []).append(seat)
    metrics: dict[int, dict[str, float]] = {}
    for label_seats in by_label.values():
        acted = [per_role[roles[s]] for s in label_seats if roles[s] in per_role]
        calls = sum(stats["calls"] for stats in acted)
        accurate = sum(stats["accurate_calls"] for stats in acted)
        values = {"task_success": float(bool(scores["success"])), "tool_calls": float(calls)}
        if calls:
            values["tool_accuracy"] = accurate / calls
        metrics[label_seats[0]] = values
    return metrics


def pick_level(levels: Sequence[int], seed: int) -> int:
    """The level of an episode when no curriculum set one: drawn from ``levels`` by seed."""
    return random.Random(f"level-{seed}").choice(list(levels))
