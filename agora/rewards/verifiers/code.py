"""Code verifier: run a model's program against test code in the sandbox and count passing tests.

The candidate and the tests run together in one sandboxed process (the tests call the
candidate's functions). A small harness executes the candidate as module `solution`, then the
test code, then every top-level `def test_*` in order, and reports each result on stdout as a
line `@@AGORA-TEST@@<nonce> <json>`. The parent only counts lines carrying the nonce it passed in
on stdin, and requires every expected test (found by parsing the tests with `ast` in the parent)
to be reported exactly once plus a final "done" line, so printing a fake summary, exiting early,
or crashing the harness can only fail.

Residual risk, by design of in-process testing: the candidate runs in the same interpreter as the
harness, so code written to attack the harness can still win. It can walk the stack
(`sys._getframe`) to read the nonce, monkeypatch what the tests use, or return objects whose
`__eq__` is always True. The harness makes the cheap forgeries fail (nonce never in argv, env or
files; stdin swapped for /dev/null before the candidate runs; the test file deleted; the
functions it needs bound before the candidate can patch them), but rewards from this verifier
should still be audited for such patterns (e.g. `_getframe`, `f_back`, `__eq__` overrides).
"""

from __future__ import annotations

import ast
import json
import re
import secrets

from pydantic import BaseModel, Field

from agora.sandbox.parsing import parse_python
from agora.sandbox.runner import SandboxLimits, SandboxStatus, run_python

MARKER = "@@AGORA-TEST@@"
_MODULE_TEST = "<module>"  # the name used when the tests have no test functions

# Runs inside the sandbox as main.py, with solution.py and tests.py beside it. Stdin carries the
# nonce, then the JSON list of test names to run (found by the parent, so both sides agree).
_HARNESS = r"""
import json as _json
import os as _os
import sys as _sys
import types as _types


def _run():
    raw = b""  # read fd 0 directly: nothing may stay in sys.stdin's buffer for the candidate
    while chunk := _os.read(0, 4096):
        raw += chunk
    nonce, names_json = raw.decode().split("\n")[:2]
    names = _json.loads(names_json)
    del raw, chunk, names_json
    null = _os.open(_os.devnull, _os.O_RDONLY)
    _os.dup2(null, 0)
    _os.close(null)
    out = _os.dup(1)
    write, dumps, marker = _os.write, _json.dumps, "@@AGORA-TEST@@" + nonce + " "

    def emit(event):
        write(out, (marker + dumps(event) + "\n").encode())

    def describe(exc):
        text = f"{type(exc).__name__}: {exc}"
        return text if len(text) <= 300 else text[:297] + "..."

    sources = {}
    for name in ("solution.py", "tests.py"):
        with open(name, encoding="utf-8") as fh:
            sources[name] = fh.read()
        _os.unlink(name)
    module = _types.ModuleType("solution")
    module.__file__ = "solution.py"
    _sys.modules["solution"] = module
    try:
        exec(compile(sources["solution.py"], "solution.py", "exec"), module.__dict__)
    except SystemExit as exc:
        if exc.code not in (None, 0):
            emit({"solution_error": describe(exc)})
            return
    except BaseException as exc:
        emit({"solution_error": describe(exc)})
        return
    namespace = dict(module.__dict__)
    namespace["__name__"] = "tests"
    try:
        exec(compile(sources["tests.py"], "tests.py", "exec"), namespace)
    except BaseException as exc:
        emit({"tests_error": describe(exc)})
        return
    for name in names:
        if name == "<module>":
            emit({"test": name, "ok": True, "error": ""})
            continue
        try:
            namespace[name]()
        except BaseException as exc:
            emit({"test": name, "ok": False, "error": describe(exc)})
        else:
            emit({"test": name, "ok": True, "error": ""})
    emit({"done": True})


_run()
"""


class CodeVerdict(BaseModel):
    passed: bool = Field(..., description="every expected test passed and the run ended cleanly")
    tests_passed: int
    tests_total: int
    status: str = Field(..., description="sandbox status, or 'invalid_report' on forgery")
    reason: str
    failures: dict[str, str] = Field(default_factory=dict, description="test name -> error")
    duration_s: float = 0.0


def expected_test_names(tests: str) -> list[str]:
    """Top-level `def test*` functions of the test code, or ["<module>"] for plain asserts."""
    try:
        tree = parse_python(tests)
    except SyntaxError as exc:  # the tests come from our dataset, not from the model
        raise ValueError(f"test code does not parse: {exc}") from exc
    names = [
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
    ]
    return list(dict.fromkeys(names)) or [_MODULE_TEST]


def verify_code(code: str, tests: str, limits: SandboxLimits | None = None) -> CodeVerdict:
    """Run `code` then `tests` in the sandbox; passed only if every expected test passed."""
    expected = expected_test_names(tests)
    nonce = secrets.token_hex(16)
    result = run_python(
        _HARNESS,
        stdin=f"{nonce}\n{json.dumps(expected)}\n",
        limits=limits,
        files={"solution.py": code, "tests.py": tests},
    )
    prefix = f"{MARKER}{nonce} "
    outcomes: dict[str, tuple[bool, str]] = {}
    done = 0
    load_error = ""
    forged = False
    for line in result.stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            event = json.loads(line[len(prefix) :])
        except ValueError:
            event = None
        if not isinstance(event, dict):
            forged = True
        elif "solution_error" in event or "tests_error" in event:
            load_error = str(event.get("solution_error") or event.get("tests_error"))
        elif event.get("done") is True:
            done += 1
        elif event.get("test") in expected and event["test"] not in outcomes:
            outcomes[event["test"]] = (event.get("ok") is True, str(event.get("error", "")))
        else:  # a test reported twice, or one the harness was never asked to run
            forged = True
    # The harness writes each report once; anything else means someone else wrote reports.
    forged = forged or done > 1 or (done == 1 and bool(load_error))
    if forged:
        outcomes = {}
    failures = {name: err for name, (ok, err) in outcomes.items() if not ok}
    n_passed = sum(ok for ok, _ in outcomes.values())
    status = "invalid_report" if forged else result.status.value
    if forged:
        reason = "the test report was tampered with"
    elif load_error:
        reason = f"could not load: {load_error}"
    elif result.status is not SandboxStatus.OK:
        reason = f"sandbox: {result.reason}"
    elif not done:
        reason = "the harness did not finish (the solution exited or interfered)"
    else:
        reason = f"{n_passed}/{len(expected)} tests passed"
    passed = (
        not forged
        and not load_error
        and done == 1
        and result.status is SandboxStatus.OK
        and n_passed == len(expected)
    )
    return CodeVerdict(
        passed=passed,
        tests_passed=n_passed,
        tests_total=len(expected),
        status=status,
        reason=reason,
        failures=failures,
        duration_s=result.duration_s,
    )


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


def extract_code(text: str) -> str:
    """The program in a model answer: the last ```python block, else the last untagged block,
    else the whole text. An unclosed fence (a truncated answer) runs to the end of the text."""
    python_blocks: list[str] = []
    plain_blocks: list[str] = []
    for match in _FENCE.finditer(text):
        lang, body = match.group(1).lower(), match.group(2)
        if lang in ("python", "py", "python3"):
            python_blocks.append(body)
        elif not lang:
            plain_blocks.append(body)
    blocks = python_blocks or plain_blocks
    return (blocks[-1] if blocks else text).strip("\n")
