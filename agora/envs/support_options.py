"""``environment.support`` of a run config (agora/envs/support.py), and the env built from it.

Kept beside the env rather than in agora/config/run.py so that the tool checks (which import the
tool registry and users' tool modules) stay out of the config module's imports.
"""

from __future__ import annotations

from pydantic import Field, ValidationInfo, field_validator

from agora.envs.spec import EnvOptions, EnvSpec
from agora.envs.support import DEFAULT_TOOLS, ROLES, SupportEnv, pick_level
from agora.envs.support_tasks import LEVELS


class SupportOptions(EnvOptions):
    """``environment.name: support``: triage + billing + policy answer a customer with tools.

    Each episode's level is drawn from ``levels`` by seed, unless ``curriculum.enabled`` lets
    the curriculum set it (its level 0-2 = support level 1-3). Every turn of the episode gets
    ``reward.correct`` if the final answer matches the ground truth, else ``reward.wrong``;
    plus ``call_bonus`` per accurate tool call the turn made; plus
    ``environment.illegal_move_penalty`` on an illegal turn (a malformed or forbidden call, a
    bad handoff, an empty answer)."""

    levels: list[int] = Field(default_factory=lambda: [1], min_length=1)
    max_turns: int = Field(10, ge=1, le=40, description="generations per episode, all agents")
    max_tool_calls_per_turn: int = Field(3, ge=1, le=20,
                                         description="per agent, per stretch of holding it")
    max_handoffs: int = Field(2, ge=0, le=10)
    history: int = Field(3, ge=1, le=20, description="own earlier exchanges in the prompt")
    result_chars: int = Field(300, ge=40, le=4000, description="longest tool result shown")
    call_bonus: float = Field(0.0, ge=0.0, le=1.0)
    # Modules to import before the tools are checked: they register users' @tool functions.
    tool_modules: list[str] = Field(default_factory=list)
    tools: dict[str, list[str]] = Field(
        default_factory=lambda: {r: list(t) for r, t in DEFAULT_TOOLS.items()})

    @field_validator("levels")
    @classmethod
    def _known_levels(cls, levels: list[int]) -> list[int]:
        wrong = [lv for lv in levels if lv not in LEVELS]
        if wrong:
            raise ValueError(f"unknown level(s) {wrong}; levels are {list(LEVELS)}")
        return levels

    @field_validator("tool_modules")
    @classmethod
    def _importable(cls, modules: list[str]) -> list[str]:
        from agora.tools import import_tool_modules

        try:
            import_tool_modules(modules)
        except ImportError as err:
            raise ValueError(str(err)) from None
        return modules

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, tools: dict[str, list[str]], info: ValidationInfo
                     ) -> dict[str, list[str]]:
        from agora.tools import REGISTRY

        if "tool_modules" not in info.data:  # its own error is reported already
            return tools
        for role, names in tools.items():
            if role not in ROLES:
                raise ValueError(f"unknown role '{role}'; roles are {list(ROLES)}")
            unknown = [n for n in names if n not in REGISTRY]
            if unknown:
                raise ValueError(f"{role}: unknown tool(s) {unknown}; known: {REGISTRY.names()}"
                                 " (register your own with @agora.tools.tool and list its "
                                 "module in tool_modules)")
        return {**{r: list(t) for r, t in DEFAULT_TOOLS.items()}, **tools}


def build_support_env(opts: SupportOptions, payload: dict) -> SupportEnv:
    """The episode's env at a level from ``opts.levels`` drawn by the episode's seed (a
    curriculum then sets ``env.level`` itself: agora/train/curriculum/ladders.py, ENV_LEVELS)."""
    from agora.tools import import_tool_modules

    import_tool_modules(opts.tool_modules)  # a worker process registers users' tools too
    level = pick_level(opts.levels, int(payload.get("seed", 0)))
    return SupportEnv(level, tools=opts.tools, max_turns=opts.max_turns,
                      max_tool_calls_per_turn=opts.max_tool_calls_per_turn,
                      max_handoffs=opts.max_handoffs, history=opts.history,
                      result_chars=opts.result_chars)


SPEC = EnvSpec(
    "support", seats=(3, 3), build=lambda section, payload: build_support_env(section.support,
                                                                              payload),
    options=SupportOptions, roles=lambda opts: list(ROLES), context_seats=True,
    demonstrators=("support_oracle",),
    verifiers=("tool_task",), scorer="agora.rollout.scoring:score_support",
    success_metric="task_success", sandboxed=True,  # the python tool runs in the reward's sandbox
    evaluation="episodes", metrics={
        "task_success": "support: share of episodes whose final answer is right",
        "tool_accuracy": "support: share of the agent's tool calls that were well-formed, "
                         "allowed, ran without error and used a tool the task needs",
        "tool_calls": "support: tool calls the agent made per episode",
    })
