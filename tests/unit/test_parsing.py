"""Model-written code is parsed on a rollout worker's threads: parse_python must hold up when
many threads parse at once (CPython 3.11's ast.parse alone fails now and then with
``SystemError: AST constructor recursion depth mismatch``)."""

from __future__ import annotations

import ast
import gc
import threading

from agora.envs.code_debug import check_code
from agora.sandbox.parsing import parse_python

THREADS = 8
ROUNDS = 15


def _source(functions: int = 60) -> str:
    """A module of nested expressions: deep enough that building its AST takes a while."""
    body = " + ".join(f"(x * {i} - (y if x > {i} else {i}))" for i in range(12))
    return "\n".join(f"def f{n}(x, y):\n    return [{body} for _ in range(3)]\n"
                     for n in range(functions))


class _Finalised:
    """Garbage whose finaliser runs Python code: a collection during another thread's parse
    then switches threads mid-construction, which is what moves the shared depth."""

    def __del__(self) -> None:
        sum(range(50))


def _hammer(parse, source: str, errors: list[BaseException], functions: int) -> None:
    for _ in range(ROUNDS):
        junk = [_Finalised() for _ in range(200)]
        for item in junk:  # reference cycles: only the cycle collector frees them
            item.me = item
        del junk
        try:
            tree = parse(source)
            assert len(tree.body) == functions
        except BaseException as exc:  # noqa: BLE001 - collected and asserted on below
            errors.append(exc)


def _parse_from_threads(parse) -> list[BaseException]:
    source, errors = _source(), []
    old = gc.get_threshold()
    gc.set_threshold(50)  # collect often, during parses
    try:
        threads = [threading.Thread(target=_hammer, args=(parse, source, errors, 60))
                   for _ in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*old)
    return errors


def test_parse_python_from_many_threads_never_fails() -> None:
    errors = _parse_from_threads(parse_python)
    assert errors == []


def test_parse_python_is_ast_parse() -> None:
    source = _source(3)
    assert ast.dump(parse_python(source)) == ast.dump(ast.parse(source))


def test_check_code_from_many_threads_finds_every_function() -> None:
    source = _source(20)
    results: list[str] = []

    def check() -> None:
        for _ in range(ROUNDS):
            results.append(check_code(source, "f19"))

    threads = [threading.Thread(target=check) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [""] * (THREADS * ROUNDS)


def test_runtime_parses_of_code_and_expressions_all_take_the_lock(monkeypatch) -> None:
    """The rollout worker's parses (a fixer's code, a calculator call, a python tool call, the
    verifier's test names) go through parse_python, so none races another thread's."""
    import agora.envs.code_debug as code_debug
    import agora.rewards.verifiers.code as code_verifier
    import agora.tools.builtins as tools

    parsed: list[str] = []

    def counting(source: str) -> ast.Module:
        parsed.append(source)
        return parse_python(source)

    for module in (code_debug, code_verifier, tools):
        monkeypatch.setattr(module, "parse_python", counting)
    assert code_debug.check_code("def f():\n    return 1\n", "f") == ""
    assert tools.calculate("19 x 12") == 228
    assert "print" in tools._with_printed_last_expression("19*12")
    assert code_verifier.expected_test_names("def test_a():\n    assert True\n") == ["test_a"]
    assert parsed == ["def f():\n    return 1\n", "19*12", "19*12",
                      "def test_a():\n    assert True\n"]
