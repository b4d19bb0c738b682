"""The tool registry: named Python functions an agent may call from its text.

A tool is a plain function registered with the ``@tool`` decorator (``name`` and
``description`` are what the agent's prompt shows). Its arguments are validated from its type
hints by a pydantic model built from the signature, so a model that writes ``quantity: "lots"``
for an ``int`` gets a clear error *result* back, never an exception into the episode: an
agent's text is untrusted, and a bad call is a move to count and answer, not a crash.

How a call's argument text maps onto the function's parameters (the syntax must stay simple
enough for a 135M model): a JSON object (``{"a": 1, "b": 2}``) is keyword arguments; anything
else is the value of the tool's single required parameter (``calculator: 12*7`` -> ``expr``).
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from agora.sandbox.remote import SandboxUnavailable

NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_\-]{0,31}"
DEFAULT_MAX_CHARS = 400  # longest result text fed back to the agent


@dataclass(frozen=True)
class ToolResult:
    """What one call produced. ``error`` is None on success, else its kind: ``malformed``,
    ``unknown_tool``, ``not_allowed``, ``too_many``, ``bad_arguments`` or ``tool_error``."""

    tool: str
    output: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    func: Callable[..., Any]
    args_model: type[BaseModel]
    example: str  # the argument text of an example call, shown in prompts

    @property
    def single_param(self) -> str | None:
        """The one required parameter that a plain (non-JSON) argument text fills."""
        required = [n for n, f in self.args_model.model_fields.items() if f.is_required()]
        return required[0] if len(required) == 1 else None

    def call(self, arg_text: str, max_chars: int = DEFAULT_MAX_CHARS) -> ToolResult:
        """Run the tool on the agent's argument text; every failure becomes an error result."""
        try:
            kwargs = self._arguments(arg_text)
            args = self.args_model.model_validate(kwargs)
        except ValidationError as err:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in err.errors())
            return ToolResult(self.name, clip(f"error: bad arguments for {self.name}: "
                                              f"{problems}", max_chars), "bad_arguments")
        except ValueError as err:
            return ToolResult(self.name, clip(f"error: bad arguments for {self.name}: {err}",
                                              max_chars), "bad_arguments")
        try:
            output = self.func(**dict(args))
        except SandboxUnavailable:  # the service's fault, not the agent's: retry the episode
            raise
        except Exception as err:  # a tool's own failure is the call's result, not a crash
            return ToolResult(self.name, clip(f"error: {self.name} failed: "
                                              f"{type(err).__name__}: {err}", max_chars),
                              "tool_error")
        if isinstance(output, ToolResult):  # a tool may report its own error kind
            return ToolResult(self.name, clip(output.output, max_chars), output.error)
        return ToolResult(self.name, clip(str(output), max_chars))

    def _arguments(self, arg_text: str) -> dict[str, Any]:
        text = arg_text.strip()
        if text.startswith("{"):
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = None
            if isinstance(data, dict):
                return data
        param = self.single_param
        if param is None:
            fields = ", ".join(self.args_model.model_fields)
            raise ValueError(f"give a JSON object with the fields {fields}")
        return {param: text}


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 3)] + "..."


def args_model_for(func: Callable[..., Any], name: str) -> type[BaseModel]:
    """A pydantic model of ``func``'s parameters from its type hints (required: no default)."""
    hints = typing.get_type_hints(func)
    fields: dict[str, Any] = {}
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool '{name}': *args/**kwargs cannot be validated")
        if param.name not in hints:
            raise TypeError(f"tool '{name}': parameter '{param.name}' needs a type hint")
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (hints[param.name], default)
    return create_model(f"{name}_args", __base__=_ArgsBase, **fields)


class ToolRegistry:
    """Tools by name. ``agora.tools.REGISTRY`` holds the built-ins and users' tools."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def tool(self, name: str | None = None, description: str = "", example: str = ""
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator: register the function as a tool (the function itself is unchanged)."""

        def register(func: Callable[..., Any]) -> Callable[..., Any]:
            self.register(func, name=name, description=description, example=example)
            return func

        return register

    def register(self, func: Callable[..., Any], *, name: str | None = None,
                 description: str = "", example: str = "") -> Tool:
        tool_name = name or func.__name__
        if not re.fullmatch(NAME_PATTERN, tool_name):
            raise ValueError(f"tool name '{tool_name}': letters, digits, _ and - (max 32)")
        if tool_name in self._tools and self._tools[tool_name].func is not func:
            raise ValueError(f"tool '{tool_name}' is already registered")
        text = (description or inspect.getdoc(func) or "").strip().splitlines()
        entry = Tool(tool_name, text[0] if text else tool_name, func,
                     args_model_for(func, tool_name), example)
        self._tools[tool_name] = entry
        return entry

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def call(self, name: str, arg_text: str, allowed: list[str] | None = None,
             max_chars: int = DEFAULT_MAX_CHARS) -> ToolResult:
        """Call by name; unknown or (with ``allowed``) not-permitted tools are error results."""
        entry = self._tools.get(name)
        if entry is None:
            known = ", ".join(allowed if allowed is not None else self.names()) or "none"
            return ToolResult(name, clip(f"error: unknown tool '{name}' (tools: {known})",
                                         max_chars), "unknown_tool")
        if allowed is not None and name not in allowed:
            mine = ", ".join(allowed) or "none"
            return ToolResult(name, clip(f"error: tool '{name}' is not yours (your tools: "
                                         f"{mine})", max_chars), "not_allowed")
        return entry.call(arg_text, max_chars)

    def describe(self, names: list[str]) -> str:
        """Prompt lines: one example call and description per tool."""
        lines = []
        for name in names:
            entry = self._tools[name]
            lines.append(f"<tool>{name}: {entry.example or '...'}</tool>  {entry.description}")
        return "\n".join(lines)
