"""Tools agents call from their text (docs/architecture.md "Environments": tool use).

``REGISTRY`` holds the built-ins (``calculator``, ``python`` in the sandbox, ``search`` over
the local corpus) and every tool users add with the ``tool`` decorator::

    from agora.tools import tool

    @tool(name="weather", description="today's weather in a city", example="Paris")
    def weather(city: str) -> str:
        ...

A run makes its own tools available to workers by listing the module that registers them in
``environment.support.tool_modules``. Call syntax and result feedback: ``agora.tools.calls``.
"""

from __future__ import annotations

import importlib

from agora.tools.builtins import register_builtins
from agora.tools.calls import ParsedCall, ParsedText, format_results, parse_tool_calls, scrub
from agora.tools.registry import Tool, ToolRegistry, ToolResult

REGISTRY = ToolRegistry()
register_builtins(REGISTRY)
tool = REGISTRY.tool
BUILTIN_TOOLS = ("calculator", "python", "search")


def import_tool_modules(modules: list[str]) -> None:
    """Import modules whose ``@tool`` decorators register users' tools (ImportError names
    the module)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:
            raise ImportError(f"cannot import tool module '{name}': {type(err).__name__}: "
                              f"{err}") from err


__all__ = ["REGISTRY", "BUILTIN_TOOLS", "ParsedCall", "ParsedText", "Tool", "ToolRegistry",
           "ToolResult", "format_results", "import_tool_modules", "parse_tool_calls", "scrub",
           "tool"]
