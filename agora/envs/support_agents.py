"""Scripted support agents (context agents for ``environment.name: support``).

They read the env's task (its reference queries and arithmetic), not the prompt, and act
through the same text interface as a model, so every call they make really runs:

* ``support_oracle`` (any seat): if its role has the tools the task needs, it searches each
  reference query, computes the expression with the calculator (or Python), and answers with
  the tool's own result; otherwise it hands off to the task's desk. A competent colleague, and
  the upper bound of the task.
* ``support_router`` (triage only): always hands off to the task's desk without searching, so
  a learner in a specialist seat gets every question.
* ``support_guesser`` (any seat): answers at once without tools, and wrongly: the failure
  baseline.
"""

from __future__ import annotations

import random

from agora.envs.support import ROLES, SupportEnv
from agora.envs.support_tasks import format_answer


def _desk(env: SupportEnv) -> str:
    """Who should take the task: its desk if that role can solve it, else any role that can."""
    desk = env.task.desk
    if env.can_solve(desk):
        return desk
    return next((r for r in ROLES if env.can_solve(r)), desk)


def hand_off(env: SupportEnv, role: str) -> str:
    target = _desk(env)
    if target == role or len(env.handoffs) >= env.max_handoffs:
        return "ANSWER: I am sorry, I cannot find that out."
    return f"This is a question for {target}.\nHANDOFF {target}"


class SupportOracle:
    name = "support_oracle"

    def act(self, env: SupportEnv, rng: random.Random) -> str:
        role = env.role(env.current_seat)
        if not env.can_solve(role):
            return hand_off(env, role)
        task, tools = env.task, env.tools[role]
        steps = [("search", query) for query in task.queries]
        if task.expression:
            steps.append(("calculator", task.expression) if "calculator" in tools
                         else ("python", f"print({task.expression})"))
        done = env.calls_this_turn()
        if len(done) < len(steps):
            tool, arg = steps[len(done)]
            return f"<tool>{tool}: {arg}</tool>"
        if task.expression:
            last = done[-1]
            answer = str(last["output"]) if not last["error"] else "unknown"
        else:
            answer = format_answer(task.answer)
        return f"ANSWER: {answer}"


class SupportRouter:
    name = "support_router"

    def act(self, env: SupportEnv, rng: random.Random) -> str:
        return hand_off(env, env.role(env.current_seat))


class SupportGuesser:
    name = "support_guesser"

    def act(self, env: SupportEnv, rng: random.Random) -> str:
        truth = env.task.answer
        if isinstance(truth, str):
            return "ANSWER: I am not sure."
        return f"ANSWER: {format_answer(float(truth) + rng.randint(1, 9))}"


SUPPORT_AGENTS: dict[str, type] = {
    "support_oracle": SupportOracle,
    "support_router": SupportRouter,
    "support_guesser": SupportGuesser,
}
# Which seat role each can play (None = any), as context_agents.CONTEXT_AGENT_FITS wants it.
SUPPORT_AGENT_FITS: dict[str, tuple[str, str | None]] = {
    "support_oracle": ("support", None),
    "support_router": ("support", "triage"),
    "support_guesser": ("support", None),
}
