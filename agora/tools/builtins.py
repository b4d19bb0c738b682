"""The built-in tools: ``calculator``, ``python`` (sandboxed) and ``search`` (BM25, local corpus).

Registered on ``agora.tools.REGISTRY`` when ``agora.tools`` is imported.
"""

from __future__ import annotations

import ast
import math
import operator
import os
import re

import simpleeval

from agora.sandbox.parsing import parse_python
from agora.sandbox.remote import run_untrusted
from agora.sandbox.runner import SandboxLimits
from agora.tools.registry import ToolRegistry, ToolResult, clip
from agora.tools.search import DEFAULT_CORPUS, index_for

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64  # 9**9**9 must fail fast, not freeze the worker
MAX_CODE_CHARS = 2000
PYTHON_OUTPUT_CHARS = 300
# Model-written code runs only in agora/sandbox/runner.py, with small limits: the python tool is for
# arithmetic and short scripts, and an episode waits for it.
PYTHON_LIMITS = SandboxLimits(cpu_seconds=2, wall_seconds=6.0, memory_mb=256, file_size_mb=1,
                              disk_mb=8, max_processes=4, max_output_bytes=4096)
SEARCH_RESULTS = 2
SEARCH_DOC_CHARS = 220


def _power(base: float, exponent: float) -> float:
    if abs(exponent) > MAX_EXPONENT:
        raise ValueError(f"exponent above {MAX_EXPONENT}")
    return operator.pow(base, exponent)


# Arithmetic only: no names, attributes, strings, comparisons or comprehensions. simpleeval
# walks the AST itself (no eval) and caps string/iterable sizes; the power is capped here.
_OPERATORS = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: _power, ast.USub: operator.neg, ast.UAdd: operator.pos,
}
_FUNCTIONS = {"round": round, "abs": abs, "min": min, "max": max, "sqrt": math.sqrt}


def format_number(value: float) -> str:
    """``84``, ``307.2``, ``0.3333333333``: integers without a point, floats to 10 digits."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.10g}" if isinstance(value, float) else str(value)


def calculate(expr: str) -> float:
    """Evaluate arithmetic (``+ - * / // % ** ( )``, round/abs/min/max/sqrt); raises on
    anything else. ``^`` means power, ``x``/``×`` between numbers and ``$`` are tolerated."""
    text = expr.strip().rstrip("=").replace("$", "").replace("×", "*").replace("^", "**")
    text = re.sub(r"(?<=\d)\s*[xX]\s*(?=[\d(])", "*", text.replace("÷", "/"))
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    evaluator = simpleeval.SimpleEval(operators=_OPERATORS, functions=_FUNCTIONS, names={})
    # Parsed here, not by simpleeval's own ast.parse: tool calls run on worker threads
    # (agora.sandbox.parsing).
    tree = parse_python(text.strip())
    if not tree.body:
        raise ValueError("empty expression")
    try:
        value = evaluator.eval(text, previously_parsed=tree.body[0])
    except KeyError as err:  # simpleeval's lookup of an operator left out of _OPERATORS
        raise ValueError("only arithmetic operators are allowed") from err
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("the result is not a number")
    if isinstance(value, int) and abs(value) > 10**30:
        raise ValueError("the result is too large")
    return value


def register_builtins(registry: ToolRegistry) -> None:
    @registry.tool(name="calculator", description="arithmetic: + - * / ** ( ), round, sqrt",
                   example="12*7")
    def calculator(expr: str) -> ToolResult | str:
        try:
            return format_number(calculate(expr))
        except (simpleeval.InvalidExpression, ValueError, ArithmeticError, TypeError,
                SyntaxError) as err:
            reason = str(err).split(", for expression")[0] or type(err).__name__
            return ToolResult("calculator", f"error: {clip(reason, 160)}", "tool_error")

    @registry.tool(name="python", description="runs Python code in a sandbox, shows its output",
                   example="print(19*12)")
    def python(code: str) -> ToolResult | str:
        return run_sandboxed(code)

    @registry.tool(name="search", description="searches the help pages",
                   example="Plus plan price")
    def search(query: str) -> str:
        folder = os.environ.get("AGORA_CORPUS_DIR", str(DEFAULT_CORPUS))
        hits = index_for(folder).search(query, SEARCH_RESULTS)
        if not hits:
            return "no matching pages"
        return "\n".join(f"{h.doc.title}: {clip(h.doc.text, SEARCH_DOC_CHARS)}" for h in hits)


def _with_printed_last_expression(code: str) -> str:
    """Like a REPL: a final bare expression (``19*12``) is printed. Parsing with ``ast`` here
    only reads the code; it runs in the sandbox alone."""
    tree = parse_python(code)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1].value
        is_print = (isinstance(last, ast.Call) and isinstance(last.func, ast.Name)
                    and last.func.id == "print")
        if not is_print:
            tree.body[-1] = ast.Expr(ast.Call(ast.Name("print", ast.Load()), [last], []))
            return ast.unparse(ast.fix_missing_locations(tree))
    return code


def run_sandboxed(code: str) -> ToolResult | str:
    code = code.strip()
    if code.startswith("```"):
        code = code.strip("`").removeprefix("python").strip()
    if not code:
        return ToolResult("python", "error: no code", "bad_arguments")
    if len(code) > MAX_CODE_CHARS:
        return ToolResult("python", f"error: code longer than {MAX_CODE_CHARS} characters",
                          "bad_arguments")
    try:
        code = _with_printed_last_expression(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        return ToolResult("python", f"error: {type(err).__name__}: {err}", "tool_error")
    result = run_untrusted(code, limits=PYTHON_LIMITS)
    out = result.stdout.strip()
    if result.ok:
        return clip(out, PYTHON_OUTPUT_CHARS) if out else "(no output)"
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    detail = lines[-1] if lines else result.reason
    return ToolResult("python", clip(f"error ({result.status}): {detail}", PYTHON_OUTPUT_CHARS),
                      "tool_error")
