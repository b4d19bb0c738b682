"""Reading Python source without running it (``ast.parse``), safe from many threads at once.

Why a lock: CPython 3.11's AST constructor keeps its recursion depth in per-interpreter state,
and a thread switch inside ``ast.parse`` lets another thread's parse move it, which fails with
``SystemError: AST constructor recursion depth mismatch`` (python/cpython gh-106905). A rollout
worker plays episodes on threads (``workers.concurrency``) and checks model-written code as it
goes, and the services parse on their thread pools. Seen in a code-debug-humaneval run: 6
episodes in 1,000 failed this way (and were played again). Parsing HumanEval's longest
function takes 0.2 ms, against seconds to generate it, so taking turns costs next to nothing.
"""

from __future__ import annotations

import ast
import threading

_PARSE_LOCK = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """``ast.parse(source)``, one thread at a time. Raises what ast.parse raises
    (SyntaxError, ValueError for a NUL byte, RecursionError, MemoryError)."""
    with _PARSE_LOCK:
        return ast.parse(source)
